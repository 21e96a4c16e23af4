"""BERT-large: 24 layers, d_model 1024, 16 heads, MLM + next-sentence pretraining heads.

    python -m zoo.launch --config=configs/bert_large.py --mode=plan
    python -m zoo.launch --config=configs/bert_large.py:smoke --workdir=/tmp/zoo/bert_large

Source: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers", sec. 3;
google-bert/bert-large-uncased config.json (BertForPreTraining).
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 24
  m.d_model = 1024
  m.num_heads = 16  # head_dim 64
  m.mlp_dim = 4096  # 4 * d_model
  presets.bert(c)
  recipes.bert(c)

  return presets.variant(c, arg)
