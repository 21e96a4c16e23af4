"""Benchmark: speculative decoding against plain decoding, batch 1, greedy.

    python benchmarks/speculative.py --target=WORKDIR [--draft=WORKDIR] [--mtp] \\
        [--draft_tokens=2,4,6] [--new_tokens=128] [--prompts=4]

The workdirs hold trained decoders on one tokenizer (docs/generate.md shows how to train a
draft on the target's tokenizer); --mtp drafts with the target's own prediction module too
(a target trained with model.mtp.depth=1). For each prompt (the first --prompts speaker
names of the embedded corpus), plain greedy decoding and speculative decoding with each
draft (--draft at each --draft_tokens k; the module at one token a round) make
--new_tokens tokens (no EOS: every run makes all of them); each is timed 3 times after a
warm-up call and the median kept. The table gives tokens/s over all prompts, the share of
draft tokens kept, tokens per target pass and the speed-up over plain decoding; greedy
speculative output equals plain output token for token (checked on every prompt).
"""

import argparse
import statistics
import sys
import time

import jax
import numpy as np

from zoo import families
from zoo import platform
from zoo import run as run_lib
from zoo.infer import draft as draft_lib
from zoo.infer import generate
from zoo.infer import speculative
from zoo.train import run_config
from zoo.train import runtime

PROMPTS = ('ROMEO:', 'First Citizen:', 'JULIET:', 'KING RICHARD III:', 'MENENIUS:',
           'DUKE VINCENTIO:')


def restore(config, workdir):
  place = runtime.placement(run_lib.resolve(config))
  state = runtime.model_state(run_lib.resolve(config), place.mesh)
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
  parser.add_argument('--draft', default='')
  parser.add_argument('--mtp', action='store_true')
  parser.add_argument('--draft_tokens', default='2,4,6')
  parser.add_argument('--new_tokens', type=int, default=128)
  parser.add_argument('--prompts', type=int, default=4)
  args = parser.parse_args()
  config = run_config.load(args.target)
  tokenizer = runtime.tokenizer(config, args.target)
  target, target_variables = restore(config, args.target)
  greedy, N, rng = {'temperature': 0.0}, args.new_tokens, jax.random.PRNGKey(0)
  plain = jax.jit(generate.make(target, N, greedy, -1, tokenizer.pad_id))
  drafts = {}  # row name -> (jitted speculative fn, draft variables, tokens a round)
  described = [f'target d_model {config.model.d_model} x {config.model.num_layers} layers']
  if args.draft:
    config.generate.draft_workdir = args.draft
    draft_config = draft_lib.load_config(config, args.target)
    draft, draft_variables = restore(draft_config, args.draft)
    described.append(f'draft d_model {draft_config.model.d_model} x '
                     f'{draft_config.model.num_layers} layers')
    for k in (int(k) for k in args.draft_tokens.split(',')):
      drafts[f'draft model, k={k}'] = (jax.jit(speculative.make(
          target, draft, N, k, greedy, -1, tokenizer.pad_id)), draft_variables, k)
  if args.mtp:
    described.append('its prediction module')
    drafts['prediction module, k=1'] = (jax.jit(speculative.make(
        target, 'mtp', N, 1, greedy, -1, tokenizer.pad_id)), None, 1)
  rows = {name: [0.0, 0, 0] for name in ['plain', *drafts]}  # seconds, rounds, kept
  for text in PROMPTS[:args.prompts]:
    ids, segments = families.get(config.model).tokenize_prompts(config, tokenizer, [text])
    want, seconds = timed(plain, target_variables, ids, segments, rng)
    rows['plain'][0] += seconds
    for name, (fn, draft_variables, _) in drafts.items():
      (tokens, stats), seconds = timed(fn, target_variables, draft_variables, ids, segments,
                                       rng)
      if not np.array_equal(tokens, want):
        sys.exit(f'speculative output differs from plain greedy ({name}), prompt {text!r}')
      rows[name][0] += seconds
      rows[name][1] += int(stats['rounds'])
      rows[name][2] += int(stats['accepted'])
  count = args.prompts * N
  print(f'python {" ".join(sys.argv)}\n{jax.devices()[0].device_kind}; '
        f'{", ".join(described)}; greedy, batch 1, {args.prompts} prompts x {N} new tokens, '
        'median of 3')
  print('| decoding | tokens/s | draft tokens kept | tokens a target pass | speed-up |')
  base = count / rows['plain'][0]
  print(f'| plain | {base:,.0f} | - | 1.00 | 1.00x |')
  for name, (_, _, k) in drafts.items():
    seconds, rounds, kept = rows[name]
    print(f'| {name} | {count / seconds:,.0f} | {kept / (rounds * k):.0%} | '
          f'{(rounds + kept) / rounds:.2f} | {count / seconds / base:.2f}x |')


if __name__ == '__main__':
  platform.apply()
  main()
