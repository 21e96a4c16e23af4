"""GPT-2 1.5B: 48 layers, d_model 1600, 25 heads, 1024-token context.

    python -m zoo.launch --config=configs/gpt2_xl.py --mode=plan
    python -m zoo.launch --config=configs/gpt2_xl.py:smoke --workdir=/tmp/zoo/gpt2_xl

Source: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", Table 2;
the released checkpoint (openai-community/gpt2-xl).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 48
  m.d_model = 1600
  m.num_heads = 25  # head_dim 64
  m.mlp_dim = 6400  # 4 * d_model
  presets.gpt2(c)
  recipes.gpt2(c, learning_rate=0.0002)  # GPT-3 1.3B's (Table 2.1)

  return presets.variant(c, arg)
