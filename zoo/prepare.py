"""Prepare a corpus once for training: python -m zoo.prepare --input=PATH --output=DIR ...

  --input        a file, a directory or a glob (repeatable)
  --format       auto (by extension: .jsonl/.json, .parquet, .arrow, else text) | text |
                 jsonl | parquet | arrow (a Hugging Face dataset saved to disk)
  --field        the JSON field / column holding the text (default text)
  --tokenizer    a SentencePiece model or tokenizer.json to tokenize with; or --config=configs/NAME.py
                 to train one as data.tokenizer says (type, vocab_size); the config gives
                 data.document_separator, data.eval_fraction and data.split_seed
  --workers      tokenizer processes (default: one per core)

Then train with --config.data.path=DIR. Rerunning the same command after an interruption
finishes the missing shards (zoo/data/prepare.py). Bad input: one line, exit code 2.
"""

import os
import sys
import time

from absl import flags

from zoo import cli

FLAGS = flags.FLAGS
flags.DEFINE_multi_string('input', [], 'a file, a directory or a glob (repeatable)')
flags.DEFINE_string('output', None, 'the prepared directory (new, or an interrupted one)')
flags.DEFINE_enum('format', 'auto', ['auto', 'text', 'jsonl', 'parquet', 'arrow'],
                  'input format; auto = by file extension')
flags.DEFINE_string('field', 'text', 'JSON field or column holding the text')
flags.DEFINE_string('tokenizer', None, 'a SentencePiece model or a Hugging Face '
                    'tokenizer.json')
flags.DEFINE_string('config', None, 'configs/NAME.py[:arg]: train a tokenizer as its '
                    'data.tokenizer says; its data settings apply')
flags.DEFINE_integer('workers', os.cpu_count() or 1, 'tokenizer worker processes')
flags.DEFINE_float('shard_mb', 64, 'input megabytes per shard (chunk)')


def run(overrides):
  """Prepares per the flags; bad input -> one line on stderr and exit 2."""
  from zoo import config as config_lib  # pylint: disable=g-import-not-at-top
  from zoo import storage  # pylint: disable=g-import-not-at-top
  from zoo.data import prepare  # pylint: disable=g-import-not-at-top
  try:
    if not FLAGS.input or not FLAGS.output:
      raise config_lib.ConfigError('--input and --output are required')
    if bool(FLAGS.tokenizer) == bool(FLAGS.config):
      raise config_lib.ConfigError('pass --tokenizer=MODEL (tokenize with it) or '
                                   '--config=CONFIG (train one as its data.tokenizer says)')
    for field, path in ([('--output', FLAGS.output), ('--tokenizer', FLAGS.tokenizer or '')]
                        + [('--input', path) for path in FLAGS.input]):
      storage.check(path, field)
    if FLAGS.tokenizer and not storage.isfile(FLAGS.tokenizer):
      raise config_lib.ConfigError(f'--tokenizer={FLAGS.tokenizer} does not exist; pass a '
                                   'SentencePiece model or a tokenizer.json')
    if FLAGS.shard_mb <= 0 or FLAGS.workers < 1:
      raise config_lib.ConfigError('--shard_mb must be > 0 and --workers >= 1')
    data = config_lib.load(FLAGS.config, overrides).data if FLAGS.config else \
        config_lib.base().data
    tokenizer = FLAGS.tokenizer or {'type': data.tokenizer.type,
                                    'vocab_size': data.tokenizer.vocab_size,
                                    **({'split_digits': True} if data.tokenizer.split_digits
                                       else {})}
    start = time.time()
    manifest = prepare.prepare(
        FLAGS.input, FLAGS.output, tokenizer, fmt=FLAGS.format, field=FLAGS.field,
        separator=data.document_separator, eval_fraction=data.eval_fraction,
        split_seed=data.split_seed, shard_bytes=int(FLAGS.shard_mb * 2**20),
        workers=FLAGS.workers, progress=True)
  except config_lib.ConfigError as e:
    print(f'error: {e}', file=sys.stderr, flush=True)
    sys.exit(2)
  seconds = time.time() - start
  splits = manifest['splits']
  tokens = splits['train']['tokens'] + splits['eval']['tokens']
  print(f'{FLAGS.output}: {splits["train"]["documents"]:,} train / '
        f'{splits["eval"]["documents"]:,} eval documents, {tokens:,} tokens in '
        f'{len(manifest["shards"])} shards; {seconds:.1f}s ({tokens / seconds:,.0f} tokens/s, '
        f'{FLAGS.workers} worker{"s" if FLAGS.workers != 1 else ""})', flush=True)


def main():
  cli.start(run)


if __name__ == '__main__':
  main()
