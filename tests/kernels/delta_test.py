"""The gated delta rule (zoo/kernels/delta.py): the chunked form equals a float64 numpy
recurrence (forward, final state, packed segments, a carried state, a length no chunk
divides) and the JAX recurrence's gradients; the blocked unit-triangular inverse equals
numpy's; the Gated DeltaNet layer (zoo/models/delta_net.py) runs packed documents as the
documents alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo.kernels import delta
from zoo.kernels import mask as mask_lib
from zoo.models import delta_net

B, L, H, K, J = 2, 37, 3, 8, 5


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  k = rng.normal(size=(B, L, H, K))
  segments = np.ones((B, L), np.int32)
  segments[0, 10:], segments[0, 30:] = 2, 3  # three documents packed in row 0
  segments[1, :5] = 0  # row 1 left-padded
  return dict(q=rng.normal(size=(B, L, H, K)) * K ** -0.5,
              k=k / np.linalg.norm(k, axis=-1, keepdims=True),
              v=rng.normal(size=(B, L, H, J)), g=-rng.uniform(0.01, 2.0, size=(B, L, H)),
              beta=rng.uniform(0.0, 1.0, size=(B, L, H)), segments=segments,
              state=rng.normal(size=(B, H, K, J)), state_segment=np.array([1, 0], np.int32))


def _numpy_recurrence(x):
  """Token by token in float64: reset at a new segment, decay, correct toward v, read."""
  out, final = np.zeros((B, L, H, J)), np.zeros((B, H, K, J))
  for b in range(B):
    S, before = x['state'][b].copy(), x['state_segment'][b]
    for t in range(L):
      if x['segments'][b, t] != before:
        S = np.zeros_like(S)
      before = x['segments'][b, t]
      S = S * np.exp(x['g'][b, t])[:, None, None]
      read = np.einsum('hkj,hk->hj', S, x['k'][b, t])
      S = S + np.einsum('hk,hj->hkj', x['k'][b, t],
                        (x['v'][b, t] - read) * x['beta'][b, t][:, None])
      out[b, t] = np.einsum('hkj,hk->hj', S, x['q'][b, t])
    final[b] = S
  return out, final


_chunked = jax.jit(delta.chunked, static_argnums=6)


def _args(x):
  return [jnp.asarray(x[n]) for n in ('q', 'k', 'v', 'g', 'beta', 'segments')]


@pytest.mark.parametrize('chunk', [1, 8, 64])
def test_the_chunked_rule_equals_a_float64_recurrence_with_packing_and_a_carried_state(chunk):
  x = _inputs()
  want_out, want_state = _numpy_recurrence(x)
  with jax.enable_x64(True):
    out, state, segment = _chunked(*_args(x), chunk, jnp.asarray(x['state']),
                                        jnp.asarray(x['state_segment']))
    np.testing.assert_allclose(out, want_out, atol=1e-12, rtol=0)
    np.testing.assert_allclose(state, want_state, atol=1e-12, rtol=0)
    np.testing.assert_array_equal(segment, [3, 1])
  # float32, as training runs it
  out, state, _ = _chunked(*[a.astype(jnp.float32) if a.dtype.kind == 'f' else a
                                  for a in _args(x)], chunk, jnp.asarray(x['state'], jnp.float32),
                                jnp.asarray(x['state_segment']))
  np.testing.assert_allclose(out, want_out, atol=2e-5, rtol=0)


def test_the_chunked_rules_gradients_equal_the_recurrences_in_float64():
  x = _inputs(1)
  with jax.enable_x64(True):
    args = _args(x)[:5]
    segments, state = jnp.asarray(x['segments']), jnp.asarray(x['state'])
    prev = jnp.asarray(x['state_segment'])
    weights = jnp.asarray(np.random.default_rng(2).normal(size=(B, L, H, J)))
    state_weights = jnp.asarray(np.random.default_rng(3).normal(size=(B, H, K, J)))

    def loss(fn):
      def f(q, k, v, g, beta, s0):
        out, s1, _ = fn(q, k, v, g, beta, s0)
        return jnp.sum(out * weights) + jnp.sum(s1 * state_weights)
      return jax.jit(jax.grad(f, argnums=tuple(range(6))))(*args, state)

    got = loss(lambda *a: delta.chunked(*a[:5], segments, 8, a[5], prev))
    want = loss(lambda *a: delta.recurrent(*a[:5], segments, a[5], prev))
    for name, g_got, g_want in zip(('q', 'k', 'v', 'g', 'beta', 'state'), got, want):
      np.testing.assert_allclose(g_got, g_want, atol=1e-10, rtol=0, err_msg=name)
      assert np.abs(g_want).max() > 1e-3, name  # every input moves the loss


@pytest.mark.parametrize('width', [1, 5, 16])
def test_the_blocked_unit_lower_inverse_equals_numpys(width):
  rng = np.random.default_rng(width)
  t = np.tril(rng.normal(size=(3, width, width)), -1) + np.eye(width)
  np.testing.assert_allclose(delta.unit_lower_inverse(jnp.asarray(t, jnp.float32)),
                             np.linalg.inv(t), atol=1e-4, rtol=1e-4)


def test_a_packed_row_runs_its_documents_as_if_alone():
  layer = delta_net.GatedDeltaNet(key_heads=2, value_heads=4, key_dim=8, value_dim=8,
                                  conv_width=4, chunk=4)
  rng = np.random.default_rng(4)
  first, second = rng.normal(size=(7, 16)), rng.normal(size=(9, 16))
  packed = np.concatenate([first, second])
  pad = lambda x: np.concatenate([x, np.zeros((16 - len(x), 16))])
  # one batch: the packed row, each document alone (padding after it), the packed row as
  # one document (no reset)
  x = jnp.asarray(np.stack([packed, pad(first), pad(second), packed]), jnp.float32)
  segments = jnp.asarray([[1] * 7 + [2] * 9, [1] * 7 + [0] * 9, [1] * 9 + [0] * 7, [1] * 16])
  mask = mask_lib.Mask(segments, segments, causal=True)
  params = layer.init(jax.random.PRNGKey(0), x, mask)
  out = np.asarray(jax.jit(layer.apply)(params, x, mask))
  np.testing.assert_allclose(out[0, :7], out[1, :7], atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(out[0, 7:], out[2, :9], atol=1e-5, rtol=1e-5)
  # the second document does depend on what it reads: its convolution and state are its own
  assert np.abs(out[3, 7:] - out[0, 7:]).max() > 1e-2
