"""Benchmark: a prepared corpus at scale. Generates a text corpus of --mb megabytes (random
Shakespeare words, documents of 20-400 words), prepares it with 1 and 2 workers, trains
the default job's model from it for --steps steps, and compares the training process's peak
RSS with the same run on a --small_mb corpus.

    python benchmarks/corpus_scale.py [--mb=1024] [--small_mb=10] [--steps=50] \
        [--dir=/tmp/zoo_scale]

Prints what it measured, on what, and the commands it ran (each one reproduces a number).
"""

import argparse
import importlib.resources
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

from zoo import platform as zoo_platform
from zoo.data import corpus as corpus_lib

CONFIG = 'configs/gpt_shakespeare.py'
# runs `command` and prints its peak RSS (the child's; getrusage waits for it)
_PEAK_RSS = ('import resource, subprocess, sys; '
             'code = subprocess.run(sys.argv[1:]).returncode; '
             'print("peak_rss_mb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, '
             'file=sys.stderr); sys.exit(code)')


def generate(path, megabytes, seed=0):
  """Writes about `megabytes` of documents separated by blank lines (cached by size)."""
  if os.path.exists(path) and abs(os.path.getsize(path) - megabytes * 2**20) < 2**20:
    return
  words = np.asarray(importlib.resources.files('zoo.data').joinpath(
      'assets', corpus_lib.EMBEDDED_CORPUS).read_text(encoding='utf-8').split())
  rng = np.random.default_rng(seed)
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    while f.tell() < megabytes * 2**20:
      f.write('\n\n'.join(' '.join(rng.choice(words, n)) for n in rng.integers(20, 400, 1000)))
      f.write('\n\n')
  os.replace(path + '.tmp', path)


def run(command):
  print('  $', ' '.join(command), flush=True)
  start = time.time()
  result = subprocess.run([sys.executable, '-c', _PEAK_RSS, *command], capture_output=True,
                          text=True, check=False)
  if result.returncode:
    sys.exit(f'failed: {result.stderr[-3000:]}')
  rss = float(result.stderr.strip().splitlines()[-1].split()[-1])
  return time.time() - start, rss, result.stdout


def prepare(text, output, tokenizer, workers):
  seconds, _, out = run([sys.executable, '-m', 'zoo.prepare', f'--input={text}',
                         f'--output={output}', f'--workers={workers}'] +
                        ([f'--tokenizer={tokenizer}'] if tokenizer else [f'--config={CONFIG}']))
  manifest = json.load(open(os.path.join(output, 'manifest.json')))
  tokens = sum(s['tokens'] for s in manifest['splits'].values())
  return seconds, tokens, out.strip().splitlines()[-1]


def train(prepared, workdir, steps):
  _, rss, out = run([sys.executable, '-m', 'zoo.launch', f'--config={CONFIG}',
                     f'--workdir={workdir}', f'--config.data.path={prepared}',
                     f'--config.train.steps={steps}', f'--config.train.eval_every={steps}',
                     '--config.train.eval_batches=8',  # 0 (the config's) = the whole split
                     f'--config.optim.warmup_steps={steps // 5}'])
  rows = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  rate = [r['tokens_per_sec'] for r in rows if 'tokens_per_sec' in r][-1]
  return rss, rate, out


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--mb', type=float, default=1024)
  parser.add_argument('--small_mb', type=float, default=10)
  parser.add_argument('--steps', type=int, default=50)
  parser.add_argument('--dir', default='/tmp/zoo_scale')
  args = parser.parse_args()
  os.makedirs(args.dir, exist_ok=True)
  big, small = (os.path.join(args.dir, f'corpus_{mb:g}mb.txt') for mb in (args.mb, args.small_mb))
  generate(big, args.mb)
  generate(small, args.small_mb, seed=1)
  print(f'corpus scale on {platform.machine()} ({os.cpu_count()} cores): {args.mb:g} MB and '
        f'{args.small_mb:g} MB of text, config {CONFIG}', flush=True)

  stamp = int(time.time())
  out = lambda name: os.path.join(args.dir, f'{name}_{stamp}')
  small_s, small_tokens, _ = prepare(small, out('small'), None, 2)
  tokenizer = os.path.join(out('small'), 'tokenizer.model')
  results = {}
  for workers in (1, 2):
    seconds, tokens, _ = prepare(big, out(f'big_w{workers}'), tokenizer, workers)
    results[workers] = (seconds, tokens)
    print(f'  prepare {args.mb:g} MB, {workers} worker(s): {seconds:.0f}s, {tokens:,} tokens, '
          f'{tokens / seconds:,.0f} tokens/s', flush=True)
  big_rss, big_rate, _ = train(out('big_w2'), out('run_big'), args.steps)
  small_rss, small_rate, _ = train(out('small'), out('run_small'), args.steps)
  print(f'  prepare {args.small_mb:g} MB (tokenizer trained, 2 workers): {small_s:.0f}s, '
        f'{small_tokens:,} tokens')
  print(f'  train {args.steps} steps: peak RSS {big_rss:,.0f} MB from {args.mb:g} MB vs '
        f'{small_rss:,.0f} MB from {args.small_mb:g} MB (difference {big_rss - small_rss:+,.0f} '
        f'MB); tokens/s {big_rate:,.0f} vs {small_rate:,.0f}')


if __name__ == '__main__':
  zoo_platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
