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


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 24
  m.d_model = 2048
  m.num_heads = 16  # head_dim 128
  m.mlp_dim = 8192  # 4 * d_model
  presets.gpt2(c, max_length=2048)
  c.train.batch_size = 512  # 1.0M tokens (Table 2.1)
  c.optim.learning_rate = 0.0002  # Table 2.1
  c.optim.b1, c.optim.b2, c.optim.eps = 0.9, 0.95, 1e-8  # Appendix B

  return presets.variant(c, arg)
