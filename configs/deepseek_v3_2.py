"""DeepSeek-V3.2: DeepSeek-V3's shape with DeepSeek Sparse Attention: in each of the 61
layers a lightning indexer (64 heads of 128, from the 1536-wide query latent) keeps 2048 keys
per query and multi-head latent attention attends to those alone.

    python -m zoo.launch --config=configs/deepseek_v3_2.py --mode=plan
    python -m zoo.launch --config=configs/deepseek_v3_2.py:warmup --mode=plan  # stage one
    python -m zoo.launch --config=configs/deepseek_v3_2.py:smoke --workdir=/tmp/zoo/dsv32

Source: deepseek-ai/DeepSeek-V3.2-Exp config.json (DeepseekV32ForCausalLM: index_n_heads 64,
index_head_dim 128, index_topk 2048; the rest DeepSeek-V3's, configs/deepseek_v3.py);
DeepSeek-AI 2025, "DeepSeek-V3.2", sec. 2 (DSA: the indexer's ReLU scores weighted per head,
top-k selection, MLA in its MQA mode) and 2.1 (the two stages of continued pre-training:
zoo/recipes.py). The shapes give 671,877,929,216 parameters without the multi-token
prediction module (DeepSeek-V3's 671,026,404,352 and 61 indexers of 13,959,424), as
transformers counts DeepseekV32ForCausalLM on meta; the card's 685B adds the prediction
module and the hub's copies of the embedding and head beside it. 38,403,807,488 activated
per token.

`:warmup` is stage one (model.mla.index_stage='warmup': dense attention, the indexers alone
train); the default is stage two, the sparse stage, which starts from a warm-up's run
(train.init_params); `:warmup,smoke` shrinks stage one.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  stage, _, rest = (arg or '').partition(',')
  if stage != 'warmup':
    stage, rest = 'sparse', arg
  c = config_lib.base()
  m = c.model
  m.vocab_size = 129_280  # config.json, as DeepSeek-V3's
  m.num_layers = 61
  m.d_model = 7168
  m.num_heads = 128
  m.mlp_dim = 18_432  # the dense layers'
  presets.deepseek(c)
  m.mla.q_lora_rank = 1536
  m.mla.update(index_heads=64, index_head_dim=128)  # config.json's index_n_heads, _head_dim
  m.rope_scaling.update(mscale=1.0, mscale_all_dim=1.0)
  moe = m.moe
  moe.num_experts, moe.top_k, moe.expert_mlp_dim, moe.num_shared_experts = 256, 8, 2048, 1
  moe.router, moe.num_groups, moe.top_groups = 'sigmoid', 8, 4
  moe.normalize_top_k, moe.routed_scale, moe.first_dense = True, 2.5, 3
  m.mtp.depth = 1  # config.json's num_nextn_predict_layers
  recipes.deepseek_v3_2(c, stage)
  return presets.variant(c, rest or None)
