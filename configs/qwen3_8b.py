"""Qwen 3 8B (dense): 36 layers, d_model 4096, 32 heads sharing 8, head_dim 128, QK-norm,
RoPE base 1,000,000, untied output.

    python -m zoo.launch --config=configs/qwen3_8b.py --mode=plan
    python -m zoo.launch --config=configs/qwen3_8b.py:smoke --workdir=/tmp/zoo/qwen3_8b

Source: Qwen/Qwen3-8B-Base config.json; Qwen Team 2025, "Qwen3 Technical Report", Table 1
and the model card (8.2B parameters, 6.95B non-embedding: the shapes give 8,190,735,360 and
6,946,075,648) and sec. 3 (about 36T training tokens; 4,096-token sequences in the first
stages, 32,768 in the last).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 151_936
  m.num_layers = 36
  m.d_model = 4096
  m.num_heads = 32
  m.num_kv_heads = 8
  m.head_dim = 128
  m.mlp_dim = 12_288
  presets.qwen3(c)
  # the report gives no optimizer settings: Llama 2's (sec. 2.2) stand in, with its 36T
  recipes.llama(c, learning_rate=3e-4, tokens=36e12)
  return presets.variant(c, arg)
