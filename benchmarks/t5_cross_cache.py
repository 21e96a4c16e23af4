"""Benchmark: T5 generation with the cross-attention keys and values projected once into the
cache (what zoo.infer.generate does) against projecting the encoder output every step.

    JAX_PLATFORMS=cpu python benchmarks/t5_cross_cache.py [--config=configs/t5_small.py]
        [--input_len=512] [--new_tokens=32] [--batch=4] [--repeats=3]

Random-init weights in float32 (speed does not depend on them), greedy, no EOS. The
"every step" side swaps MultiHeadAttention._cached_input for the plain projection, which is
how decoding ran before the cache. Prints new tokens per second (median of the repeats,
after one compile run) and checks both sides produce the same tokens.
"""

import argparse
import statistics
import time

import jax
import numpy as np

from zoo import config as config_lib
from zoo import families
from zoo import platform
from zoo.infer import generate
from zoo.models import attention


def _tokens_per_second(model, variables, ids, new_tokens, repeats):
  fn = jax.jit(generate.make(model, new_tokens, {'temperature': 0.0}, -1, 0))
  run = lambda: jax.block_until_ready(fn(variables, ids, np.ones_like(ids),
                                          jax.random.PRNGKey(0)))
  out = run()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  return ids.shape[0] * new_tokens / statistics.median(times), np.asarray(out)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/t5_small.py')
  parser.add_argument('--input_len', type=int, default=512)
  parser.add_argument('--new_tokens', type=int, default=32)
  parser.add_argument('--batch', type=int, default=4)
  parser.add_argument('--repeats', type=int, default=3)
  args = parser.parse_args()
  config = config_lib.load(args.config, ['model.dtype=float32'])
  model = families.build(config.model)
  variables = {'params': model.init(jax.random.PRNGKey(0), families.example_batch(
      config.model, 1, 16))['params']}
  ids = np.random.default_rng(0).integers(1, config.model.vocab_size,
                                          (args.batch, args.input_len)).astype(np.int32)
  cached, want = _tokens_per_second(model, variables, ids, args.new_tokens, args.repeats)
  kept = attention.MultiHeadAttention._cached_input
  attention.MultiHeadAttention._cached_input = lambda self, project_kv: project_kv()
  try:
    every_step, got = _tokens_per_second(model, variables, ids, args.new_tokens, args.repeats)
  finally:
    attention.MultiHeadAttention._cached_input = kept
  np.testing.assert_array_equal(got, want)
  print(f'{args.config} on {jax.devices()[0].device_kind}, batch {args.batch}, input '
        f'{args.input_len}, {args.new_tokens} new tokens, greedy, float32')
  print(f'cross-attention keys cached: {cached:8.1f} new tokens/s')
  print(f'projected every step:        {every_step:8.1f} new tokens/s '
        f'(x{cached / every_step:.2f})')


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
