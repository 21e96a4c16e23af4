"""T5 Base (v1.0): 12+12 layers, d_model 768, 12 heads of 64, d_ff 3072.

    python -m zoo.launch --config=configs/t5_base.py --mode=plan
    python -m zoo.launch --config=configs/t5_base.py:smoke --workdir=/tmp/zoo/t5_base

Source: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", sec. 3.7 and Table 14; t5-base config.json.
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
  m.head_dim = 64  # d_kv
  m.mlp_dim = 3072  # d_ff
  presets.t5(c, version='1.0')
  recipes.t5(c, version='1.0')

  return presets.variant(c, arg)
