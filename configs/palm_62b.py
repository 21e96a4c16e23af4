"""PaLM 62B: 64 layers, d_model 8192, 32 query heads of 256, one shared kv head.

    python -m zoo.launch --config=configs/palm_62b.py --mode=plan
    python -m zoo.launch --config=configs/palm_62b.py:smoke --workdir=/tmp/zoo/palm_62b

Source: Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with Pathways", Table 1.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 64
  m.d_model = 8192
  m.num_heads = 32  # head_dim 256 (set by the preset), multi-query
  presets.palm(c)
  recipes.palm(c, batch_size=1024, doublings=1)  # Table 1: 512 -> 1024 sequences

  return presets.variant(c, arg)
