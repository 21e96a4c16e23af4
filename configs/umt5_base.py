"""umT5 Base: 12+12 layers, d_model 768, 12 heads of 64, d_ff 2048, a relative bias table in every
layer, vocabulary 256,384.

    python -m zoo.launch --config=configs/umt5_base.py --mode=plan
    python -m zoo.launch --config=configs/umt5_base.py:smoke --workdir=/tmp/zoo/umt5_base

Source: Chung et al. 2023, "UniMax: Fairer and More Effective Language Sampling for
Large-Scale Multilingual Pretraining" (umT5, sec. 5); google/umt5-base config.json. The
pretraining recipe is T5 v1.1's (zoo/recipes.py: t5); UniMax's mC4 sampling is data, not
model shape.
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
  presets.umt5(c)
  recipes.t5(c, version='1.1')

  return presets.variant(c, arg)
