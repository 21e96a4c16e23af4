"""Llama 3 8B: 32 layers, d_model 4096, 32 heads sharing 8 kv heads, RoPE theta 500000.

    python -m zoo.launch --config=configs/llama3_8b.py --mode=plan
    python -m zoo.launch --config=configs/llama3_8b.py:smoke --workdir=/tmp/zoo/llama3_8b

Source: meta-llama/Meta-Llama-3-8B config.json.
"""

from zoo import config as config_lib
from zoo import presets


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 128_256
  m.num_layers = 32
  m.d_model = 4096
  m.num_heads = 32  # head_dim 128
  m.num_kv_heads = 8  # GQA
  m.mlp_dim = 14336
  presets.llama(c, rope_theta=500_000.0, max_length=8192)

  return presets.variant(c, arg)
