"""GPT-3 350M: 24 layers, d_model 1024, 16 heads of 64, 2048-token context.

    python -m zoo.launch --config=configs/gpt3_350m.py --mode=plan
    python -m zoo.launch --config=configs/gpt3_350m.py:smoke --workdir=/tmp/zoo/gpt3_350m

Source: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1. GPT-3
alternates dense and locally banded sparse attention layers; the zoo uses dense attention
in every layer (the parameter count is the same).
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
  presets.gpt2(c, max_length=2048)
  recipes.gpt3(c, batch_size=256, learning_rate=0.0003)  # Table 2.1

  return presets.variant(c, arg)
