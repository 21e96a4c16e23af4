"""T5 v1.1 Base: 12+12 layers, d_model 768, 12 heads of 64, d_ff 2048.

    python -m zoo.launch --config=configs/t5_v1_1_base.py --mode=plan
    python -m zoo.launch --config=configs/t5_v1_1_base.py:smoke --workdir=/tmp/zoo/t5_v1_1_base

Source: the T5 v1.1 release notes (google-research/text-to-text-transfer-transformer,
released_checkpoints.md); google/t5-v1_1-base config.json.
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
  m.mlp_dim = 2048  # d_ff
  presets.t5(c, version='1.1')
  recipes.t5(c, version='1.1')

  return presets.variant(c, arg)
