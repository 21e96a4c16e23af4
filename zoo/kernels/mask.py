"""Attention masks: boolean builders (True = may attend) and `Mask`, the description every
kernel understands: segment ids of queries and keys (0 = padding; packed documents never
see each other), causal or not, and a sliding window. The XLA kernel takes `Mask.dense()`;
splash and cuDNN build their own block-sparse or fused form from the same fields.
"""

import flax.struct
import jax
import jax.numpy as jnp


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


@flax.struct.dataclass
class Mask:
  """Which keys each query may attend: same segment (and not padding), at or before it when
  `causal`, and within the last `window` positions when window > 0 (causal only)."""
  q_segment_ids: jax.Array  # [B, L] int, 0 = padding
  kv_segment_ids: jax.Array  # [B, S]
  causal: bool = flax.struct.field(pytree_node=False, default=False)
  window: int = flax.struct.field(pytree_node=False, default=0)

  def dense(self):
    """[B, 1, L, S] boolean."""
    mask = segment_mask(self.q_segment_ids, self.kv_segment_ids)
    if self.causal:
      mask &= causal_mask(self.q_segment_ids.shape[1])
    if self.window:
      mask &= sliding_window_mask(self.q_segment_ids.shape[1], self.window)
    return mask
