"""Llama 4 Maverick (17B active, 128 experts), text model: 48 layers, d_model 5120, 40
heads of 128 sharing 8, chunked attention (8,192 tokens) with RoPE on three layers of four
and global NoPE attention with temperature tuning on the fourth; dense MLPs (16,384) and
mixtures of 128 top-1 experts of width 8,192 beside a shared one alternating, the experts
second; no QK-norm, no RoPE scaling.

    python -m zoo.launch --config=configs/llama4_maverick.py --mode=plan
    python -m zoo.launch --config=configs/llama4_maverick.py:smoke --workdir=/tmp/zoo/maverick

Source: meta-llama/Llama-4-Maverick-17B-128E config.json (text_config: use_qk_norm false,
interleave_moe_layer_step 2, rope_scaling null, max_position_embeddings 1,048,576); the
Llama 4 model card: 17B active, 400B total (the vision encoder included), ~22T training
tokens. The text model's shapes give 400,711,848,960 parameters, 17,184,691,200 active per
token (both embedding tables counted; 16,150,205,440 without the input one, the card's
way). Training: no optimizer settings are published (MetaP), so Llama 2's recipe stands in
(sec. 2.2), at 8,192 tokens.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 48
  presets.llama4(c, max_length=1_048_576)
  m.moe.num_experts, m.moe.every = 128, 2
  c.data.seq_len = 8192
  recipes.llama(c, learning_rate=3e-4, tokens=22e12)  # not published: see the docstring
  return presets.variant(c, arg)
