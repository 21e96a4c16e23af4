"""Benchmark: zoo.bench's train step compiled with other XLA options against the zoo's own,
in one process, the variants' steps alternating. On a VM whose speed drifts 10-20% between
minutes, separate processes cannot see a 2% change; steps that alternate slow alike.

    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python benchmarks/xla_options.py \
        --variant='{"xla_cpu_ftz": true}' [--variant=JSON ...] [--steps=40] \
        [--override=FIELD=VALUE ...]

Each --variant is a JSON object of XLA options laid over the ones the zoo compiles with on
the platform (`zoo.platform.compiler_options`); null drops one of those, so
--variant='{"xla_cpu_copy_insertion_use_region_analysis": null}' measures what the zoo's
own CPU option buys, and '{}' compiles the zoo's own again: an A/A control, the noise
floor of the run. The shape is zoo.bench's default (GPT-2-like, d_model 256, 4 layers,
vocab 4096, float32, batch 16 x 128); --override changes a config field of it. Prints the
device, then per variant its options, compile seconds, first loss, median and
10th-percentile step time and the median of the paired per-step ratios (the zoo's options'
time / the variant's: above 1 = the variant is faster).
"""

import argparse
import json
import os
import statistics
import sys

import jax

from zoo import config as config_lib
from zoo.bench import __main__ as bench
from zoo.bench import jax_side
from zoo.bench import machine
from zoo import platform
from zoo import run as run_lib

EXAMPLE = '--variant=\'{"xla_cpu_ftz": true}\''


def parse_variant(text):
  """--variant's JSON -> {option: value or None}; a ValueError naming the flag otherwise."""
  try:
    options = json.loads(text)
  except json.JSONDecodeError:
    options = None
  if not (isinstance(options, dict) and all(
      v is None or isinstance(v, (bool, int, float, str)) for v in options.values())):
    raise ValueError(f'--variant={text}: not a JSON object of XLA options to values (null '
                     f'drops one of the zoo\'s); e.g. {EXAMPLE}')
  return options


def laid_over(own, variant):
  """The zoo's options for the platform (or None) with a variant's laid over them."""
  options = dict(own or {})
  for name, value in variant.items():
    if value is None:
      options.pop(name, None)
    else:
      options[name] = value
  return options or None


def check(options, text):
  """XLA checks option names and values only when it compiles: a one-line program first,
  so a typo costs a second, not a train step's compile."""
  try:
    jax.jit(lambda x: x + 1, compiler_options=options).lower(1.0).compile()
  except jax.errors.JaxRuntimeError as e:
    reason = str(e).splitlines()[0].removeprefix('INVALID_ARGUMENT: ')
    raise ValueError(f'--variant={text}: {reason}; see XLA\'s DebugOptions for the names '
                     'and values') from None


def _trainer(config, batch, options):
  """A compiled bench Trainer whose jits get `options` (read while Trainer() compiles)."""
  default = platform.compiler_options
  platform.compiler_options = lambda _: options
  try:
    return jax_side.Trainer(run_lib.resolve(config), batch)
  finally:
    platform.compiler_options = default


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--variant', action='append', required=True)
  parser.add_argument('--steps', type=int, default=40)
  parser.add_argument('--override', action='append', default=[])
  args = parser.parse_args()
  device = jax.devices()[0]
  own = platform.compiler_options(device.platform)
  try:
    if args.steps < 1:
      raise ValueError(f'--steps={args.steps} must be >= 1')
    config = config_lib.load(bench.DEFAULT_CONFIG, [*bench.DEFAULT_OVERRIDES, *args.override])
    variants = {'zoo': own}
    for i, text in enumerate(args.variant):
      options = laid_over(own, parse_variant(text))
      check(options, text)
      variants[f'variant {i + 1}'] = options
  except ValueError as e:  # ConfigError included
    print(f'error: {e}', file=sys.stderr, flush=True)
    sys.exit(2)

  batch = jax_side.random_batch(config)
  sides = {name: _trainer(config, batch, options) for name, options in variants.items()}
  times = jax_side.alternating_steps(sides, args.steps)

  command = ' '.join(['python benchmarks/xla_options.py',
                      *(f"--variant='{v}'" for v in args.variant), f'--steps={args.steps}',
                      *(f'--override={o}' for o in args.override)])
  print(f'GLIBC_TUNABLES={os.environ.get("GLIBC_TUNABLES", "(unset)")} {command}\n'
        f'one device, {machine.describe(device)}; batch {config.train.batch_size} x '
        f'{config.data.seq_len}; {args.steps} steps each, alternating')
  print('| variant | XLA options | compile s | first loss | median ms | p10 ms | zoo / variant |')
  print('|---|---|---|---|---|---|---|')
  for name, t in times.items():
    ratio = statistics.median(a / b for a, b in zip(times['zoo'], t))
    print(f'| {name} | {json.dumps(variants[name])} | {sides[name].compile_seconds:.1f} | '
          f'{sides[name].first_loss:.6f} | {1e3 * statistics.median(t):.1f} | '
          f'{1e3 * sorted(t)[len(t) // 10]:.1f} | {ratio:.3f}x |')


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
