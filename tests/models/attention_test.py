import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo.kernels import bias as bias_lib
from zoo.kernels import mask as mask_lib
from zoo.kernels import reference
from zoo.models import attention


def reference_attention(q, k, v, mask=None, bias=None, scale=None):
  """float64 numpy: the textbook formula, GQA by repeating kv heads."""
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  H, G = q.shape[2], k.shape[2]
  k, v = np.repeat(k, H // G, axis=2), np.repeat(v, H // G, axis=2)
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  logits = np.einsum('blhk,bshk->bhls', q, k) * scale
  if bias is not None:
    logits = logits + bias
  if mask is not None:
    logits = np.where(mask, logits, -np.inf)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  return np.einsum('bhls,bshk->blhk', probs, v)


def _qkv(H, G, B=2, L=7, S=9, K=8, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(keys[0], (B, L, H, K)), jax.random.normal(keys[1], (B, S, G, K)),
          jax.random.normal(keys[2], (B, S, G, K)))


@pytest.mark.parametrize('H,G', [(4, 4), (4, 2), (4, 1)], ids=['mha', 'gqa', 'mqa'])
@pytest.mark.parametrize('masked', [False, True])
def test_dot_product_attention_matches_float64_reference(H, G, masked):
  q, k, v = _qkv(H, G)
  mask = None
  if masked:
    mask = np.random.default_rng(1).random((2, 1, 7, 9)) < 0.6
    mask[..., 0] = True  # every query sees at least one key
  bias = np.random.default_rng(2).normal(size=(1, H, 7, 9)).astype(np.float32)
  got = reference.dot_product_attention(q, k, v, mask=mask, bias=bias)
  np.testing.assert_allclose(got, reference_attention(q, k, v, mask, bias), atol=2e-5)


def test_scale_argument_replaces_the_default():
  q, k, v = _qkv(2, 2)
  got = reference.dot_product_attention(q, k, v, scale=1.0)
  np.testing.assert_allclose(got, reference_attention(q, k, v, scale=1.0), atol=2e-5)


def test_kv_heads_must_divide_heads():
  q, k, v = _qkv(4, 3)
  with pytest.raises(ValueError, match='do not divide'):
    reference.dot_product_attention(q, k, v)


def test_fully_masked_rows_stay_finite():
  q, k, v = _qkv(2, 2)
  out = reference.dot_product_attention(q, k, v, mask=np.zeros((1, 1, 7, 9), bool))
  assert np.isfinite(out).all()


def test_segment_mask_keeps_tokens_inside_their_segment_and_off_padding():
  seg = jnp.array([[1, 1, 2, 2, 0]])
  got = np.asarray(mask_lib.segment_mask(seg, seg)[0, 0])
  want = np.array([[1, 1, 0, 0, 0],
                   [1, 1, 0, 0, 0],
                   [0, 0, 1, 1, 0],
                   [0, 0, 1, 1, 0],
                   [0, 0, 0, 0, 0]], bool)
  np.testing.assert_array_equal(got, want)


def test_causal_padding_and_window_masks():
  np.testing.assert_array_equal(mask_lib.causal_mask(3)[0, 0],
                                [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
  np.testing.assert_array_equal(
      mask_lib.causal_mask(4)[0, 0] & mask_lib.sliding_window_mask(4, 2)[0, 0],
      [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]])
  valid = jnp.array([[True, True, False]])
  np.testing.assert_array_equal(mask_lib.padding_mask(valid, valid)[0, 0],
                                [[1, 1, 0], [1, 1, 0], [0, 0, 0]])


def test_alibi_slopes_match_the_paper():
  # Press et al. 2022: 8 heads -> 1/2, 1/4, ..., 1/256
  np.testing.assert_allclose(bias_lib.alibi_slopes(8), [2.0 ** -i for i in range(1, 9)])
  # 12 heads: the 8 slopes of n=8, then every other slope of n=16 (2^-0.5, 2^-1.5, ...)
  np.testing.assert_allclose(bias_lib.alibi_slopes(12)[8:],
                             [2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5])


def test_alibi_bias_penalises_distance_linearly():
  positions = jnp.arange(4)[None]
  bias = np.asarray(attention.alibi_bias(positions, positions, 8).dense())
  np.testing.assert_allclose(bias[0, 0, 3], [-1.5, -1.0, -0.5, 0.0])  # head 0: slope 1/2
  np.testing.assert_allclose(bias[0, 1, 3], [-0.75, -0.5, -0.25, 0.0])  # head 1: slope 1/4
