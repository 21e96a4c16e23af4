"""A small DeepSeekMoE-style decoder: fine-grained experts (64 narrow SwiGLU experts, top-6)
beside 2 always-on shared experts, in every layer.

    python -m zoo.launch --config=configs/deepseek_moe_small.py --mode=plan
    python -m zoo.launch --config=configs/deepseek_moe_small.py:smoke --workdir=/tmp/zoo/dsmoe

Source: the architecture of Dai et al. 2024, "DeepSeekMoE" (fine-grained expert
segmentation: experts of 1/4 width, more of them routed; shared expert isolation). The
shape is the zoo's own (2.8B parameters, 0.48B active), not a released checkpoint.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 32_000
  m.num_layers = 12
  m.d_model = 1280
  m.num_heads = 10  # head_dim 128
  m.mlp_dim = 3456  # the dense width an expert is a quarter of
  presets.llama(c, rope_theta=10_000.0, max_length=4096)
  m.moe.num_experts, m.moe.top_k, m.moe.every = 64, 6, 1
  m.moe.expert_mlp_dim = 864  # mlp_dim / 4
  m.moe.num_shared_experts = 2
  m.moe.capacity_factor = 0.0  # dropless
  recipes.deepseek_moe(c)  # the recipe of DeepSeekMoE 2B, the nearest published size

  return presets.variant(c, arg)
