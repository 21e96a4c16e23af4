"""Llama 3.1 405B: 126 layers, d_model 16384, 128 heads sharing 8 kv heads, RoPE theta 500000.

    python -m zoo.launch --config=configs/llama3_405b.py --mode=plan
    python -m zoo.launch --config=configs/llama3_405b.py:smoke --workdir=/tmp/zoo/llama3_405b

Source: meta-llama/Llama-3.1-405B config.json; Dubey et al. 2024, Table 3.
Context 8192 (Llama 3). Llama 3.1 extends it to 128k with "llama3" RoPE scaling, which
the zoo does not implement yet; positions beyond 8192 are not supported.
"""

from zoo import config as config_lib
from zoo import presets


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 128_256
  m.num_layers = 126
  m.d_model = 16384
  m.num_heads = 128  # head_dim 128
  m.num_kv_heads = 8  # GQA
  m.mlp_dim = 53248
  presets.llama(c, rope_theta=500_000.0, max_length=8192)

  if arg == 'smoke':
    return presets.smoke(c)
  if arg:
    raise ValueError(f'unknown variant {arg!r}; use :smoke or nothing')
  return c
