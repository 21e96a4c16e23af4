"""BERT-Base with experts: an 8-expert top-2 mixture in every other FFN layer (GELU experts,
capacity factor 1.25): the encoder-only member of the MoE configs.

    python -m zoo.launch --config=configs/bert_base_moe.py --mode=plan
    python -m zoo.launch --config=configs/bert_base_moe.py:smoke --workdir=/tmp/zoo/bert_moe

Source: the BERT-Base shape (configs/bert_base.py) with the GShard-style top-2 layer of
Lepikhin et al. 2021; the zoo's own variant, not a released checkpoint.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 12
  m.d_model = 768
  m.num_heads = 12
  m.mlp_dim = 3072  # each expert
  presets.bert(c)
  recipes.bert(c)
  m.moe.num_experts, m.moe.top_k, m.moe.every = 8, 2, 2
  m.moe.capacity_factor = 1.25

  return presets.variant(c, arg)
