"""python -m zoo.bench.nsp_leak [--config=configs/bert_base.py:smoke] [--seq_len=128]
    [--rows=4000] [--workdir=/tmp/zoo/nsp_leak] [--config.FIELD=VALUE ...]

How much a BERT pretraining row's length alone tells its next-sentence label: over --rows
train rows of the config's corpus (default: the embedded one) at --seq_len, the mean
length (real tokens, [CLS] and [SEP]s included) of IsNext and NotNext rows, and the
balanced accuracy of the best length threshold as a label predictor (0.5 = no leak; BERT's
own construction leaks where documents are shorter than the target length, as here).
"""

import sys

import numpy as np
from absl import flags

from zoo import run as run_lib
from zoo import families
from zoo.cli import start
from zoo.data import pipeline
from zoo.train import runtime


def threshold_accuracy(lengths, labels):
  """The best balanced accuracy (the mean of each label's recall: 0.5 = no information,
  whatever the labels' shares) of predicting the label from `length > t` (or <= t), over
  every t."""
  lengths, labels = np.asarray(lengths), np.asarray(labels).astype(bool)
  best = 0.5
  for t in np.unique(lengths):
    said = lengths > t
    balanced = (np.mean(said[labels]) + np.mean(~said[~labels])) / 2
    best = max(best, balanced, 1 - balanced)
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
  f = flags.FLAGS
  config = run_lib.load(f.config, [f'data.seq_len={f.seq_len}',
                                   f'model.max_length={max(f.seq_len, 64)}', *overrides]).config
  out = measure(config, f.workdir, f.rows)
  print(f'{f.config} at data.seq_len={f.seq_len}, corpus '
        f'{config.data.path or "embedded"}, {out["rows"]} train rows: IsNext rows average '
        f'{out["is_next_mean_length"]:.1f} tokens, NotNext {out["not_next_mean_length"]:.1f} '
        f'({out["not_next_share"]:.1%} NotNext); the best length threshold predicts the '
        f'label with a balanced accuracy of {out["threshold_accuracy"]:.1%}')
  print('command: python -m zoo.bench.nsp_leak ' + ' '.join(sys.argv[1:]))


if __name__ == '__main__':
  flags.DEFINE_string('config', 'configs/bert_base.py:smoke', 'an mlm config')
  flags.DEFINE_integer('seq_len', 128, 'row length')
  flags.DEFINE_integer('rows', 4000, 'train rows to read')
  flags.DEFINE_string('workdir', '/tmp/zoo/nsp_leak', 'where the corpus is prepared')
  start(run)
