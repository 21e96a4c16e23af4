"""Switch-Base 8: T5-Base with an 8-expert top-1 mixture in every other FFN layer.

    python -m zoo.launch --config=configs/switch_base_8.py --mode=plan
    python -m zoo.launch --config=configs/switch_base_8.py:smoke --workdir=/tmp/zoo/switch

Source: Fedus et al. 2022, "Switch Transformers", sec. 2 and Table 1 (top-1 routing, capacity
factor 1.25 in training, balance coefficient 0.01, router z-loss from ST-MoE 0.001); the
T5-Base shape (configs/t5_base.py). MoE layers are the 2nd, 4th, ... of each stack.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_encoder_layers = 12
  m.num_decoder_layers = 12
  m.d_model = 768
  m.num_heads = 12
  m.head_dim = 64
  m.mlp_dim = 3072  # each expert
  presets.t5(c, version='1.0')
  # sec. 2.4 and 3: pre-trained as T5 (C4, span corruption, Adafactor); batch and steps for
  # this size are not restated, so T5's baseline recipe (sec. 3.1.2) stands
  recipes.t5(c, version='1.0')
  m.moe.num_experts, m.moe.top_k, m.moe.every = 8, 1, 2
  m.moe.capacity_factor = 1.25

  return presets.variant(c, arg)
