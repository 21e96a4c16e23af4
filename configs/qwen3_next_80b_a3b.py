"""Qwen3-Next 80B-A3B: 48 layers, d_model 2048, three Gated DeltaNet layers to one
gated-attention layer (16 query heads of 256 sharing 2, a quarter of each rotated), and in
every layer 512 SwiGLU experts of width 512, top 10 renormalised, beside a gated shared
expert; a 262,144-token context.

    python -m zoo.launch --config=configs/qwen3_next_80b_a3b.py --mode=plan
    python -m zoo.launch --config=configs/qwen3_next_80b_a3b.py:smoke --workdir=/tmp/zoo/qwen3_next

Source: Qwen/Qwen3-Next-80B-A3B-Instruct config.json (full_attention_interval 4,
linear_* shapes, norm_topk_prob true, router_aux_loss_coef 0.001, partial_rotary_factor
0.25); Qwen Team 2025, "Qwen3-Next" (80B parameters, 3B active, 15T training tokens). The
shapes give 79,674,391,296 parameters (as transformers counts them) and 3,563,764,480 active
with the input embedding left out (the MoE cards' way).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 48
  m.d_model = 2048
  m.mlp_dim = 5120  # config.json intermediate_size: no dense layer uses it
  presets.qwen3_next(c)
  # the release gives no optimizer settings: Llama 2's (sec. 2.2) stand in, with its 15T
  recipes.llama(c, learning_rate=3e-4, tokens=15e12)
  m.moe.num_experts, m.moe.every = 512, 1
  return presets.variant(c, arg)
