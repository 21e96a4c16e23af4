"""GPT-3 1.3B: 24 layers, d_model 2048, 16 heads of 128, 2048-token context.

    python -m zoo.launch --config=configs/gpt3_1_3b.py --mode=plan
    python -m zoo.launch --config=configs/gpt3_1_3b.py:smoke --workdir=/tmp/zoo/gpt3_1_3b

Source: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1. GPT-3
alternates dense and locally banded sparse attention layers; the zoo uses dense attention
in every layer (the parameter count is the same).
Table 2.1 prints 24 heads of 128, which does not give d_model 2048; we keep
d_model = 2048 = 16 heads x 128 (the published parameter count needs d_model 2048).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 24
  m.d_model = 2048
  m.num_heads = 16  # head_dim 128
  m.mlp_dim = 8192  # 4 * d_model
  presets.gpt2(c, max_length=2048)
  recipes.gpt3(c, batch_size=512, learning_rate=0.0002)  # Table 2.1

  return presets.variant(c, arg)
