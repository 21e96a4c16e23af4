"""GPT-3 175B: 96 layers, d_model 12288, 96 heads of 128, 2048-token context.

    python -m zoo.launch --config=configs/gpt3_175b.py --mode=plan
    python -m zoo.launch --config=configs/gpt3_175b.py:smoke --workdir=/tmp/zoo/gpt3_175b

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
  m.num_layers = 96
  m.d_model = 12288
  m.num_heads = 96  # head_dim 128
  m.mlp_dim = 49152  # 4 * d_model
  presets.gpt2(c, max_length=2048)
  recipes.gpt3(c, batch_size=1536, learning_rate=6e-05)  # Table 2.1

  return presets.variant(c, arg)
