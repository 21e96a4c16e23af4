"""DeepSeek-V3: 61 layers (the first 3 dense), d_model 7168, 128 heads of multi-head latent
attention, 256 routed experts (top 8 of 4 groups out of 8, sigmoid affinities) and 1 shared.

    python -m zoo.launch --config=configs/deepseek_v3.py --mode=plan
    python -m zoo.launch --config=configs/deepseek_v3.py:smoke --workdir=/tmp/zoo/deepseek_v3

Source: deepseek-ai/DeepSeek-V3 config.json; DeepSeek-AI 2024, "DeepSeek-V3 Technical
Report": sec. 2.1.1 (MLA: latent 512, query latent 1536, head dims 128 + 64 rotary, values
128), 2.1.2 (sigmoid affinities, gates normalised over the chosen experts, the loss-free
bias; node-limited routing, which config.json expresses as 8 groups keeping 4), 4.2 (61
layers, d_model 7168, 128 heads, the first 3 layers dense (18,432 wide), 1 shared and 256
routed experts of 2048, 8 chosen; YaRN x40 over 4K; the recipe: zoo/recipes.py), 2.2 (one
multi-token prediction module, an MoE block). 671B parameters (the shapes give
671,026,404,352 without the multi-token prediction module, as transformers counts
DeepseekV3ForCausalLM; the module adds 11,610,067,968, and the hub's copy of the embedding
and output head beside it the rest of the report's 14B) and 37B activated per token.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 129_280
  m.num_layers = 61
  m.d_model = 7168
  m.num_heads = 128
  m.mlp_dim = 18_432  # the dense layers'
  presets.deepseek(c)
  m.mla.q_lora_rank = 1536
  m.rope_scaling.update(mscale=1.0, mscale_all_dim=1.0)
  moe = m.moe
  moe.num_experts, moe.top_k, moe.expert_mlp_dim, moe.num_shared_experts = 256, 8, 2048, 1
  moe.router, moe.num_groups, moe.top_groups = 'sigmoid', 8, 4
  moe.normalize_top_k, moe.routed_scale, moe.first_dense = True, 2.5, 3
  m.mtp.depth = 1  # 2.2: one multi-token prediction module (config.json's num_nextn_predict_layers)
  recipes.deepseek_v3(c)
  return presets.variant(c, arg)
