"""DeepSeek Sparse Attention (zoo/kernels/sparse.py) against a float64 numpy reference: the
indexer's top keys under the causal and packed-document mask, MLA over them alone (forward
and backward), the indexer's KL; with every key kept it is dense MLA; block by block its
compiled memory grows as L x T, not L x S."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo.kernels import mask as mask_lib
from zoo.kernels import sparse

B, L, H, C, R, I, J = 2, 12, 3, 8, 4, 4, 6
SCALE = 0.3
# row 0: two documents and padding; row 1: one document
SEGMENTS = np.array([[1] * 5 + [2] * 5 + [0] * 2, [1] * 12], np.int32)


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  draw = lambda *shape: rng.normal(size=shape).astype(np.float32)
  queries = (draw(B, L, H, C), draw(B, L, H, R))
  keys = (draw(B, L, C), draw(B, L, R))
  index = (draw(B, L, I, J), draw(B, L, J), draw(B, L, I))
  return queries, keys, index


def _mask():
  ids = jnp.asarray(SEGMENTS)
  return mask_lib.Mask(ids, ids, causal=True)


def _visible():
  same = SEGMENTS[:, :, None] == SEGMENTS[:, None, :]
  return same & (SEGMENTS[:, None, :] > 0) & np.tril(np.ones((L, L), bool))[None]


def _reference(queries, keys, index, top, dense=False):
  """float64: (output latent [B, L, H, C], kept [B, L, S] bool, KL summed over real queries)."""
  f = lambda t: np.asarray(t, np.float64)
  (q_latent, q_rope), (latent, rope_key) = map(lambda t: tuple(map(f, t)), (queries, keys))
  iq, ik, w = map(f, index)
  scores = np.einsum('blis,bli->bls', np.maximum(np.einsum('blij,bsj->blis', iq, ik), 0), w)
  visible = _visible()
  kept = np.zeros_like(visible)
  for b in range(B):
    for l in range(L):
      order = np.argsort(-np.where(visible[b, l], scores[b, l], -np.inf), kind='stable')
      kept[b, l, order[:top]] = True
  kept = visible if dense else kept & visible
  logits = (np.einsum('blhc,bsc->bhls', q_latent, latent) +
            np.einsum('blhr,bsr->bhls', q_rope, rope_key)) * SCALE
  logits = np.where(kept[:, None], logits, -np.inf)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  out = np.einsum('bhls,bsc->blhc', np.nan_to_num(probs), latent)
  target = np.nan_to_num(probs).sum(1)
  target /= np.maximum(target.sum(-1, keepdims=True), 1e-300)
  log_q = np.where(kept, scores, -np.inf)
  log_q = log_q - np.log(np.sum(np.exp(log_q - log_q.max(-1, keepdims=True)), -1,
                                keepdims=True)) - log_q.max(-1, keepdims=True)
  terms = np.where(kept & (target > 0), target * (np.log(np.where(target > 0, target, 1)) -
                                                  np.where(kept, log_q, 0)), 0)
  real = SEGMENTS > 0
  return out, kept, np.sum(terms.sum(-1)[real])


def _kept_by_kernel(slots, kept_slots):
  out = np.zeros((B, L, L), bool)
  for b in range(B):
    for l in range(L):
      out[b, l, slots[b, l][kept_slots[b, l]]] = True
  return out


@pytest.mark.parametrize('block', [1, 4, 12])
def test_dsa_attends_the_indexers_top_keys_alone_as_the_float64_reference(block):
  queries, keys, index = _inputs()
  out, slots, kl = sparse.attention(queries, keys, index, _mask(), top=5, block=block,
                                    scale=SCALE)
  want, kept, want_kl = _reference(queries, keys, index, top=5)
  real = SEGMENTS > 0
  np.testing.assert_allclose(np.asarray(out)[real], want[real], atol=2e-5, rtol=0)
  visible = _visible()
  got_kept = _kept_by_kernel(np.asarray(slots), np.take_along_axis(visible, np.asarray(slots),
                                                                   -1))
  np.testing.assert_array_equal(got_kept[real], kept[real])
  assert kept[1, 11].sum() == 5 and kept[0, 6].sum() == 2  # 5 of 12 keys; a short document
  np.testing.assert_allclose(float(kl), want_kl, rtol=1e-5)


def test_with_every_key_kept_dsa_is_dense_mla():
  queries, keys, index = _inputs(seed=1)
  want, kept, want_kl = _reference(queries, keys, index, top=L, dense=True)
  real = SEGMENTS > 0
  for top, dense in ((L, False), (3, True)):  # top-k past every key, or the warm-up's all
    out, _, kl = sparse.attention(queries, keys, index, _mask(), top=top, block=4, scale=SCALE,
                                  dense=dense)
    np.testing.assert_allclose(np.asarray(out)[real], want[real], atol=2e-5, rtol=0)
    np.testing.assert_allclose(float(kl), want_kl, rtol=1e-5)  # the KL over every key
  assert np.array_equal(kept, _visible())


def test_gradients_flow_to_the_kept_keys_as_masked_dense_attention_and_to_the_indexer_by_kl():
  queries, keys, index = _inputs(seed=2)
  mask = _mask()
  _, slots, _ = sparse.attention(queries, keys, index, mask, top=4, block=4, scale=SCALE)
  kept = jnp.asarray(_kept_by_kernel(np.asarray(slots), np.take_along_axis(
      _visible(), np.asarray(slots), -1)))
  real = jnp.asarray(SEGMENTS > 0)[:, :, None, None]

  def dsa(q_latent, latent):
    out, _, _ = sparse.attention((q_latent, queries[1]), (latent, keys[1]), index, mask,
                                 top=4, block=4, scale=SCALE)
    return jnp.sum(jnp.where(real, out, 0.0) ** 2)

  def masked_dense(q_latent, latent):
    logits = (jnp.einsum('blhc,bsc->bhls', q_latent, latent) +
              jnp.einsum('blhr,bsr->bhls', queries[1], keys[1])) * SCALE
    probs = jax.nn.softmax(jnp.where(kept[:, None], logits, -1e30), axis=-1)
    return jnp.sum(jnp.where(real, jnp.einsum('bhls,bsc->blhc', probs, latent), 0.0) ** 2)

  got = jax.grad(dsa, argnums=(0, 1))(queries[0], keys[0])
  want = jax.grad(masked_dense, argnums=(0, 1))(queries[0], keys[0])
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)
  # the indexer's q, k and weights learn from the KL alone
  kl_grads = jax.grad(lambda i: sparse.attention(queries, keys, i, mask, 4, 4, SCALE)[2])(index)
  assert all(float(jnp.max(jnp.abs(g))) > 0 for g in kl_grads)
  out_grads = jax.grad(lambda i: jnp.sum(sparse.attention(queries, keys, i, mask, 4, 4,
                                                          SCALE)[0]))(index)
  assert all(float(jnp.max(jnp.abs(g))) == 0 for g in out_grads)


def test_compiled_memory_grows_as_length_times_top_k_not_length_squared():
  """Forward and backward at 4 lengths, T = 64 kept keys, blocks of 128 queries: the
  compiler's temporary bytes per token stay flat where dense attention's would double with
  each doubling of the length."""
  H_, C_, R_, I_, J_, T = 2, 16, 8, 2, 8, 64

  def temp_bytes(length):
    shapes = [(1, length, H_, C_), (1, length, H_, R_), (1, length, C_), (1, length, R_),
              (1, length, I_, J_), (1, length, J_), (1, length, I_)]
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]

    def loss(q_latent, q_rope, latent, rope_key, iq, ik, w):
      ids = jnp.ones((1, length), jnp.int32)
      out, _, kl = sparse.attention((q_latent, q_rope), (latent, rope_key), (iq, ik, w),
                                    mask_lib.Mask(ids, ids, causal=True), T, 128, SCALE)
      return jnp.sum(out) + kl

    compiled = jax.jit(jax.grad(loss, argnums=tuple(range(7)))).lower(*args).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  lengths = (1024, 2048, 4096, 8192)
  per_token = [temp_bytes(n) / n for n in lengths]
  # linear: bytes per token within 1.5x across an 8x range (quadratic would be 8x)
  assert max(per_token) < 1.5 * min(per_token), per_token
  # and below one dense float32 logits row per token (S x 4 bytes x heads) at 8192
  assert per_token[-1] < 8192 * 4 * H_, per_token
