"""GPT-3 13B: 40 layers, d_model 5120, 40 heads of 128, 2048-token context.

    python -m zoo.launch --config=configs/gpt3_13b.py --mode=plan
    python -m zoo.launch --config=configs/gpt3_13b.py:smoke --workdir=/tmp/zoo/gpt3_13b

Source: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1. GPT-3
alternates dense and locally banded sparse attention layers; the zoo uses dense attention
in every layer (the parameter count is the same).
Table 2.1 prints d_model 5140; we use 5120 = 40 heads x 128.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 40
  m.d_model = 5120
  m.num_heads = 40  # head_dim 128
  m.mlp_dim = 20480  # 4 * d_model
  presets.gpt2(c, max_length=2048)
  recipes.gpt3(c, batch_size=1024, learning_rate=0.0001)  # Table 2.1

  return presets.variant(c, arg)
