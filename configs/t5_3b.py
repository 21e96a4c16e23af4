"""T5 3B (v1.0): 24+24 layers, d_model 1024, 32 heads of 128, d_ff 16384.

    python -m zoo.launch --config=configs/t5_3b.py --mode=plan
    python -m zoo.launch --config=configs/t5_3b.py:smoke --workdir=/tmp/zoo/t5_3b

Source: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", sec. 3.7 and Table 14; t5-3b config.json.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_encoder_layers = 24
  m.num_decoder_layers = 24
  m.d_model = 1024
  m.num_heads = 32
  m.head_dim = 128  # d_kv
  m.mlp_dim = 16384  # d_ff
  presets.t5(c, version='1.0')
  recipes.t5(c, version='1.0')

  return presets.variant(c, arg)
