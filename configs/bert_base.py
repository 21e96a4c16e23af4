"""BERT-base: 12 layers, d_model 768, 12 heads, MLM + next-sentence pretraining heads.

    python -m zoo.launch --config=configs/bert_base.py --mode=plan
    python -m zoo.launch --config=configs/bert_base.py:smoke --workdir=/tmp/zoo/bert_base

Source: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers", sec. 3;
google-bert/bert-base-uncased config.json (BertForPreTraining).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 12
  m.d_model = 768
  m.num_heads = 12  # head_dim 64
  m.mlp_dim = 3072  # 4 * d_model
  presets.bert(c)
  recipes.bert(c)

  return presets.variant(c, arg)
