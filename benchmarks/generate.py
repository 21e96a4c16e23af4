"""Benchmark: generation with the KV cache against re-running the whole sequence per token.

    JAX_PLATFORMS=cpu python benchmarks/generate.py [--config=configs/gpt_shakespeare.py]
        [--prompt_len=32] [--new_tokens=128] [--batch_sizes=1,8] [--repeats=3]

Random-init weights of the config (speed does not depend on them), greedy decoding, no EOS.
"cached": zoo.infer.generate (prefill, then one token per step against the cache, one
jitted while_loop), which decodes a whole-unrolled layer scan unscanned
(generate.decoding_model); "scanned": the same weights and cache decoded through the layer
scan (the config at model.scan_unroll=1, as on TPU/GPU). "recompute": a jitted forward
pass over the fixed-length buffer (prompt + new tokens) per new token, the argmax of the
last real position appended. Prints new tokens per second (median of the repeats, after
one compile run) and checks the three produce the same tokens.
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from zoo import config as config_lib
from zoo import families
from zoo import platform
from zoo.infer import generate


def _time(fn, repeats):
  jax.block_until_ready(fn())  # compile
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times), out


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/gpt_shakespeare.py')
  parser.add_argument('--prompt_len', type=int, default=32)
  parser.add_argument('--new_tokens', type=int, default=128)
  parser.add_argument('--batch_sizes', default='1,8')
  parser.add_argument('--repeats', type=int, default=3)
  args = parser.parse_args()
  config = config_lib.load(args.config)
  model = families.build(config.model)
  P, N = args.prompt_len, args.new_tokens
  variables = {'params': jax.jit(model.init)(jax.random.PRNGKey(0), families.example_batch(
      config.model, 1, P + N))['params']}
  cached = jax.jit(generate.make(model, N, {'temperature': 0.0}, eos_id=-1,
                                 pad_id=0))
  rolled = config.model.copy_and_resolve_references()
  with rolled.unlocked():
    rolled.scan_unroll = 1
  scanned = jax.jit(generate.make(families.build(rolled), N, {'temperature': 0.0}, eos_id=-1,
                                  pad_id=0))

  @jax.jit
  def recompute(ids_BP):
    B = ids_BP.shape[0]
    buffer_BS = jnp.concatenate([ids_BP, jnp.zeros((B, N), jnp.int32)], axis=1)

    def step(i, buffer_BS):
      logits_BSV = model.apply(variables, {'inputs': buffer_BS})
      token_B = jnp.argmax(logits_BSV[:, P + i - 1], axis=-1).astype(jnp.int32)
      return buffer_BS.at[:, P + i].set(token_B)
    return jax.lax.fori_loop(0, N, step, buffer_BS)[:, P:]

  print(f'{args.config}: {sum(x.size for x in jax.tree.leaves(variables)):,} parameters, '
        f'prompt {P}, {N} new tokens, greedy, {jax.devices()[0].device_kind} '
        f'x{jax.device_count()}')
  print(f'{"batch":>5} {"cached tok/s":>13} {"scanned tok/s":>14} {"recompute tok/s":>16} '
        f'{"speed-up":>9}')
  for B in (int(b) for b in args.batch_sizes.split(',')):
    ids = np.random.default_rng(B).integers(4, config.model.vocab_size, (B, P)).astype(np.int32)
    segments = np.ones_like(ids)
    t_cached, got = _time(lambda: cached(variables, ids, segments, jax.random.PRNGKey(0)),
                          args.repeats)
    t_scanned, via_scan = _time(lambda: scanned(variables, ids, segments,
                                                jax.random.PRNGKey(0)), args.repeats)
    t_full, want = _time(lambda: recompute(ids), args.repeats)
    same = all(np.array_equal(np.asarray(x), np.asarray(want)) for x in (got, via_scan))
    print(f'{B:>5} {B * N / t_cached:>13,.0f} {B * N / t_scanned:>14,.0f} '
          f'{B * N / t_full:>16,.0f} {t_full / t_cached:>8.1f}x  same tokens: {same}')


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
