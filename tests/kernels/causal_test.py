"""The causal query blocks against the reference attention over the whole [L, L] square:
forward and gradients, packed documents with padding, GQA and MQA, a sliding window, an
ALiBi bias; and which masks take the blocks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo import kernels
from zoo.kernels import causal
from zoo.kernels import mask as mask_lib
from zoo.kernels import reference
from zoo.models import attention

B, L, H, K = 2, 128, 4, 8


def _inputs(kv_heads):
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  q = jax.random.normal(keys[0], (B, L, H, K))
  k = jax.random.normal(keys[1], (B, L, kv_heads, K))
  v = jax.random.normal(keys[2], (B, L, kv_heads, K))
  weights = jax.random.normal(keys[3], (B, L, H, K))  # padding rows' outputs weighted too
  # row 0: three packed documents; row 1: 20 padding tokens (left: in the first block),
  # then one document
  segments = jnp.asarray([[1] * 40 + [2] * 50 + [3] * 38, [0] * 20 + [1] * 108], jnp.int32)
  return q, k, v, weights, segments


@pytest.mark.parametrize('kv_heads,window,alibi', [(4, 0, False), (2, 0, True), (1, 48, False)])
def test_the_blocks_give_the_whole_squares_outputs_and_gradients(kv_heads, window, alibi):
  q, k, v, weights, segments = _inputs(kv_heads)
  mask = mask_lib.Mask(segments, segments, causal=True, window=window)
  positions = jnp.broadcast_to(jnp.arange(L), (B, L))
  bias = attention.alibi_bias(positions, positions, H).dense() if alibi else None
  assert causal.supports(mask, L, L)

  def loss(fn):
    return lambda q, k, v: jnp.sum(fn(q, k, v) * weights)
  blocks = lambda q, k, v: causal.attention(q, k, v, mask, bias)
  square = lambda q, k, v: reference.dot_product_attention(q, k, v, mask.dense(), bias)
  np.testing.assert_allclose(blocks(q, k, v), square(q, k, v), atol=2e-6, rtol=1e-5)
  got = jax.grad(loss(blocks), argnums=(0, 1, 2))(q, k, v)
  want = jax.grad(loss(square), argnums=(0, 1, 2))(q, k, v)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


def test_kernels_attention_runs_the_blocks_on_cpus_for_a_causal_mask_else_the_square():
  q, k, v, _, segments = _inputs(4)
  for is_causal in (True, False):
    mask = mask_lib.Mask(segments, segments, causal=is_causal)
    got = kernels.attention(q, k, v, mask, kernel='xla')
    want = reference.dot_product_attention(q, k, v, mask.dense())
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
  lowered = lambda is_causal: jax.jit(lambda q, k, v: kernels.attention(
      q, k, v, mask_lib.Mask(segments, segments, causal=is_causal))).lower(q, k, v).as_text()
  assert lowered(True).count('dot_general') == 2 * causal.BLOCKS
  assert lowered(False).count('dot_general') == 2
  with kernels.target('tpu'):  # accelerators: the whole square (plan mode counts its FLOPs)
    assert lowered(True).count('dot_general') == 2


def test_only_in_order_causal_self_attention_of_a_dividing_length_takes_the_blocks():
  ids = lambda n: jnp.ones((1, n), jnp.int32)
  assert causal.supports(mask_lib.Mask(ids(128), ids(128), causal=True), 128, 128)
  assert causal.supports(mask_lib.Mask(ids(512), ids(512), causal=True, window=64), 512, 512)
  assert not causal.supports(mask_lib.Mask(ids(128), ids(128)), 128, 128)  # bidirectional
  assert not causal.supports(mask_lib.Mask(ids(64), ids(64), causal=True), 64, 64)  # short
  assert not causal.supports(mask_lib.Mask(ids(130), ids(130), causal=True), 130, 130)
  assert not causal.supports(mask_lib.Mask(ids(1), ids(128), causal=True, kv_cache=True),
                             1, 128)
  slots = jnp.arange(128)[None]
  assert not causal.supports(mask_lib.Mask(ids(128), ids(128), causal=True, slots=slots),
                             128, 128)
