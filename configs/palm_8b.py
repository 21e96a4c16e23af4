"""PaLM 8B: 32 layers, d_model 4096, 16 query heads of 256, one shared kv head.

    python -m zoo.launch --config=configs/palm_8b.py --mode=plan
    python -m zoo.launch --config=configs/palm_8b.py:smoke --workdir=/tmp/zoo/palm_8b

Source: Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with Pathways", Table 1.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 32
  m.d_model = 4096
  m.num_heads = 16  # head_dim 256 (set by the preset), multi-query
  presets.palm(c)
  recipes.palm(c, batch_size=512, doublings=1)  # Table 1: 256 -> 512 sequences

  return presets.variant(c, arg)
