"""GPT-2 124M: 12 layers, d_model 768, 12 heads, 1024-token context.

    python -m zoo.launch --config=configs/gpt2_small.py --mode=plan
    python -m zoo.launch --config=configs/gpt2_small.py:smoke --workdir=/tmp/zoo/gpt2_small

Source: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", Table 2;
the released checkpoint (openai-community/gpt2).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 12
  m.d_model = 768
  m.num_heads = 12  # head_dim 64
  m.mlp_dim = 3072  # 4 * d_model
  presets.gpt2(c)
  recipes.gpt2(c, learning_rate=0.0006)  # GPT-3 125M's (Table 2.1)

  return presets.variant(c, arg)
