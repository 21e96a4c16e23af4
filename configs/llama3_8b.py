"""Llama 3 8B: 32 layers, d_model 4096, 32 heads sharing 8 kv heads, RoPE theta 500000.

    python -m zoo.launch --config=configs/llama3_8b.py --mode=plan
    python -m zoo.launch --config=configs/llama3_8b.py:smoke --workdir=/tmp/zoo/llama3_8b

Source: meta-llama/Meta-Llama-3-8B config.json.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


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
  # Llama 3 (Dubey et al. 2024, sec. 3.1): 15T tokens; its 8B recipe is not given, so
  # Llama 2 7B's (Touvron et al. 2023, sec. 2.2: peak 3e-4)
  recipes.llama(c, learning_rate=3e-4, tokens=15e12)

  return presets.variant(c, arg)
