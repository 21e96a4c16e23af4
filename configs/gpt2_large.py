"""GPT-2 774M: 36 layers, d_model 1280, 20 heads, 1024-token context.

    python -m zoo.launch --config=configs/gpt2_large.py --mode=plan
    python -m zoo.launch --config=configs/gpt2_large.py:smoke --workdir=/tmp/zoo/gpt2_large

Source: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", Table 2;
the released checkpoint (openai-community/gpt2-large).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 36
  m.d_model = 1280
  m.num_heads = 20  # head_dim 64
  m.mlp_dim = 5120  # 4 * d_model
  presets.gpt2(c)
  recipes.gpt2(c, learning_rate=0.00025)  # GPT-3 760M's (Table 2.1)

  return presets.variant(c, arg)
