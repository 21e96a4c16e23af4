"""Qwen 3 235B-A22B: 94 layers, d_model 4096, 64 heads sharing 4 (head_dim 128), QK-norm,
and in every layer 128 SwiGLU experts of width 1536, top 8 renormalised, dropless, no
shared expert; a 32,768-token context.

    python -m zoo.launch --config=configs/qwen3_235b_a22b.py --mode=plan
    python -m zoo.launch --config=configs/qwen3_235b_a22b.py:smoke --workdir=/tmp/zoo/qwen3_235b

Source: Qwen/Qwen3-235B-A22B config.json (norm_topk_prob true, router_aux_loss_coef
0.001); Qwen Team 2025, "Qwen3 Technical Report", Table 2 (235B parameters, 22B active:
the shapes give 235,093,634,560 and 22,190,763,520) and sec. 3 (about 36T training tokens).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 151_936
  m.num_layers = 94
  m.d_model = 4096
  m.num_heads = 64
  m.num_kv_heads = 4
  m.head_dim = 128
  m.mlp_dim = 12_288  # config.json intermediate_size: no dense layer uses it
  presets.qwen3(c)
  recipes.llama(c, learning_rate=1.5e-4, tokens=36e12)
  o = m.moe
  o.num_experts, o.top_k, o.every, o.expert_mlp_dim = 128, 8, 1, 1536
  o.normalize_top_k, o.capacity_factor, o.balance_loss = True, 0.0, 0.001
  return presets.variant(c, arg)
