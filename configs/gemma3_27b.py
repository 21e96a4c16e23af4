"""Gemma 3 27B (text): 62 layers, five local (1024-token window) to one global, ending in two
local ones; d_model 5376, 32 heads sharing 16, head_dim 128, QK-norm; RoPE base 10k on local
layers, 1M and linear scaling x8 on global layers: a 131,072-token context.

    python -m zoo.launch --config=configs/gemma3_27b.py --mode=plan
    python -m zoo.launch --config=configs/gemma3_27b.py:smoke --workdir=/tmp/zoo/gemma3_27b

Source: google/gemma-3-27b-pt config.json (text_config: its 262,208-entry vocabulary holds
the image tokens too); Gemma Team 2025, "Gemma 3 Technical Report", Table 1 (25,600M
non-embedding parameters; the shapes give 25,599,716,096, and 1,409,630,208 in the
embedding: 27,009,346,304 for the text model, "27B" with the 417M vision encoder) and
sec. 2.2 (14T training tokens, pre-trained at 32k, then RoPE rescaled to 128k).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 262_208
  m.num_layers = 62  # 10 x 'LLLLLG' + 2 local
  m.d_model = 5376
  m.num_heads = 32
  m.num_kv_heads = 16
  m.head_dim = 128
  m.mlp_dim = 21_504
  presets.gemma(c, version=3, max_length=131_072)
  m.rope_theta, m.rope_local_theta = 1_000_000.0, 10_000.0  # global, local
  m.rope_scaling.update(type='linear', factor=8.0)  # global layers only
  a = m.attention
  a.pattern, a.window = 'LLLLLG', 1024
  a.query_scale = 168.0  # query_pre_attn_scalar = d_model / num_heads
  # no optimizer settings in the report: Llama 2's (sec. 2.2) stand in, with its 14T tokens
  recipes.llama(c, learning_rate=1.5e-4, tokens=14e12)
  return presets.variant(c, arg)
