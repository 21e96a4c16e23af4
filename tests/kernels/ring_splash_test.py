"""Ring attention with splash local blocks (Pallas interpret mode on CPU) through the kernel
switch on a data 2 x context 2 mesh, against the reference kernel on the whole sequence:
forward and gradients for causal GQA with packed documents and padding, a sliding window
spanning three chunk distances (MQA) and bidirectional MHA."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.kernels.ring_test import _reference  # the reference on the whole sequence
from zoo import kernels
from zoo.kernels import mask as mask_lib
from zoo.kernels import ring

N = 2  # devices on the ring
B, L, H, K = 2, 2 * N * 128, 4, 32  # causal: 2N chunks of 128, splash's smallest block


def _inputs(kv_heads):
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  q = jax.random.normal(keys[0], (B, L, H, K))
  k, v = (jax.random.normal(key, (B, L, kv_heads, K)) for key in keys[1:3])
  # row 0: three packed documents; row 1: one document then padding
  segments = jnp.asarray([[1] * 100 + [2] * 300 + [3] * 112, [1] * 450 + [0] * 62], jnp.int32)
  weights = jax.random.normal(keys[3], (B, L, H, K)) * (segments > 0)[..., None, None]
  return q, k, v, segments, weights


def _splash_ring(q, k, v, segments, causal, window):
  """As the decoder lays a causal sequence out (ring.balance, slots kept); the encoder's
  bidirectional one stays in order."""
  spread, gather = ((lambda x: ring.balance(x, N)), (lambda x: ring.unbalance(x, N))) \
      if causal else ((lambda x: x), (lambda x: x))
  slots = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
  seg = spread(segments)
  mask = mask_lib.Mask(seg, seg, causal=causal, window=window,
                       slots=spread(slots) if causal else None)
  return gather(kernels.attention(spread(q), spread(k), spread(v), mask, kernel='splash',
                                  block_sizes=(128, 128)))


CASES = {'causal_gqa_packed': (2, True, 0), 'window_mqa': (1, True, 200),
         'bidirectional_mha': (4, False, 0)}


@pytest.mark.parametrize('name', CASES)
def test_splash_blocks_in_the_ring_give_the_reference_forward_and_backward(name):
  kv_heads, causal, window = CASES[name]
  q, k, v, segments, weights = _inputs(kv_heads)
  mesh = jax.make_mesh((2, N), ('data', 'context'), devices=jax.devices()[:2 * N],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  run = lambda *x: _splash_ring(*x, segments, causal, window)
  loss = lambda fn: lambda *x: jnp.sum(fn(*x) * weights)
  with jax.set_mesh(mesh):
    jaxpr = str(jax.make_jaxpr(jax.grad(loss(run), (0, 1, 2)))(q, k, v))
    assert 'pallas_call' in jaxpr and 'ppermute' in jaxpr  # splash blocks, on a ring
    got = jax.jit(run)(q, k, v)
    got_grads = jax.jit(jax.grad(loss(run), (0, 1, 2)))(q, k, v)
  want = _reference(q, k, v, segments, causal, window)
  want_grads = jax.grad(loss(lambda *x: _reference(*x, segments, causal, window)),
                        (0, 1, 2))(q, k, v)
  real = (segments > 0)[..., None, None]  # padding queries attend padding keys in splash
  np.testing.assert_allclose(np.where(real, got, 0), np.where(real, want, 0), atol=2e-5)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(g, w, atol=2e-5)
