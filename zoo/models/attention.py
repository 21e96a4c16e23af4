"""Reference attention, mask builders and the multi-head (GQA/MQA) attention module.

Glossary: B batch, L query length, S key length, D d_model, H heads, G kv heads,
N = H // G query heads per kv head, K head dim.
Masks are boolean, True = may attend, broadcastable to [B, H, L, S].
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from zoo.models import layers

_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite, so fully masked rows stay finite


def dot_product_attention(query, key, value, mask=None, bias=None, scale=None):
  """softmax(q k^T * scale + bias, masked) v with query [B,L,H,K], key/value [B,S,G,K].

  G must divide H (GQA; G = 1 is MQA). scale defaults to K^-0.5. Logits and softmax run in
  float32; the result has the query's dtype.
  """
  q_BLHK, k_BSGK, v_BSGK = query, key, value
  B, L, H, K = q_BLHK.shape
  G = k_BSGK.shape[2]
  if H % G:
    raise ValueError(f'kv heads {G} do not divide query heads {H}')
  scale = K ** -0.5 if scale is None else scale
  q_BLGNK = q_BLHK.reshape(B, L, G, H // G, K)
  logits_BGNLS = jnp.einsum('BLGNK,BSGK->BGNLS', q_BLGNK, k_BSGK,
                            preferred_element_type=jnp.float32) * scale
  logits_BHLS = logits_BGNLS.reshape(B, H, L, -1)
  if bias is not None:
    logits_BHLS = logits_BHLS + bias.astype(jnp.float32)
  if mask is not None:
    logits_BHLS = jnp.where(mask, logits_BHLS, _MASKED)
  probs_BGNLS = jax.nn.softmax(logits_BHLS, axis=-1).reshape(logits_BGNLS.shape)
  out_BLGNK = jnp.einsum('BGNLS,BSGK->BLGNK', probs_BGNLS.astype(v_BSGK.dtype), v_BSGK)
  return out_BLGNK.reshape(B, L, H, K).astype(q_BLHK.dtype)


# ---------------------------------------------------------------------------- masks

def causal_mask(length):
  """[1, 1, L, L]: query i attends keys j <= i."""
  return jnp.tril(jnp.ones((length, length), jnp.bool_))[None, None]


def padding_mask(q_valid_BL, kv_valid_BS):
  """[B, 1, L, S]: both the query and the key are real tokens."""
  return (q_valid_BL[:, :, None] & kv_valid_BS[:, None, :])[:, None]


def segment_mask(q_segment_ids_BL, kv_segment_ids_BS):
  """[B, 1, L, S]: query and key share a segment; segment 0 (padding) is never attended."""
  same_BLS = q_segment_ids_BL[:, :, None] == kv_segment_ids_BS[:, None, :]
  return (same_BLS & (kv_segment_ids_BS[:, None, :] > 0))[:, None]


def sliding_window_mask(length, window):
  """[1, 1, L, L]: query i attends keys with i - window < j (combine with causal)."""
  i = jnp.arange(length)
  return (i[None, :] > i[:, None] - window)[None, None]


# --------------------------------------------------------------------------- module

class MultiHeadAttention(nn.Module):
  """Self- or cross-attention with H query heads sharing G kv heads."""
  num_heads: int
  num_kv_heads: int
  head_dim: int
  use_bias: bool = False
  rope_theta: float | None = None  # None = no rotary embedding
  fold_scale: bool = False  # T5: logits unscaled, K^-0.5 folded into the query init
  init_std: float = 0.0
  out_init_scale: float = 1.0
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD, kv_BSD=None, mask=None, q_positions_BL=None, kv_positions_BS=None,
               bias_BHLS=None):
    kv_BSD = x_BLD if kv_BSD is None else kv_BSD
    dense = lambda name, f, axes, num_in=1, scale=1.0: layers.DenseGeneral(
        f, axes, num_in=num_in, use_bias=self.use_bias, dtype=self.dtype,
        param_dtype=self.param_dtype, init_std=self.init_std, init_scale=scale, name=name)
    H, G, K = self.num_heads, self.num_kv_heads, self.head_dim
    q_BLHK = dense('query', (H, K), ('embed', 'heads', 'head_dim'),
                   scale=1.0 / K if self.fold_scale else 1.0)(x_BLD)
    k_BSGK = dense('key', (G, K), ('embed', 'kv_heads', 'head_dim'))(kv_BSD)
    v_BSGK = dense('value', (G, K), ('embed', 'kv_heads', 'head_dim'))(kv_BSD)
    if self.rope_theta is not None:
      q_BLHK = layers.apply_rope(q_BLHK, q_positions_BL, self.rope_theta)
      k_BSGK = layers.apply_rope(k_BSGK, kv_positions_BS, self.rope_theta)
    q_BLHK = nn.with_logical_constraint(q_BLHK, ('batch', 'length', 'heads', 'head_dim'))
    out_BLHK = dot_product_attention(q_BLHK, k_BSGK, v_BSGK, mask=mask, bias=bias_BHLS,
                                     scale=1.0 if self.fold_scale else None)
    out_BLHK = nn.with_logical_constraint(out_BLHK, ('batch', 'length', 'heads', 'head_dim'))
    return dense('out', x_BLD.shape[-1], ('heads', 'head_dim', 'embed'), num_in=2,
                 scale=self.out_init_scale)(out_BLHK)


# ----------------------------------------------------------- T5 relative position bias

def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
  """T5's bucket of key_position - query_position (Raffel et al. 2020, sec. 2.1).

  Half the buckets (per direction when bidirectional) are exact offsets; the rest grow
  logarithmically up to max_distance, beyond which offsets share the last bucket.
  Unidirectional (decoder) buckets only distinguish keys at or before the query.
  """
  n = -relative_position
  bucket = jnp.zeros_like(n)
  if bidirectional:
    num_buckets //= 2
    bucket += (n < 0).astype(n.dtype) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  max_exact = num_buckets // 2
  log_ratio = jnp.log(n.astype(jnp.float32) / max_exact + jnp.finfo(jnp.float32).eps)
  large = max_exact + (log_ratio / np.log(max_distance / max_exact) *
                       (num_buckets - max_exact)).astype(n.dtype)
  return bucket + jnp.where(n < max_exact, n, jnp.minimum(large, num_buckets - 1))


class RelativePositionBias(nn.Module):
  """One learned [buckets, H] table per stack -> additive logits bias [B, H, L, S]."""
  num_heads: int
  bidirectional: bool
  num_buckets: int = 32
  max_distance: int = 128
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, q_positions_BL, kv_positions_BS):
    table = self.param('rel_embedding', nn.with_logical_partitioning(
        nn.initializers.normal(1.0), (None, 'heads')), (self.num_buckets, self.num_heads),
                       self.param_dtype)
    relative_BLS = kv_positions_BS[:, None, :] - q_positions_BL[:, :, None]
    buckets_BLS = relative_position_bucket(relative_BLS, self.bidirectional, self.num_buckets,
                                           self.max_distance)
    return jnp.take(table, buckets_BLS, axis=0).transpose(0, 3, 1, 2).astype(jnp.float32)


# ---------------------------------------------------------------------------- ALiBi

def alibi_slopes(num_heads):
  """Per-head slopes of ALiBi (Press et al. 2022): 2^(-8/n), 2^(-16/n), ... for the largest
  power of two n <= H, then every other slope of 2n for the remaining heads."""
  def powers(n):
    return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
  n = 2 ** int(np.floor(np.log2(num_heads)))
  return np.asarray(powers(n) + powers(2 * n)[0::2][:num_heads - n], np.float32)


def alibi_bias(q_positions_BL, kv_positions_BS, num_heads):
  """[B, H, L, S]: -slope_h * (query position - key position), a linear distance penalty."""
  distance_BLS = (q_positions_BL[:, :, None] - kv_positions_BS[:, None, :]).astype(jnp.float32)
  return -alibi_slopes(num_heads)[None, :, None, None] * jnp.abs(distance_BLS)[:, None]
