"""Qwen 3 32B (dense): 64 layers, d_model 5120, 64 heads sharing 8, head_dim 128 (heads x
head_dim 8192 > d_model), QK-norm, RoPE base 1,000,000, untied output.

    python -m zoo.launch --config=configs/qwen3_32b.py --mode=plan
    python -m zoo.launch --config=configs/qwen3_32b.py:smoke --workdir=/tmp/zoo/qwen3_32b

Source: Qwen/Qwen3-32B config.json; Qwen Team 2025, "Qwen3 Technical Report", Table 1 and
the model card (32.8B parameters, 31.2B non-embedding: the shapes give 32,762,123,264 and
31,206,298,624) and sec. 3 (about 36T training tokens).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 151_936
  m.num_layers = 64
  m.d_model = 5120
  m.num_heads = 64
  m.num_kv_heads = 8
  m.head_dim = 128
  m.mlp_dim = 25_600
  presets.qwen3(c)
  recipes.llama(c, learning_rate=1.5e-4, tokens=36e12)
  return presets.variant(c, arg)
