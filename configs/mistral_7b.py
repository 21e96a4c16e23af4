"""Mistral 7B (v0.1): 32 layers, d_model 4096, 32 heads sharing 8, sliding window 4096.

    python -m zoo.launch --config=configs/mistral_7b.py --mode=plan
    python -m zoo.launch --config=configs/mistral_7b.py:smoke --workdir=/tmp/zoo/mistral_7b

Source: Jiang et al. 2023, "Mistral 7B", Table 1; mistralai/Mistral-7B-v0.1 config.json.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 32_000
  m.num_layers = 32
  m.d_model = 4096
  m.num_heads = 32  # head_dim 128
  m.num_kv_heads = 8  # GQA
  m.mlp_dim = 14336
  m.attention.window = 4096  # sliding-window attention
  presets.llama(c, rope_theta=10_000.0, max_length=32768)
  # Jiang et al. 2023 publish no training recipe or token count: Llama 2 7B's (Touvron
  # et al. 2023, sec. 2.2: peak 3e-4, 2T tokens) stands in
  recipes.llama(c, learning_rate=3e-4, tokens=2e12)

  return presets.variant(c, arg)
