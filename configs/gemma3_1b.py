"""Gemma 3 1B (text): 26 layers, five local (512-token window) to one global, ending in two
local ones; d_model 1152, 4 heads sharing 1, head_dim 256, QK-norm; RoPE base 10k on local
and 1M on global layers; a 32k context.

    python -m zoo.launch --config=configs/gemma3_1b.py --mode=plan
    python -m zoo.launch --config=configs/gemma3_1b.py:smoke --workdir=/tmp/zoo/gemma3_1b

Source: google/gemma-3-1b-pt config.json; Gemma Team 2025, "Gemma 3 Technical Report",
Table 1 (302M embedding, 698M non-embedding parameters; the shapes give 301,989,888 +
697,896,064 = 999,885,952, "1B") and sec. 2.2 (2T training tokens).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 262_144
  m.num_layers = 26  # 4 x 'LLLLLG' + 2 local
  m.d_model = 1152
  m.num_heads = 4
  m.num_kv_heads = 1
  m.head_dim = 256
  m.mlp_dim = 6912
  presets.gemma(c, version=3, max_length=32_768)
  m.rope_theta, m.rope_local_theta = 1_000_000.0, 10_000.0  # global, local
  a = m.attention
  a.pattern, a.window = 'LLLLLG', 512
  a.query_scale = 256.0  # query_pre_attn_scalar
  # no optimizer settings in the report: Llama 2's (sec. 2.2) stand in, with its 2T tokens
  recipes.llama(c, learning_rate=3e-4, tokens=2e12)
  return presets.variant(c, arg)
