"""Llama 3.1 405B: 126 layers, d_model 16384, 128 heads sharing 8 kv heads, RoPE theta 500000.

    python -m zoo.launch --config=configs/llama3_405b.py --mode=plan
    python -m zoo.launch --config=configs/llama3_405b.py:smoke --workdir=/tmp/zoo/llama3_405b

Source: meta-llama/Llama-3.1-405B config.json; Dubey et al. 2024, Table 3.
Context 131072 through "llama3" RoPE scaling of the 8192-token pretraining context
(rope_scaling in the same config.json); data.seq_len stays 4096 by default.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 128_256
  m.num_layers = 126
  m.d_model = 16384
  m.num_heads = 128  # head_dim 128
  m.num_kv_heads = 8  # GQA
  m.mlp_dim = 53248
  presets.llama(c, rope_theta=500_000.0, max_length=131_072)
  # Dubey et al. 2024, sec. 3.4.1: peak 8e-5, 8,000 warmup steps, cosine to 8e-7; 15.6T
  # tokens (sec. 3.1) in batches ramped 4M -> 8M -> 16M tokens (the last kept here)
  recipes.llama(c, learning_rate=8e-5, tokens=15.6e12, warmup_steps=8000, floor=0.01,
                batch_tokens=16 * 2**20)
  m.rope_scaling.update(type='llama3', factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                        original_max_length=8192)  # config.json rope_scaling

  return presets.variant(c, arg)
