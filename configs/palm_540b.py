"""PaLM 540B: 118 layers, d_model 18432, 48 query heads of 256, one shared kv head.

    python -m zoo.launch --config=configs/palm_540b.py --mode=plan
    python -m zoo.launch --config=configs/palm_540b.py:smoke --workdir=/tmp/zoo/palm_540b

Source: Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with Pathways", Table 1.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 118
  m.d_model = 18432
  m.num_heads = 48  # head_dim 256 (set by the preset), multi-query
  presets.palm(c)
  recipes.palm(c, batch_size=2048, doublings=2)  # sec. 5: 512 -> 1024 -> 2048 sequences

  return presets.variant(c, arg)
