"""Benchmark: batches/s of the input pipeline alone, for a config (default: the default job):
the train batches as the loop reads them (zoo/train/runtime.py train_batches: one stream's
rows, phase by phase, stacked into batches).

    python benchmarks/input_pipeline.py [--config=configs/gpt_shakespeare.py] [--batches=500]
        [--config.data.path=PREPARED_DIR]

Compare with the train step rate (steps/s = tokens_per_sec / (batch_size * seq_len) in
WORKDIR/metrics.jsonl): the pipeline should be far faster, so it is never the bottleneck.
"""

import argparse
import os
import platform
import tempfile
import time

from zoo import config as config_lib
from zoo import platform as zoo_platform
from zoo import run as run_lib
from zoo.data import corpus as corpus_lib
from zoo.data import pipeline
from zoo.train import runtime


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/gpt_shakespeare.py')
  parser.add_argument('--batches', type=int, default=500)
  args, overrides = parser.parse_known_args()
  config = config_lib.load(args.config, [o.removeprefix('--config.') for o in overrides])

  with tempfile.TemporaryDirectory() as workdir:
    start = time.time()
    corpus = corpus_lib.open_corpus(config.data, workdir)
    setup_s = time.time() - start
    streams = runtime.Streams(num_streams=1, local=[0], rows=config.train.batch_size)
    batches = runtime.train_batches(run_lib.resolve(config), streams, corpus)
    batches_per_s, real = _measure(batches, args.batches)
  data = config.data.path or 'the embedded corpus'
  print(f'input pipeline on {platform.machine()} ({os.cpu_count()} cores), config {args.config}: '
        f'batch {config.train.batch_size} x {config.data.seq_len}, {data}')
  print(f'  setup (open the prepared corpus; a plain one: train tokenizer + prepare): '
        f'{setup_s:.2f}s')
  tokens_per_s = batches_per_s * config.train.batch_size * config.data.seq_len
  print(f'  {batches_per_s:,.0f} batches/s ({tokens_per_s:,.0f} tokens/s), '
        f'packing efficiency {real:.3f}')
  print(f'  reproduce: python benchmarks/input_pipeline.py --config={args.config} '
        f'--batches={args.batches} {" ".join(overrides)}')


def _measure(train_batches, batches):
  """-> (batches/s after the first batch, mean packing efficiency)."""
  train_batches.batch(1)
  start, real = time.time(), 0.0
  for step in range(2, batches + 2):
    real += pipeline.packing_efficiency(train_batches.batch(step))
  return batches / (time.time() - start), real / batches


if __name__ == '__main__':
  zoo_platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
