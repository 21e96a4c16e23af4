"""Kimi K2: DeepSeek-V3's layout at 1T parameters: 61 layers (the first dense), d_model
7168, 64 heads of multi-head latent attention, 384 routed experts (top 8, sigmoid
affinities, no expert groups) and 1 shared; trained with MuonClip.

    python -m zoo.launch --config=configs/kimi_k2.py --mode=plan
    python -m zoo.launch --config=configs/kimi_k2.py:smoke --workdir=/tmp/zoo/kimi_k2

Source: moonshotai/Kimi-K2-Base config.json (model_type kimi_k2, DeepseekV3ForCausalLM);
Kimi Team 2025, "Kimi K2: Open Agentic Intelligence", sec. 2.3 (the architecture beside
DeepSeek-V3's: 384 experts instead of 256, 64 heads instead of 128, one dense layer instead
of three, no expert grouping; 1.04T parameters, 32.6B activated), sec. 2.1 and 2.4 (the
recipe: zoo/recipes.py). The shapes give 1,026,408,209,408 parameters and 32,861,477,888
activated per token (31,687,072,768 without the input embedding), as transformers counts
DeepseekV3ForCausalLM on this config.json (the model card's "1T total, 32B activated"; the
report's table rounds to 1.04T and 32.6B, 1.3% and 0.8% off the shapes); the release holds no
multi-token prediction module.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 163_840
  m.num_layers = 61
  m.d_model = 7168
  m.num_heads = 64  # 2.3: half DeepSeek-V3's 128 (the cost of attention at long context)
  m.mlp_dim = 18_432  # the dense layer's
  presets.deepseek(c, max_length=131_072)
  m.mla.q_lora_rank = 1536
  m.rope_theta = 50_000.0
  m.rope_scaling.update(factor=32.0, beta_fast=1.0, beta_slow=1.0, mscale=1.0,
                        mscale_all_dim=1.0)  # config.json: YaRN x32 over 4,096 tokens
  moe = m.moe
  moe.num_experts, moe.top_k, moe.expert_mlp_dim, moe.num_shared_experts = 384, 8, 2048, 1
  moe.router, moe.num_groups, moe.top_groups = 'sigmoid', 0, 0  # n_group 1: no groups
  moe.normalize_top_k, moe.routed_scale, moe.first_dense = True, 2.827, 1
  recipes.kimi_k2(c)
  return presets.variant(c, arg)
