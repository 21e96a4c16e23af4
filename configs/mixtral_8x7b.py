"""Mixtral 8x7B: the Mistral 7B shape with 8 SwiGLU experts per layer, top-2, dropless.

    python -m zoo.launch --config=configs/mixtral_8x7b.py --mode=plan
    python -m zoo.launch --config=configs/mixtral_8x7b.py:smoke --workdir=/tmp/zoo/mixtral

Source: Jiang et al. 2024, "Mixtral of Experts", Table 1; mistralai/Mixtral-8x7B-v0.1
config.json (no sliding window, rope_theta 1e6, router_aux_loss_coef 0.02).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 32_000
  m.num_layers = 32
  m.d_model = 4096
  m.num_heads = 32  # head_dim 128
  m.num_kv_heads = 8  # GQA
  m.mlp_dim = 14336  # each expert
  presets.llama(c, rope_theta=1_000_000.0, max_length=32768)
  # Jiang et al. 2024 publish no training recipe or token count: Llama 2 7B's (Touvron
  # et al. 2023, sec. 2.2: peak 3e-4, 2T tokens) stands in
  recipes.llama(c, learning_rate=3e-4, tokens=2e12)
  m.moe.num_experts, m.moe.top_k, m.moe.every = 8, 2, 1
  m.moe.capacity_factor = 0.0  # dropless
  m.moe.balance_loss = 0.02

  return presets.variant(c, arg)
