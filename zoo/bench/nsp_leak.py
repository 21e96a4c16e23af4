"""python -m zoo.bench.nsp_leak [--config=configs/bert_base.py:smoke] [--seq_len=128]
    [--rows=4000] [--workdir=/tmp/zoo/nsp_leak] [--config.FIELD=VALUE ...]

How much a BERT pretraining row's length alone tells its next-sentence label: over --rows
train rows of the config's corpus (default: the embedded one) at --seq_len, the mean
length (real tokens, [CLS] and [SEP]s included) of IsNext and NotNext rows, and the
accuracy of the best length threshold as a label predictor (0.5 = no leak; BERT's own
construction leaks where documents are shorter than the target length, as here).
"""

import sys

import numpy as np
from absl import flags

from zoo import config as config_lib
from zoo.cli import start
from zoo import families
from zoo.data import pipeline
from zoo.train import runtime

_CONFIG = flags.DEFINE_string('config', 'configs/bert_base.py:smoke', 'an mlm config')
_SEQ_LEN = flags.DEFINE_integer('seq_len', 128, 'row length')
_ROWS = flags.DEFINE_integer('rows', 4000, 'train rows to read')
_WORKDIR = flags.DEFINE_string('workdir', '/tmp/zoo/nsp_leak', 'where the corpus is prepared')


def threshold_accuracy(lengths, labels):
  """The best accuracy of predicting the label from `length > t` (or <= t) over every t."""
  lengths, labels = np.asarray(lengths), np.asarray(labels).astype(bool)
  best = 0.5
  for t in np.unique(lengths):
    agree = np.mean((lengths > t) == labels)
    best = max(best, agree, 1 - agree)
  return float(best)


def measure(config, workdir, rows):
  """-> {mean length per label, threshold accuracy, rows} of `rows` train rows."""
  corpus = runtime.corpus(config, workdir)
  spec = families.get(config.model).batch_spec(config.data, 64)
  lengths, labels = [], []
  for batch in pipeline.make_dataset(corpus.train, config.data, spec, train=True,
                                     tokenizer=corpus.tokenizer):
    lengths.extend((batch['segment_ids'] > 0).sum(1))
    labels.extend(batch['next_sentence_labels'])
    if len(lengths) >= rows:
      break
  lengths, labels = np.asarray(lengths[:rows]), np.asarray(labels[:rows])
  return {'rows': rows, 'is_next_mean_length': float(lengths[labels == 0].mean()),
          'not_next_mean_length': float(lengths[labels == 1].mean()),
          'not_next_share': float(labels.mean()),
          'threshold_accuracy': threshold_accuracy(lengths, labels)}


def run(overrides):
  config = config_lib.load(_CONFIG.value, [f'data.seq_len={_SEQ_LEN.value}',
                                           f'model.max_length={max(_SEQ_LEN.value, 64)}',
                                           *overrides])
  out = measure(config, _WORKDIR.value, _ROWS.value)
  print(f'{_CONFIG.value} at data.seq_len={_SEQ_LEN.value}, corpus '
        f'{config.data.path or "embedded"}, {out["rows"]} train rows: IsNext rows average '
        f'{out["is_next_mean_length"]:.1f} tokens, NotNext {out["not_next_mean_length"]:.1f} '
        f'({out["not_next_share"]:.1%} NotNext); the best length threshold predicts the '
        f'label {out["threshold_accuracy"]:.1%} of the time')
  print('command: python -m zoo.bench.nsp_leak ' + ' '.join(sys.argv[1:]))


if __name__ == '__main__':
  start(run)
