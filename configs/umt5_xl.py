"""umT5 XL: 24+24 layers, d_model 2048, 32 heads of 64, d_ff 5120, a relative bias table in every
layer, vocabulary 256,384.

    python -m zoo.launch --config=configs/umt5_xl.py --mode=plan
    python -m zoo.launch --config=configs/umt5_xl.py:smoke --workdir=/tmp/zoo/umt5_xl

Source: Chung et al. 2023, "UniMax: Fairer and More Effective Language Sampling for
Large-Scale Multilingual Pretraining" (umT5, sec. 5); google/umt5-xl config.json. The
pretraining recipe is T5 v1.1's (zoo/recipes.py: t5); UniMax's mC4 sampling is data, not
model shape.
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
  presets.umt5(c)
  recipes.t5(c, version='1.1')

  return presets.variant(c, arg)
