"""T5 Small (v1.0): 6+6 layers, d_model 512, 8 heads of 64, d_ff 2048.

    python -m zoo.launch --config=configs/t5_small.py --mode=plan
    python -m zoo.launch --config=configs/t5_small.py:smoke --workdir=/tmp/zoo/t5_small

Source: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", sec. 3.7 and Table 14; t5-small config.json.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_encoder_layers = 6
  m.num_decoder_layers = 6
  m.d_model = 512
  m.num_heads = 8
  m.head_dim = 64  # d_kv
  m.mlp_dim = 2048  # d_ff
  presets.t5(c, version='1.0')
  recipes.t5(c, version='1.0')

  return presets.variant(c, arg)
