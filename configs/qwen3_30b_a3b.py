"""Qwen 3 30B-A3B: 48 layers, d_model 2048, 32 heads sharing 4 (head_dim 128), QK-norm, and
in every layer 128 SwiGLU experts of width 768, top 8 renormalised, dropless, no shared
expert; a 32,768-token context.

    python -m zoo.launch --config=configs/qwen3_30b_a3b.py --mode=plan
    python -m zoo.launch --config=configs/qwen3_30b_a3b.py:smoke --workdir=/tmp/zoo/qwen3_30b_a3b

Source: Qwen/Qwen3-30B-A3B-Base config.json (norm_topk_prob true, router_aux_loss_coef
0.001); Qwen Team 2025, "Qwen3 Technical Report", Table 2 (30.5B parameters, 3.3B active:
the shapes give 30,532,122,624 and 3,353,032,704) and sec. 3 (about 36T training tokens,
32,768-token sequences in the last stage).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 151_936
  m.num_layers = 48
  m.d_model = 2048
  m.num_heads = 32
  m.num_kv_heads = 4
  m.head_dim = 128
  m.mlp_dim = 6144  # config.json intermediate_size: no dense layer uses it
  presets.qwen3(c)
  # the report gives no optimizer settings: Llama 2's (sec. 2.2) stand in, with its 36T
  recipes.llama(c, learning_rate=3e-4, tokens=36e12)
  o = m.moe
  o.num_experts, o.top_k, o.every, o.expert_mlp_dim = 128, 8, 1, 768
  o.normalize_top_k, o.capacity_factor, o.balance_loss = True, 0.0, 0.001
  return presets.variant(c, arg)
