"""T5 v1.1 XL: 24+24 layers, d_model 2048, 32 heads of 64, d_ff 5120.

    python -m zoo.launch --config=configs/t5_v1_1_xl.py --mode=plan
    python -m zoo.launch --config=configs/t5_v1_1_xl.py:smoke --workdir=/tmp/zoo/t5_v1_1_xl

Source: the T5 v1.1 release notes (google-research/text-to-text-transfer-transformer,
released_checkpoints.md); google/t5-v1_1-xl config.json.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_encoder_layers = 24
  m.num_decoder_layers = 24
  m.d_model = 2048
  m.num_heads = 32
  m.head_dim = 64  # d_kv
  m.mlp_dim = 5120  # d_ff
  presets.t5(c, version='1.1')
  recipes.t5(c, version='1.1')

  return presets.variant(c, arg)
