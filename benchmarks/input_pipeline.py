"""Benchmark: batches/s of the input pipeline alone, for a config (default: the default job).

    python benchmarks/input_pipeline.py [--config=configs/gpt_shakespeare.py] [--batches=500]

Compare with the train step rate (steps/s = tokens_per_sec / (batch_size * seq_len) in
WORKDIR/metrics.jsonl): the pipeline should be far faster, so it is never the bottleneck.
"""

import argparse
import os
import platform
import tempfile
import time

from zoo import config as config_lib
from zoo import families
from zoo.data import pipeline
from zoo.data import tokenizer as tokenizer_lib


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/gpt_shakespeare.py')
  parser.add_argument('--batches', type=int, default=500)
  args = parser.parse_args()
  config = config_lib.load(args.config)

  with tempfile.TemporaryDirectory() as workdir:
    start = time.time()
    documents = pipeline.read_documents(config.data)
    train_docs, _ = pipeline.split_documents(documents, config.data.eval_fraction,
                                             config.data.split_seed)
    tokenizer = tokenizer_lib.load_or_train(config.data.tokenizer, train_docs, workdir)
    tokens = pipeline.tokenize(train_docs, tokenizer)
    setup_s = time.time() - start

  ds = pipeline.make_dataset(tokens, config.data, families.batch_spec(config), train=True)
  it = iter(ds)
  next(it)
  start, real = time.time(), 0.0
  for _ in range(args.batches):
    real += pipeline.packing_efficiency(next(it))
  elapsed = time.time() - start
  print(f'input pipeline on {platform.machine()} ({os.cpu_count()} cores), config {args.config}: '
        f'batch {config.train.batch_size} x {config.data.seq_len}')
  print(f'  setup (read + train tokenizer + tokenize): {setup_s:.2f}s')
  print(f'  {args.batches / elapsed:,.0f} batches/s '
        f'({args.batches * config.train.batch_size * config.data.seq_len / elapsed:,.0f} tokens/s), '
        f'packing efficiency {real / args.batches:.3f}')
  print(f'  reproduce: python benchmarks/input_pipeline.py --config={args.config} '
        f'--batches={args.batches}')


if __name__ == '__main__':
  main()
