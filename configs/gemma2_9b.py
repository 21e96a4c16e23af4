"""Gemma 2 9B: 42 layers alternating local (4096-token window) and global attention, d_model
3584, 16 heads sharing 8, head_dim 256, logits soft-capped (attention 50, output 30).

    python -m zoo.launch --config=configs/gemma2_9b.py --mode=plan
    python -m zoo.launch --config=configs/gemma2_9b.py:smoke --workdir=/tmp/zoo/gemma2_9b

Distilled from Gemma 2 27B, as the report trained it (:distill; the teacher imported first):

    python -m zoo.convert.hf --hf_dir=path/to/gemma-2-27b --workdir=runs/gemma2_27b
    python -m zoo.launch --config=configs/gemma2_9b.py:distill --workdir=runs/gemma2_9b \
      --config.data.tokenizer.path=runs/gemma2_27b/tokenizer/tokenizer.json

Source: google/gemma-2-9b config.json; Gemma Team 2024, "Gemma 2", Table 1 (917,504,000
embedding and 8,324,201,984 non-embedding parameters: 9,241,705,984, "9B") and sec. 3 (8T
training tokens, an 8192-token context).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 256_000
  m.num_layers = 42
  m.d_model = 3584
  m.num_heads = 16
  m.num_kv_heads = 8
  m.head_dim = 256
  m.mlp_dim = 14_336
  presets.gemma(c, version=2, max_length=8192)
  m.rope_theta = 10_000.0
  a = m.attention
  a.pattern, a.window = 'LG', 4096  # local first, then global
  a.query_scale = 256.0  # query_pre_attn_scalar
  a.softcap, m.final_softcap = 50.0, 30.0
  # the report gives no optimizer settings (the 9B was distilled from a larger model):
  # Llama 2's (Touvron et al. 2023, sec. 2.2) stand in, with its 8T tokens
  recipes.llama(c, learning_rate=3e-4, tokens=8e12)
  if arg == 'distill':
    return recipes.gemma_distillation(c, teacher='runs/gemma2_27b')
  return presets.variant(c, arg)
