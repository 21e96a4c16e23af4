"""T5 v1.1 Large: 24+24 layers, d_model 1024, 16 heads of 64, d_ff 2816.

    python -m zoo.launch --config=configs/t5_v1_1_large.py --mode=plan
    python -m zoo.launch --config=configs/t5_v1_1_large.py:smoke --workdir=/tmp/zoo/t5_v1_1_large

Source: the T5 v1.1 release notes (google-research/text-to-text-transfer-transformer,
released_checkpoints.md); google/t5-v1_1-large config.json.
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
  m.num_heads = 16
  m.head_dim = 64  # d_kv
  m.mlp_dim = 2816  # d_ff
  presets.t5(c, version='1.1')
  recipes.t5(c, version='1.1')

  return presets.variant(c, arg)
