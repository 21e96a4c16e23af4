"""Benchmark: train-step time of the two MoE dispatch paths, dropless (sorted tokens +
ragged_dot) against capacity-based (one-hot dispatch/combine), on this machine's CPU.

    JAX_PLATFORMS=cpu python benchmarks/moe_dispatch.py [--config=configs/mixtral_8x7b.py:smoke]
        [--steps=20] [--batch=8] [--seq_len=256]

Runs on one device (no expert parallelism) with random tokens; prints the median step time
of each path after a warm-up step, and the share of (token, choice) pairs dropped.
"""

import argparse
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from zoo import config as config_lib
from zoo import families
from zoo import platform as zoo_platform
from zoo import run as run_lib
from zoo import sharding
from zoo.train import runtime


def time_path(spec, overrides, steps, batch_size):
  config = config_lib.load(spec, [*overrides, f'train.batch_size={batch_size}', 'mesh.data=1'])
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  parts = runtime.model_state(run_lib.resolve(config), mesh)
  init_fn, shardings = parts.init_fn, parts.shardings
  train_step = jax.jit(parts.train_step(config), donate_argnums=(0,))
  rng = np.random.default_rng(0)
  shapes = families.batch_spec(config, batch_size)
  batch = {k: (rng.integers(0, config.model.vocab_size, shape).astype(dtype) if dtype == np.int32
               else np.ones(shape, dtype)) for k, (shape, dtype) in shapes.items()}
  batch['segment_ids'] = np.ones_like(batch['segment_ids'])
  batch['positions'] = np.broadcast_to(np.arange(config.data.seq_len), shapes['positions'][0])
  batch = jax.tree.map(jnp.asarray, batch)
  with jax.set_mesh(mesh):
    state = jax.jit(init_fn, out_shardings=shardings)(jax.random.PRNGKey(0))
    state, metrics = train_step(state, batch)  # compile + warm-up
    jax.block_until_ready(metrics)
    times = []
    for _ in range(steps):
      start = time.perf_counter()
      state, metrics = train_step(state, batch)
      jax.block_until_ready(metrics)
      times.append(time.perf_counter() - start)
  return statistics.median(times), float(metrics['moe_dropped_fraction'])


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/mixtral_8x7b.py:smoke')
  parser.add_argument('--steps', type=int, default=20)
  parser.add_argument('--batch', type=int, default=8)
  parser.add_argument('--seq_len', type=int, default=256)
  args = parser.parse_args()
  common = [f'data.seq_len={args.seq_len}', f'model.max_length={args.seq_len}']
  print(f'{args.config}, batch {args.batch} x {args.seq_len}, {args.steps} steps, '
        f'{platform.processor() or platform.machine()} ({os.cpu_count()} cores), '
        f'{jax.devices()[0].device_kind}, jax {jax.__version__}')
  print(f'{"path":<26} {"median step (ms)":>16} {"dropped":>8}')
  for name, extra in [('dropless (ragged_dot)', ['model.moe.capacity_factor=0']),
                      ('capacity factor 1.25', ['model.moe.capacity_factor=1.25']),
                      ('capacity factor 2.0', ['model.moe.capacity_factor=2.0'])]:
    seconds, dropped = time_path(args.config, [*common, *extra], args.steps, args.batch)
    print(f'{name:<26} {seconds * 1000:>16.1f} {dropped:>8.3f}', flush=True)


if __name__ == '__main__':
  zoo_platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
