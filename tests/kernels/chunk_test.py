"""Chunked attention (Llama 4: each query attends its own chunk, causally) in every kernel
that takes it, forward and backward against a float64 numpy reference: the reference, the
CPU causal blocks, splash, the XLA ring on a context mesh (its splash blocks refused) and
cuDNN's call through XLA; and the mask itself against a hand count."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.kernels import ring_splash_test
from tests.kernels import sinks_test
from zoo import kernels
from zoo.kernels import gpu
from zoo.kernels import mask as mask_lib
from zoo.kernels import ring

CHUNK = 128  # a splash block: 4 chunks over the 512 tokens


def _no_sinks(H):
  return jnp.full((H,), -1e4, jnp.float32)  # exp(-1e4) = 0: the plain softmax


def test_a_chunked_mask_keeps_each_querys_own_chunk_up_to_itself():
  ids = jnp.ones((1, 10), jnp.int32)
  dense = np.asarray(mask_lib.Mask(ids, ids, causal=True, chunk=4).dense())[0, 0]
  want = np.array([[j <= i and j // 4 == i // 4 for j in range(10)] for i in range(10)])
  np.testing.assert_array_equal(dense, want)
  assert dense[5].tolist() == [False] * 4 + [True, True] + [False] * 4  # keys 4 and 5


def _check(run, q, k, v, segments, weights, mesh=None):
  """run(q, k, v) against the float64 reference on the chunked causal mask."""
  H = q.shape[2]
  mask = mask_lib.Mask(segments, segments, causal=True, chunk=CHUNK)
  sinks_test._check(lambda q, k, v, _: run(q, k, v), q, k, v, _no_sinks(H), segments,
                    weights, mask.dense(), q.shape[-1] ** -0.5, mesh)


@pytest.mark.parametrize('kernel', ['xla', 'splash'])
def test_the_reference_the_causal_blocks_and_splash_attend_within_chunks(kernel):
  q, k, v, segments, weights = ring_splash_test._inputs(2)
  mask = mask_lib.Mask(segments, segments, causal=True, chunk=CHUNK)
  if kernel == 'xla':
    assert kernels.causal.supports(mask, q.shape[1], q.shape[1])  # the CPU blocks run
  _check(lambda q, k, v: kernels.attention(q, k, v, mask, kernel=kernel,
                                           block_sizes=(128, 128)), q, k, v, segments, weights)


def test_the_xla_ring_attends_within_chunks_and_the_splash_ring_is_refused():
  q, k, v, segments, weights = ring_splash_test._inputs(2)
  N, L = ring_splash_test.N, ring_splash_test.L
  mesh = jax.make_mesh((N,), ('context',), devices=jax.devices()[:N],
                       axis_types=(jax.sharding.AxisType.Auto,))
  slots = ring.balance(jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), segments.shape), N)
  seg = ring.balance(segments, N)
  ringed = mask_lib.Mask(seg, seg, causal=True, slots=slots, chunk=CHUNK)
  run = lambda kernel: lambda q, k, v: ring.unbalance(kernels.attention(
      *(ring.balance(a, N) for a in (q, k, v)), ringed, kernel=kernel, block_sizes=(128, 128)),
                                                      N)
  _check(run('auto'), q, k, v, segments, weights, mesh)
  with jax.set_mesh(mesh), pytest.raises(ValueError, match="splash blocks take no attention"):
    run('splash')(q, k, v)


def test_cudnns_call_takes_the_chunks_as_a_boolean_mask():
  q, k, v, segments, weights = ring_splash_test._inputs(2)
  mask = mask_lib.Mask(segments, segments, causal=True, chunk=CHUNK)
  _check(lambda q, k, v: gpu.attention(q, k, v, mask, implementation='xla'), q, k, v,
         segments, weights)
