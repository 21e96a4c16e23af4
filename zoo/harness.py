"""python -m zoo.harness: lm-evaluation-harness tasks on a zoo checkpoint (zoo/infer/harness.py:
the model adapter and `evaluate`).

    python -m zoo.harness --workdir=runs/gpt_shakespeare --tasks=NAME[,NAME] \\
        [--include_path=DIR] [--num_fewshot=0] [--limit=N] [--batch_size=8] \\
        [--output=results.json] [--config=configs/NAME.py] [--config.FIELD=VALUE ...]

The run's own WORKDIR/config.json is read (what it trained with, overrides included) unless
--config names another.

Needs `pip install 'zoo[lm-eval]'`. --include_path is a directory of task YAML files (a task
on local data files downloads nothing; lm-eval's own tasks download their data sets). Prints
lm-eval's results table and nothing else (the libraries' log lines with --verbose); --output
also writes its results as JSON. Bad input (no such task, a family that is not a causal LM,
no checkpoint, lm-eval not installed): one line, exit 2.
"""

import importlib.util
import json
import logging as python_logging
import os
import sys

from absl import flags
from absl import logging

from zoo import config as config_lib
from zoo import storage
from zoo.cli import start
from zoo.train import run_config

MISSING = "lm-evaluation-harness is not installed; pip install 'zoo[lm-eval]'"

FLAGS = flags.FLAGS
flags.DEFINE_string('config', None, "configs/NAME.py[:arg]; default: the run's own "
                    'WORKDIR/config.json (what it trained with, overrides included)')
flags.DEFINE_string('workdir', None, 'the run: its checkpoints and tokenizer', required=True)
flags.DEFINE_string('tasks', None, 'lm-eval task names, comma-separated', required=True)
flags.DEFINE_string('include_path', None, 'a directory of task YAML files')
flags.DEFINE_integer('num_fewshot', None, 'few-shot examples (default: the task\'s)')
flags.DEFINE_integer('limit', None, 'at most this many documents per task')
flags.DEFINE_integer('batch_size', 8, 'rows scored or decoded together')
flags.DEFINE_string('output', None, 'also write the results here as JSON')
flags.DEFINE_bool('verbose', False, "lm-eval's, orbax's and the data sets' log lines too")

_LIBRARIES = ('lm_eval', 'lm-eval', 'datasets', 'absl', 'orbax', 'jax')


def _quiet():
  """Only the results: lm-eval's task warnings, orbax's restore lines and the data sets'
  progress bars stay out (all are INFO or per-task notes, not errors)."""
  logging.set_verbosity(logging.ERROR)
  for name in _LIBRARIES:
    python_logging.getLogger(name).setLevel(python_logging.ERROR)
  os.environ.setdefault('HF_DATASETS_DISABLE_PROGRESS_BARS', '1')
  os.environ.setdefault('TQDM_DISABLE', '1')  # lm-eval's request bars


def run(overrides):
  if not FLAGS.verbose:
    _quiet()
  try:
    resolved = run_config.resolve(FLAGS.workdir, FLAGS.config, overrides)
    if importlib.util.find_spec('lm_eval') is None:
      raise config_lib.ConfigError(MISSING)
    from zoo.infer import harness  # pylint: disable=g-import-not-at-top
    results = harness.evaluate(resolved, FLAGS.workdir, [t for t in FLAGS.tasks.split(',') if t],
                               FLAGS.include_path, FLAGS.num_fewshot, FLAGS.limit,
                               FLAGS.batch_size)
  except config_lib.ConfigError as e:
    print(f'error: {e}', file=sys.stderr, flush=True)
    sys.exit(2)
  from lm_eval import utils as lm_eval_utils  # pylint: disable=g-import-not-at-top
  print(lm_eval_utils.make_table(results), flush=True)
  if FLAGS.output:
    storage.write_atomic(FLAGS.output, lambda path: _dump(results, path))


def _dump(results, path):
  with open(path, 'w', encoding='utf-8') as f:
    json.dump({k: results[k] for k in ('results', 'versions', 'n-shot', 'config')
               if k in results}, f, indent=1, default=str)


def main():
  start(run)


if __name__ == '__main__':
  main()
