"""Benchmark: the train step with the xla kernel's causal query blocks (zoo/kernels/causal.py)
against the same step over the whole [L, L] square, in one process, steps alternating (a
CPU VM whose speed drifts between minutes slows both alike).

    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python benchmarks/causal_blocks.py \
        [--seq_len=128] [--steps=40] [--blocks=4]

The shape is zoo.bench's (GPT-2-like, d_model 256, 4 layers, vocab 4096, float32) at
2048 tokens a step (batch 2048 / seq_len). "square" is the blocks code at one block, the
whole square. Prints each side's median and 10th-percentile step time, the median of the
paired per-step ratios (square / blocks: above 1 = the blocks are faster) and both first
losses.
"""

import argparse
import os
import statistics

from zoo import config as config_lib
from zoo import platform
from zoo import run as run_lib
from zoo.bench import __main__ as bench
from zoo.bench import jax_side
from zoo.kernels import causal

TOKENS = 2048  # per step, as zoo.bench's 16 x 128


def _trainer(config, batch, blocks):
  """A compiled bench Trainer whose causal attention runs in `blocks` query blocks."""
  default = causal.BLOCKS
  causal.BLOCKS = blocks  # read while the step is traced, inside Trainer()
  try:
    return jax_side.Trainer(run_lib.resolve(config), batch)
  finally:
    causal.BLOCKS = default


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--seq_len', type=int, default=128)
  parser.add_argument('--steps', type=int, default=40)
  parser.add_argument('--blocks', type=int, default=causal.BLOCKS)
  args = parser.parse_args()
  if TOKENS % args.seq_len or args.seq_len % args.blocks or (
      args.seq_len // args.blocks < causal.MIN_BLOCK):
    parser.error(f'--seq_len={args.seq_len} must divide {TOKENS} and split into '
                 f'--blocks={args.blocks} blocks of at least {causal.MIN_BLOCK} tokens')
  overrides = [o for o in bench.DEFAULT_OVERRIDES
               if not o.startswith(('model.max_length', 'data.seq_len', 'train.batch_size'))]
  config = config_lib.load(bench.DEFAULT_CONFIG, [
      *overrides, f'model.max_length={args.seq_len}', f'data.seq_len={args.seq_len}',
      f'train.batch_size={TOKENS // args.seq_len}'])
  batch = jax_side.random_batch(config)
  sides = {'square': _trainer(config, batch, 1), 'blocks': _trainer(config, batch, args.blocks)}
  times = jax_side.alternating_steps(sides, args.steps)
  tunables = os.environ.get('GLIBC_TUNABLES', '(unset)')
  print(f'GLIBC_TUNABLES={tunables} python benchmarks/causal_blocks.py '
        f'--seq_len={args.seq_len} --steps={args.steps} --blocks={args.blocks}\n'
        f'{TOKENS // args.seq_len} x {args.seq_len} tokens a step, {args.steps} steps each, '
        'alternating')
  for name, t in times.items():
    print(f'{name:7s} ({1 if name == "square" else args.blocks} block(s)): median '
          f'{1e3 * statistics.median(t):.1f} ms, p10 {1e3 * sorted(t)[len(t) // 10]:.1f} ms, '
          f'first loss {sides[name].first_loss:.6f}')
  ratio = statistics.median(a / b for a, b in zip(times['square'], times['blocks']))
  print(f'square / blocks, median of paired steps: {ratio:.3f}x')


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
