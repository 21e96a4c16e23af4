"""GPT-2 355M: 24 layers, d_model 1024, 16 heads, 1024-token context.

    python -m zoo.launch --config=configs/gpt2_medium.py --mode=plan
    python -m zoo.launch --config=configs/gpt2_medium.py:smoke --workdir=/tmp/zoo/gpt2_medium

Source: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", Table 2;
the released checkpoint (openai-community/gpt2-medium).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 24
  m.d_model = 1024
  m.num_heads = 16  # head_dim 64
  m.mlp_dim = 4096  # 4 * d_model
  presets.gpt2(c)
  recipes.gpt2(c, learning_rate=0.0003)  # GPT-3 350M's (Table 2.1)

  return presets.variant(c, arg)
