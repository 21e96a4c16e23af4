"""Llama 4 Scout (17B active, 16 experts), text model: 48 layers, d_model 5120, 40 heads of
128 sharing 8, chunked attention (8,192 tokens) with RoPE and QK-norm (no gain) on three
layers of four, global NoPE attention with temperature tuning on the fourth, and in every
layer 16 top-1 experts of width 8,192 beside a shared one; Llama 3.1's RoPE scaling (x8
over 8,192 tokens).

    python -m zoo.launch --config=configs/llama4_scout.py --mode=plan
    python -m zoo.launch --config=configs/llama4_scout.py:smoke --workdir=/tmp/zoo/llama4_scout

Source: meta-llama/Llama-4-Scout-17B-16E config.json (text_config: use_qk_norm true,
interleave_moe_layer_step 1, rope_scaling llama3 factor 8, low 1, high 4, original 8,192;
max_position_embeddings 10,485,760); the Llama 4 model card: 17B active, 109B total (the
vision encoder included), ~40T training tokens. The text model's shapes give
107,769,861,120 parameters, 17,172,894,720 active per token (both embedding tables
counted; 16,138,408,960 without the input one, the card's way). Training: the card and blog give no
optimizer settings (MetaP sets per-layer rates and inits), so Llama 2's recipe stands in
(sec. 2.2), at 8,192 tokens, one chunk.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 48
  presets.llama4(c, max_length=10_485_760)
  m.attention.qk_l2_norm = True  # use_qk_norm: the rotary layers' q and k
  m.rope_scaling.update(type='llama3', factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                        original_max_length=8192)
  m.moe.num_experts, m.moe.every = 16, 1
  c.data.seq_len = 8192
  recipes.llama(c, learning_rate=3e-4, tokens=40e12)  # not published: see the docstring
  return presets.variant(c, arg)
