"""One latent-attention layer's forward and backward against the length, dense MLA beside
DeepSeek Sparse Attention (zoo/kernels/sparse.py), on this machine's CPU.

    python benchmarks/sparse_attention.py
    python benchmarks/sparse_attention.py --lengths=1024,2048,4096,8192 --top_k=256

Prints one row per length and kind: the compiler's temporary bytes (XLA's memory analysis)
and the median seconds of a jitted value-and-gradient over the layer's parameters, batch 1.
The layer is DeepSeek-V3.2's shape narrowed to run on a CPU (the widths in the header).
"""

import argparse
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo import config as config_lib
from zoo import platform
from zoo.kernels import mask as mask_lib
from zoo.models import mla

SHAPE = dict(d_model=512, num_heads=8)
MLA = dict(kv_lora_rank=128, q_lora_rank=192, qk_nope_head_dim=32, qk_rope_head_dim=16,
           v_head_dim=32)
INDEX = dict(index_heads=8, index_head_dim=32, index_block=256)


def _layer(length, top_k, sparse):
  c = config_lib.base()
  c.model.update(SHAPE)
  c.model.mla.update(MLA, **(dict(INDEX, index_top_k=top_k) if sparse else {}))
  module = mla.LatentAttention(c.model)
  x = jax.random.normal(jax.random.PRNGKey(0), (1, length, SHAPE['d_model']))
  positions = jnp.arange(length)[None]
  ids = jnp.ones((1, length), jnp.int32)
  mask = mask_lib.Mask(ids, ids, causal=True)
  params = nn.meta.unbox(module.init(jax.random.PRNGKey(1), x, mask=mask,
                                     q_positions_BL=positions)['params'])

  def loss(p):
    out = module.apply({'params': p}, x, mask=mask, q_positions_BL=positions,
                       mutable=['indexer'])[0]
    return jnp.mean(out ** 2)
  return jax.jit(jax.value_and_grad(loss)), params


def _measure(step, params, repeats):
  compiled = step.lower(params).compile()
  temp = compiled.memory_analysis().temp_size_in_bytes
  jax.block_until_ready(compiled(params))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(compiled(params))
    times.append(time.perf_counter() - start)
  return temp, statistics.median(times)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--lengths', default='1024,2048,4096,8192')
  parser.add_argument('--top_k', type=int, default=256)
  parser.add_argument('--repeats', type=int, default=3)
  args = parser.parse_args()
  platform.apply()
  print(f'one MLA layer {SHAPE} {MLA}; DSA {INDEX} top_k {args.top_k}; batch 1, float32, '
        f'{jax.devices()[0].device_kind} ({jax.device_count()} device), jax {jax.__version__}')
  print(f'{"length":>7} {"kind":>6} {"temp MiB":>9} {"MiB/token":>10} {"seconds":>8}')
  for length in map(int, args.lengths.split(',')):
    for kind in ('dense', 'dsa'):
      temp, seconds = _measure(*_layer(length, args.top_k, kind == 'dsa'), args.repeats)
      print(f'{length:>7} {kind:>6} {temp / 2**20:>9.1f} {temp / 2**20 / length:>10.4f} '
            f'{seconds:>8.3f}')


if __name__ == '__main__':
  main()
