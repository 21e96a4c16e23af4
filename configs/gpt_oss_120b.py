"""gpt-oss-120b: 36 layers, d_model 2880, 64 heads of 64 sharing 8 with biases and a learned
sink each, 128-token sliding windows alternating with full attention, YaRN x32 to 131,072
tokens, and in every layer 128 clamped-SwiGLU experts of width 2880 with biases, top 4.

    python -m zoo.launch --config=configs/gpt_oss_120b.py --mode=plan
    python -m zoo.launch --config=configs/gpt_oss_120b.py:smoke --workdir=/tmp/zoo/gpt_oss_120b

Source: openai/gpt-oss-120b config.json; OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model
Card", Table 1: 116.83B parameters, 5.13B active per token. The shapes give 116,829,156,672
(the zoo's and transformers' count); the card's active count leaves out the input
embedding (5,132,849,472 of the zoo's 5,711,982,912 active, which counts both tables).
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
  m.num_layers = 36
  m.mlp_dim = 2880  # config.json intermediate_size: every layer's experts; no dense MLP
  presets.gpt_oss(c)
  m.moe.num_experts = 128
  recipes.llama(c, learning_rate=3e-4, tokens=2e12)  # not published: see the docstring
  m.moe.balance_loss, m.moe.z_loss = 0.001, 0.0  # config.json router_aux_loss_coef
  return presets.variant(c, arg)
