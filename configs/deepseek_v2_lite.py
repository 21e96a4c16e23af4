"""DeepSeek-V2-Lite: 27 layers (the first dense), d_model 2048, 16 heads of multi-head
latent attention without a query latent, 64 routed experts (top 6, softmax, greedy) and 2
shared.

    python -m zoo.launch --config=configs/deepseek_v2_lite.py --mode=plan
    python -m zoo.launch --config=configs/deepseek_v2_lite.py:smoke --workdir=/tmp/zoo/dsv2l

Source: deepseek-ai/DeepSeek-V2-Lite config.json; DeepSeek-AI 2024, "DeepSeek-V2",
appendix B (15.7B parameters, 2.4B activated; the recipe: zoo/recipes.py). Its routing is
not V3's: softmax probabilities, the top 6 over all experts, gates as they are (not
renormalised), scale 1.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 102_400
  m.num_layers = 27
  m.d_model = 2048
  m.num_heads = 16
  m.mlp_dim = 10_944  # the dense layer's
  presets.deepseek(c)
  m.rope_scaling.update(mscale=0.707, mscale_all_dim=0.707)
  moe = m.moe
  moe.num_experts, moe.top_k, moe.expert_mlp_dim, moe.num_shared_experts = 64, 6, 1408, 2
  moe.normalize_top_k, moe.first_dense = False, 1
  recipes.deepseek_v2_lite(c)
  return presets.variant(c, arg)
