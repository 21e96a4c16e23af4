"""GPT-3 125M: 12 layers, d_model 768, 12 heads of 64, 2048-token context.

    python -m zoo.launch --config=configs/gpt3_125m.py --mode=plan
    python -m zoo.launch --config=configs/gpt3_125m.py:smoke --workdir=/tmp/zoo/gpt3_125m

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
  m.num_layers = 12
  m.d_model = 768
  m.num_heads = 12  # head_dim 64
  m.mlp_dim = 3072  # 4 * d_model
  presets.gpt2(c, max_length=2048)
  recipes.gpt3(c, batch_size=256, learning_rate=0.0006)  # Table 2.1

  return presets.variant(c, arg)
