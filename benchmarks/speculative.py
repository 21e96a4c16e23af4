"""Benchmark: speculative decoding against plain decoding, batch 1, greedy.

    python benchmarks/speculative.py --target=WORKDIR --draft=WORKDIR \\
        [--draft_tokens=2,4,6] [--new_tokens=128] [--prompts=4]

Both workdirs hold trained decoders on one tokenizer (docs/generate.md shows how to train a
draft on the target's tokenizer). For each prompt (the first --prompts speaker names of the
embedded corpus), plain greedy decoding and speculative decoding at each --draft_tokens k
make --new_tokens tokens (no EOS: every run makes all of them); each is timed 3 times after
a warm-up call and the median kept. The table gives tokens/s over all prompts, the share of
draft tokens kept, tokens per target pass and the speed-up over plain decoding; greedy
speculative output equals plain output token for token (checked on every prompt).
"""

import argparse
import json
import statistics
import sys
import time

import jax
import ml_collections
import numpy as np

from zoo import families
from zoo import platform
from zoo import storage
from zoo.infer import draft as draft_lib
from zoo.infer import generate
from zoo.infer import speculative
from zoo.train import run_config
from zoo.train import runtime

PROMPTS = ('ROMEO:', 'First Citizen:', 'JULIET:', 'KING RICHARD III:', 'MENENIUS:',
           'DUKE VINCENTIO:')


def restore(config, workdir):
  place = runtime.placement(config)
  state = runtime.model_state(config, place.mesh)
  _, variables = runtime.restore_variables(config, workdir, state, 'generate')
  return state.model, variables


def timed(fn, *args):
  out = fn(*args)
  jax.block_until_ready(out)
  times = []
  for _ in range(3):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return out, statistics.median(times)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--target', required=True)
  parser.add_argument('--draft', required=True)
  parser.add_argument('--draft_tokens', default='2,4,6')
  parser.add_argument('--new_tokens', type=int, default=128)
  parser.add_argument('--prompts', type=int, default=4)
  args = parser.parse_args()
  config = ml_collections.ConfigDict(json.loads(storage.read_text(
      storage.join(args.target, run_config.FILE))))
  config.generate.draft_workdir = args.draft
  draft_config = draft_lib.load_config(config, args.target)
  tokenizer = runtime.tokenizer(config, args.target)
  target, target_variables = restore(config, args.target)
  draft, draft_variables = restore(draft_config, args.draft)
  greedy, N, rng = {'temperature': 0.0}, args.new_tokens, jax.random.PRNGKey(0)
  plain = jax.jit(generate.make(target, N, greedy, -1, tokenizer.pad_id))
  ks = [int(k) for k in args.draft_tokens.split(',')]
  fast = {k: jax.jit(speculative.make(target, draft, N, k, greedy, -1, tokenizer.pad_id))
          for k in ks}
  rows = {'plain': [0.0, 0, 0], **{k: [0.0, 0, 0] for k in ks}}  # seconds, rounds, kept
  for text in PROMPTS[:args.prompts]:
    ids, segments = families.get(config.model).tokenize_prompts(config, tokenizer, [text])
    want, seconds = timed(plain, target_variables, ids, segments, rng)
    rows['plain'][0] += seconds
    for k in ks:
      (tokens, stats), seconds = timed(fast[k], target_variables, draft_variables, ids,
                                       segments, rng)
      if not np.array_equal(tokens, want):
        sys.exit(f'speculative output differs from plain greedy at k={k}, prompt {text!r}')
      rows[k][0] += seconds
      rows[k][1] += int(stats['rounds'])
      rows[k][2] += int(stats['accepted'])
  count = args.prompts * N
  m, d = config.model, draft_config.model
  print(f'python benchmarks/speculative.py --target={args.target} --draft={args.draft} '
        f'--draft_tokens={args.draft_tokens} --new_tokens={N} --prompts={args.prompts}\n'
        f'{jax.devices()[0].device_kind}; target d_model {m.d_model} x {m.num_layers} layers, '
        f'draft d_model {d.d_model} x {d.num_layers} layers; greedy, batch 1, {args.prompts} prompts x {N} new tokens, median of 3')
  print('| decoding | tokens/s | draft tokens kept | tokens a target pass | speed-up |')
  base = count / rows['plain'][0]
  print(f'| plain | {base:,.0f} | - | 1.00 | 1.00x |')
  for k in ks:
    seconds, rounds, kept = rows[k]
    print(f'| speculative, k={k} | {count / seconds:,.0f} | {kept / (rounds * k):.0%} | '
          f'{(rounds + kept) / rounds:.2f} | {count / seconds / base:.2f}x |')


if __name__ == '__main__':
  platform.apply()
  main()
