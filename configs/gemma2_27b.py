"""Gemma 2 27B: 46 layers alternating local (4096-token window) and global attention, d_model
4608, 32 heads sharing 16, head_dim 128, queries scaled by 144^-0.5 (d_model / heads), logits
soft-capped (attention 50, output 30).

    python -m zoo.launch --config=configs/gemma2_27b.py --mode=plan
    python -m zoo.launch --config=configs/gemma2_27b.py:smoke --workdir=/tmp/zoo/gemma2_27b

Source: google/gemma-2-27b config.json; Gemma Team 2024, "Gemma 2", Table 1 (1,179,648,000
embedding and 26,047,480,320 non-embedding parameters: 27,227,128,320, "27B") and sec. 3
(13T training tokens, an 8192-token context).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 256_000
  m.num_layers = 46
  m.d_model = 4608
  m.num_heads = 32
  m.num_kv_heads = 16
  m.head_dim = 128
  m.mlp_dim = 36_864
  presets.gemma(c, version=2, max_length=8192)
  m.rope_theta = 10_000.0
  a = m.attention
  a.pattern, a.window = 'LG', 4096
  a.query_scale = 144.0  # query_pre_attn_scalar = d_model / num_heads, not head_dim
  a.softcap, m.final_softcap = 50.0, 30.0
  # no optimizer settings in the report: Llama 2's (sec. 2.2) stand in, with its 13T tokens
  recipes.llama(c, learning_rate=1.5e-4, tokens=13e12)
  return presets.variant(c, arg)
