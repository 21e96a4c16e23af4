"""gpt-oss-20b: 24 layers, d_model 2880, 64 heads of 64 sharing 8 with biases and a learned
sink each, 128-token sliding windows alternating with full attention, YaRN x32 to 131,072
tokens, and in every layer 32 clamped-SwiGLU experts of width 2880 with biases, top 4.

    python -m zoo.launch --config=configs/gpt_oss_20b.py --mode=plan
    python -m zoo.launch --config=configs/gpt_oss_20b.py:smoke --workdir=/tmp/zoo/gpt_oss_20b

Source: openai/gpt-oss-20b config.json; OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model
Card", Table 1: 20.91B parameters, 3.61B active per token. The shapes give 20,914,757,184
(the zoo's and transformers' count); the card's active count leaves out the input
embedding (3,608,307,264 of the zoo's 4,187,440,704 active, which counts both tables).
Training: the card gives no optimizer, batch or token settings (pre-training "trillions of
tokens"; checkpoints in MXFP4 after post-training), so Llama 2's recipe stands in (sec. 2.2),
at the 4,096-token original context YaRN extends.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 24
  m.mlp_dim = 2880  # config.json intermediate_size: every layer's experts; no dense MLP
  presets.gpt_oss(c)
  m.moe.num_experts = 32
  recipes.llama(c, learning_rate=3e-4, tokens=2e12)  # not published: see the docstring
  m.moe.balance_loss, m.moe.z_loss = 0.001, 0.0  # config.json router_aux_loss_coef
  return presets.variant(c, arg)
