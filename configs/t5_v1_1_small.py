"""T5 v1.1 Small: 8+8 layers, d_model 512, 6 heads of 64, d_ff 1024.

    python -m zoo.launch --config=configs/t5_v1_1_small.py --mode=plan
    python -m zoo.launch --config=configs/t5_v1_1_small.py:smoke --workdir=/tmp/zoo/t5_v1_1_small

Source: the T5 v1.1 release notes (google-research/text-to-text-transfer-transformer,
released_checkpoints.md); google/t5-v1_1-small config.json.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_encoder_layers = 8
  m.num_decoder_layers = 8
  m.d_model = 512
  m.num_heads = 6
  m.head_dim = 64  # d_kv
  m.mlp_dim = 1024  # d_ff
  presets.t5(c, version='1.1')
  recipes.t5(c, version='1.1')

  return presets.variant(c, arg)
