"""Benchmark: a Gated DeltaNet hybrid against its all-attention twin as the sequence grows,
train-step tokens/s and the compiled step's temporaries, and the decoding cache one
sequence holds, on this machine's CPU.

    JAX_PLATFORMS=cpu python benchmarks/linear_attention.py [--lengths=256,1024,4096]
        [--batch=2] [--steps=5]

The hybrid is qwen3_next_80b_a3b's smoke ('DDDG': three Gated DeltaNet layers, one gated
attention layer, 32-token chunks); the twin the same config with pattern 'GGGG' (every layer
attention, XLA's causal blocks on CPU). One device, float32, random tokens, no remat.
Prints per length and model: median step time, tokens/s, XLA's temporaries for the step,
and the decoding cache per sequence (KV cache of the attention layers + the DeltaNet
layers' fixed state, float32 here).
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
from zoo.families import decoder
from zoo.models import delta_net
from zoo.models import dims
from zoo.train import runtime

CONFIG = 'configs/qwen3_next_80b_a3b.py:smoke'
MODELS = (('hybrid DDDG', []), ('attention GGGG', ['model.attention.pattern=GGGG']))


def _cache_bytes(m, length):
  """One sequence's decoding cache at `length` tokens: keys and values of the attention
  layers, the DeltaNet layers' state and convolution inputs."""
  itemsize = np.dtype(m.dtype).itemsize
  kv = decoder.kv_cache_layers(m) * length * 2 * dims.kv_heads(m) * dims.head_dim(m) * itemsize
  d = m.delta
  state = decoder.delta_layers(m) * delta_net.state_bytes(
      d.key_heads, d.value_heads, d.key_dim, d.value_dim, d.conv_width, itemsize)
  return kv + state


def measure(overrides, length, batch_size, steps):
  config = config_lib.load(CONFIG, [*overrides, f'data.seq_len={length}',
                                    f'model.max_length={length}', f'train.batch_size={batch_size}',
                                    'mesh.data=1'])
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  parts = runtime.model_state(run_lib.resolve(config), mesh)
  step = jax.jit(parts.train_step(config), donate_argnums=(0,))
  rng = np.random.default_rng(0)
  shapes = families.batch_spec(config, batch_size)
  batch = {k: (rng.integers(4, config.model.vocab_size, shape).astype(dtype)
               if dtype == np.int32 else np.ones(shape, dtype)) for k, (shape, dtype) in shapes.items()}
  batch['segment_ids'] = np.ones_like(batch['segment_ids'])
  batch['positions'] = np.broadcast_to(np.arange(length), shapes['positions'][0])
  batch = jax.tree.map(jnp.asarray, batch)
  with jax.set_mesh(mesh):
    state = jax.jit(parts.init_fn, out_shardings=parts.shardings)(jax.random.PRNGKey(0))
    temporaries = step.lower(state, batch).compile().memory_analysis().temp_size_in_bytes
    state, metrics = step(state, batch)  # compile + warm-up
    jax.block_until_ready(metrics)
    times = []
    for _ in range(steps):
      start = time.perf_counter()
      state, metrics = step(state, batch)
      jax.block_until_ready(metrics)
      times.append(time.perf_counter() - start)
  return statistics.median(times), temporaries, _cache_bytes(config.model, length)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--lengths', default='256,1024,4096')
  parser.add_argument('--batch', type=int, default=2)
  parser.add_argument('--steps', type=int, default=5)
  args = parser.parse_args()
  print(f'{CONFIG}, batch {args.batch}, {args.steps} steps, '
        f'{platform.processor() or platform.machine()} ({os.cpu_count()} cores), '
        f'{jax.devices()[0].device_kind}, jax {jax.__version__}')
  print(f'{"length":>7} {"model":<15} {"step (ms)":>10} {"tokens/s":>9} '
        f'{"temporaries (MiB)":>18} {"cache/seq (MiB)":>16}')
  for length in map(int, args.lengths.split(',')):
    for name, overrides in MODELS:
      seconds, temporaries, cache = measure(overrides, length, args.batch, args.steps)
      print(f'{length:>7} {name:<15} {seconds * 1000:>10.1f} '
            f'{args.batch * length / seconds:>9.0f} {temporaries / 2**20:>18.1f} '
            f'{cache / 2**20:>16.2f}', flush=True)


if __name__ == '__main__':
  zoo_platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
