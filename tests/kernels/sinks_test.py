"""Attention sinks (gpt-oss: a learned logit per head that joins each row's softmax
normalizer) in every kernel that takes them, forward and backward (the sinks' own gradient
included) against a float64 numpy reference: the reference and the CPU causal blocks here;
splash and both rings with chunked masks in tests/kernels/chunk_test.py; and the kernels
that cannot take them refused or passed over by `auto`."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from tests.kernels import ring_test
from zoo import config as config_lib
from zoo import kernels
from zoo.kernels import mask as mask_lib


def _numpy(q, k, v, mask, sinks, scale, weights):
  """-> (output, d loss / d (q, k, v, sinks)) in float64 for loss = sum(output x weights);
  the gradients by central differences would be slow, so by the softmax's closed form."""
  q, k, v, w = (np.asarray(x, np.float64) for x in (q, k, v, weights))
  sinks = np.asarray(sinks, np.float64)
  H, G = q.shape[2], k.shape[2]
  k_h, v_h = np.repeat(k, H // G, axis=2), np.repeat(v, H // G, axis=2)
  logits = np.where(mask, np.einsum('blhk,bshk->bhls', q, k_h) * scale, -np.inf)
  sink = sinks[None, :, None, None]
  top = np.maximum(logits.max(-1, keepdims=True), sink)
  exp = np.exp(logits - top)
  norm = exp.sum(-1, keepdims=True) + np.exp(sink - top)
  probs = exp / norm  # [b, h, l, s]
  out = np.einsum('bhls,bshk->blhk', probs, v_h)
  d_probs = np.einsum('blhk,bshk->bhls', w, v_h)
  rows = np.einsum('blhk,blhk->bhl', w, out)[..., None]
  d_logits = probs * (d_probs - rows) * scale
  d_q = np.einsum('bhls,bshk->blhk', d_logits, k_h)
  fold = lambda x: x.reshape(*x.shape[:2], G, H // G, x.shape[-1]).sum(3)
  d_k = fold(np.einsum('bhls,blhk->bshk', d_logits, q))
  d_v = fold(np.einsum('bhls,blhk->bshk', probs, w))
  d_sinks = -np.sum(np.exp(sink - top) / norm * rows, axis=(0, 2, 3))
  return out, (d_q, d_k, d_v, d_sinks)


def _sinks(H, seed=1):
  return jax.random.normal(jax.random.PRNGKey(seed), (H,)) * 2.0


def _check(run, q, k, v, sinks, segments, weights, mask_dense, scale, mesh=None, atol=2e-5):
  """run(q, k, v, sinks) against _numpy on the real tokens, forward and backward."""
  want, want_grads = _numpy(q, k, v, np.asarray(mask_dense), sinks, scale, weights)
  real = np.asarray(segments > 0)[..., None, None]
  loss = lambda *x: jnp.sum(run(*x) * weights)
  with contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh):
    got = jax.jit(run)(q, k, v, sinks)
    grads = jax.jit(jax.grad(loss, (0, 1, 2, 3)))(q, k, v, sinks)
  np.testing.assert_allclose(np.where(real, got, 0), np.where(real, want, 0), atol=atol)
  for g, w in zip(grads, want_grads):
    np.testing.assert_allclose(g, w, atol=atol * 10, rtol=1e-4)


def test_the_reference_and_the_causal_blocks_add_each_heads_sink_to_the_normalizer():
  q, k, v = ring_test._inputs(2)[:3]  # 32 tokens: the reference's whole square
  H, L = q.shape[2], q.shape[1]
  sinks = _sinks(H)
  segments = ring_test._inputs(2)[3]
  weights = ring_test._inputs(2)[4]
  mask = mask_lib.Mask(segments, segments, causal=True, window=12)
  _check(lambda *x: kernels.attention(*x[:3], mask, sinks=x[3]), q, k, v, sinks, segments,
         weights, mask.dense(), q.shape[-1] ** -0.5)
  # 128 tokens: the causal blocks run; a padding query gets 0, as in the whole square
  keys = jax.random.split(jax.random.PRNGKey(2), 4)
  q, k, v = (jax.random.normal(keys[i], (2, 128, H if i == 0 else 2, 8)) for i in range(3))
  segments = jnp.asarray([[1] * 70 + [2] * 58, [1] * 100 + [0] * 28], jnp.int32)
  weights = jax.random.normal(keys[3], q.shape) * (segments > 0)[..., None, None]
  mask = mask_lib.Mask(segments, segments, causal=True)
  assert kernels.causal.supports(mask, 128, 128)
  _check(lambda *x: kernels.attention(*x[:3], mask, sinks=x[3]), q, k, v, sinks, segments,
         weights, mask.dense(), 8 ** -0.5)
  blocks = kernels.attention(q, k, v, mask, sinks=sinks)
  assert np.all(np.asarray(blocks)[1, 100:] == 0)
  assert np.max(np.abs(np.asarray(blocks - kernels.attention(q, k, v, mask)))) > 1e-2


def test_kernels_without_sinks_are_refused_or_passed_over_by_auto():
  name, why = kernels.resolve('auto', on='gpu', dtype=jnp.bfloat16, sinks=True)
  assert name == 'xla' and why == 'auto on gpu: gpu takes no attention sinks'
  assert kernels.resolve('auto', on='tpu', lengths=(1024, 1024), sinks=True)[0] == 'splash'
  with pytest.raises(ValueError, match=r"model.attention.kernel='gpu' takes no attention"):
    kernels.resolve('gpu', on='gpu', sinks=True)
  with pytest.raises(config_lib.ConfigError, match=r"model.attention.kernel='flash_bias' "
                     r"takes no attention sinks \(model.attention.sinks\); use 'auto'"):
    helpers.load(helpers.config_file('gpt_oss_20b'), ['model.attention.kernel=flash_bias'])
