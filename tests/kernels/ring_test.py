"""Ring attention on 8 simulated devices (context 4 x data 2) against the reference kernel
on the whole sequence: forward and gradients, causal (load-balanced layout), packed
documents with padding, GQA and MQA, sliding windows, bidirectional."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from zoo.kernels import mask as mask_lib
from zoo.kernels import reference
from zoo.kernels import ring

B, L, H, K, N = 2, 32, 4, 8, 4  # N devices on the ring


def _inputs(kv_heads, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  q = jax.random.normal(keys[0], (B, L, H, K))
  k = jax.random.normal(keys[1], (B, L, kv_heads, K))
  v = jax.random.normal(keys[2], (B, L, kv_heads, K))
  # row 0: three packed documents; row 1: one document then padding
  segments = jnp.asarray([[1] * 10 + [2] * 13 + [3] * 9, [1] * 27 + [0] * 5], jnp.int32)
  weights = jax.random.normal(keys[3], (B, L, H, K)) * (segments > 0)[..., None, None]
  return q, k, v, segments, weights


def _reference(q, k, v, segments, causal, window):
  dense = mask_lib.Mask(segments, segments, causal=causal, window=window).dense()
  return reference.dot_product_attention(q, k, v, mask=dense)


def _ring(q, k, v, segments, causal, window):
  mesh = jax.make_mesh((2, N), ('data', 'context'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  slots = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
  spread = lambda x: ring.balance(x, N)
  rows, heads = P('data', 'context'), P('data', 'context', None, None)
  local = jax.jit(jax.shard_map(
      lambda *a: ring.ring_attention(*a, axis='context', causal=causal, window=window),
      mesh=mesh, in_specs=(heads, heads, heads, rows, rows, rows, rows), out_specs=heads,
      check_vma=False))
  out = local(*map(spread, (q, k, v, slots, slots, segments, segments)))
  return ring.unbalance(out, N)


CASES = {'causal_gqa': (2, True, 0), 'causal_mqa_window': (1, True, 6),
         'bidirectional_mha': (4, False, 0), 'window_gqa': (2, True, 3)}


@pytest.mark.parametrize('name', CASES)
def test_ring_attention_equals_the_reference_forward_and_backward(name):
  kv_heads, causal, window = CASES[name]
  q, k, v, segments, weights = _inputs(kv_heads)
  real = (segments > 0)[..., None, None]
  np.testing.assert_allclose(np.where(real, _ring(q, k, v, segments, causal, window), 0),
                             np.where(real, _reference(q, k, v, segments, causal, window), 0),
                             atol=2e-5, rtol=2e-5)
  loss = lambda fn: lambda q, k, v: jnp.sum(fn(q, k, v, segments, causal, window) * weights)
  got = jax.grad(loss(_ring), argnums=(0, 1, 2))(q, k, v)
  want = jax.grad(loss(_reference), argnums=(0, 1, 2))(q, k, v)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, atol=2e-5, rtol=2e-5)


def test_balance_gives_each_device_an_early_and_a_late_chunk():
  order = ring.balance(jnp.arange(16)[None], 4)[0]
  # 8 chunks of 2; device i (4 slots each) holds chunks i and 7 - i
  np.testing.assert_array_equal(order.reshape(4, 4), [[0, 1, 14, 15], [2, 3, 12, 13],
                                                      [4, 5, 10, 11], [6, 7, 8, 9]])
  np.testing.assert_array_equal(ring.unbalance(order[None], 4)[0], np.arange(16))
