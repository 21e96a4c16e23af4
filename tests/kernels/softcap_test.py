"""Logit soft-capping (Gemma 2: cap x tanh(logits / cap) before the mask) in every kernel
that takes it, against a float64 numpy reference and the reference kernel: the reference,
the CPU causal blocks, the XLA ring, splash and splash blocks in the ring; and the kernels
that cannot take it refused or passed over by `auto`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from tests.kernels import ring_splash_test
from tests.kernels import ring_test
from zoo import config as config_lib
from zoo import kernels
from zoo.kernels import mask as mask_lib
from zoo.kernels import reference
from zoo.kernels import ring

CAP = 1.5  # small against these logits (|q k| / sqrt(K) reaches ~4), so the cap bites


def _numpy(q, k, v, mask, scale, cap):
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  H, G = q.shape[2], k.shape[2]
  k, v = np.repeat(k, H // G, axis=2), np.repeat(v, H // G, axis=2)
  logits = cap * np.tanh(np.einsum('blhk,bshk->bhls', q, k) * scale / cap)
  logits = np.where(mask, logits, -np.inf)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  return np.einsum('bhls,bshk->blhk', probs, v)


def _qkv(L, H=4, G=2, K=8, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(keys[0], (2, L, H, K)), jax.random.normal(keys[1], (2, L, G, K)),
          jax.random.normal(keys[2], (2, L, G, K)))


def test_the_reference_and_the_causal_blocks_cap_the_scaled_logits_before_the_mask():
  q, k, v = _qkv(128)  # 128 tokens: the CPU causal blocks run
  ids = jnp.ones((2, 128), jnp.int32)
  mask = mask_lib.Mask(ids, ids, causal=True, window=40)
  want = _numpy(q, k, v, np.asarray(mask.dense()), 8 ** -0.5, CAP)
  got = kernels.attention(q, k, v, mask, kernel='xla', softcap=CAP)  # the causal blocks
  square = reference.dot_product_attention(q, k, v, mask.dense(), softcap=CAP)
  np.testing.assert_allclose(got, want, atol=2e-5)
  np.testing.assert_allclose(square, want, atol=2e-5)
  assert np.max(np.abs(np.asarray(square) - np.asarray(
      reference.dot_product_attention(q, k, v, mask.dense())))) > 1e-2  # the cap bites


def test_the_xla_ring_caps_as_the_reference_forward_and_backward():
  q, k, v, segments, weights = ring_test._inputs(2)
  mesh = jax.make_mesh((2, ring_test.N), ('data', 'context'),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  slots = jnp.broadcast_to(jnp.arange(ring_test.L, dtype=jnp.int32), segments.shape)
  P = jax.sharding.PartitionSpec
  rows, heads = P('data', 'context'), P('data', 'context', None, None)
  spread = lambda x: ring.balance(x, ring_test.N)
  local = jax.shard_map(
      lambda *a: ring.ring_attention(*a, axis='context', causal=True, softcap=CAP),
      mesh=mesh, in_specs=(heads,) * 3 + (rows,) * 4, out_specs=heads, check_vma=False)
  run = lambda q, k, v: ring.unbalance(
      local(*map(spread, (q, k, v, slots, slots, segments, segments))), ring_test.N)
  dense = mask_lib.Mask(segments, segments, causal=True).dense()
  want = lambda q, k, v: reference.dot_product_attention(q, k, v, dense, softcap=CAP)
  real = (segments > 0)[..., None, None]
  np.testing.assert_allclose(np.where(real, jax.jit(run)(q, k, v), 0),
                             np.where(real, want(q, k, v), 0), atol=2e-5)
  loss = lambda fn: lambda *x: jnp.sum(fn(*x) * weights)
  for g, w in zip(jax.jit(jax.grad(loss(run), (0, 1, 2)))(q, k, v),
                  jax.grad(loss(want), (0, 1, 2))(q, k, v)):
    np.testing.assert_allclose(g, w, atol=2e-5)


def test_splash_and_splash_blocks_in_the_ring_cap_as_the_reference():
  q, k, v = _qkv(256, K=32)
  ids = jnp.ones((2, 256), jnp.int32)
  mask = mask_lib.Mask(ids, ids, causal=True)
  got = jax.jit(lambda *x: kernels.attention(*x, mask, kernel='splash', block_sizes=(128, 128),
                                             softcap=CAP))(q, k, v)
  want = reference.dot_product_attention(q, k, v, mask.dense(), softcap=CAP)
  np.testing.assert_allclose(got, want, atol=2e-5)

  q, k, v, segments, _ = ring_splash_test._inputs(2)
  N, L = ring_splash_test.N, ring_splash_test.L
  mesh = jax.make_mesh((2, N), ('data', 'context'), devices=jax.devices()[:2 * N],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  slots = ring.balance(jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (2, L)), N)
  seg = ring.balance(segments, N)
  ringed = mask_lib.Mask(seg, seg, causal=True, slots=slots)
  with jax.set_mesh(mesh):
    got = ring.unbalance(jax.jit(lambda *x: kernels.attention(
        *(ring.balance(a, N) for a in x), ringed, kernel='splash', block_sizes=(128, 128),
        softcap=CAP))(q, k, v), N)
  want = reference.dot_product_attention(
      q, k, v, mask_lib.Mask(segments, segments, causal=True).dense(), softcap=CAP)
  real = (segments > 0)[..., None, None]
  np.testing.assert_allclose(np.where(real, got, 0), np.where(real, want, 0), atol=2e-5)


def test_kernels_without_soft_capping_are_refused_or_passed_over_by_auto():
  name, why = kernels.resolve('auto', on='gpu', dtype=jnp.bfloat16, softcap=True)
  assert name == 'xla' and why == 'auto on gpu: gpu cannot soft-cap the logits'
  assert kernels.resolve('auto', on='tpu', lengths=(1024, 1024), softcap=True)[0] == 'splash'
  with pytest.raises(ValueError, match=r"model.attention.kernel='gpu' cannot soft-cap"):
    kernels.resolve('gpu', on='gpu', softcap=True)
  with pytest.raises(config_lib.ConfigError, match=r"model.attention.kernel='gpu' cannot "
                     r"soft-cap the logits \(model.attention.softcap=50.0\); use 'auto'"):
    helpers.load(helpers.config_file('gemma2_9b'), ['model.attention.kernel=gpu'])
