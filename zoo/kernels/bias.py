"""Additive position biases of the attention logits, described rather than materialised:
`PositionBias` holds the query and key positions and the bias's parameters, so the
flash_bias kernel computes each block's bias inside the block and the xla and cuDNN
kernels take `dense()`, the [B, H, L, S] array.

- 't5': T5's bucketed relative position bias (Raffel et al. 2020, sec. 2.1); `params` is the
  learned [buckets, H] table, `bidirectional` for the encoder, causal buckets for the decoder.
- 'alibi': ALiBi (Press et al. 2022); `params` are the [H] per-head slopes (constants).

Glossary: B batch, L query length, S key length.
"""

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
  """T5's bucket of key_position - query_position.

  Half the buckets (per direction when bidirectional) are exact offsets; the rest grow
  logarithmically up to max_distance, beyond which offsets share the last bucket.
  Unidirectional (decoder) buckets only distinguish keys at or before the query.
  Elementwise jnp only, so the flash_bias kernel calls it on each block.
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


def alibi_slopes(num_heads):
  """Per-head slopes of ALiBi: 2^(-8/n), 2^(-16/n), ... for the largest power of two
  n <= H, then every other slope of 2n for the remaining heads."""
  def powers(n):
    return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
  n = 2 ** int(np.floor(np.log2(num_heads)))
  return np.asarray(powers(n) + powers(2 * n)[0::2][:num_heads - n], np.float32)


def alibi(slopes, distance):
  """-slope * |query position - key position|: the penalty for `distance` (any shape)."""
  return -slopes * jnp.abs(distance).astype(jnp.float32)


@flax.struct.dataclass
class PositionBias:
  """The bias of logits [B, H, L, S] from positions: see the module docstring."""
  q_positions: jax.Array  # [B, L] int
  kv_positions: jax.Array  # [B, S] int
  params: jax.Array  # t5: [buckets, H] table; alibi: [H] slopes
  kind: str = flax.struct.field(pytree_node=False, default='t5')
  bidirectional: bool = flax.struct.field(pytree_node=False, default=True)
  max_distance: int = flax.struct.field(pytree_node=False, default=128)

  def dense(self):
    """[B, H, L, S] float32."""
    relative_BLS = self.kv_positions[:, None, :] - self.q_positions[:, :, None]
    if self.kind == 'alibi':
      return alibi(self.params[None, :, None, None], relative_BLS[:, None])
    buckets_BLS = relative_position_bucket(relative_BLS, self.bidirectional,
                                           self.params.shape[0], self.max_distance)
    return jnp.take(self.params, buckets_BLS, axis=0).transpose(0, 3, 1, 2).astype(jnp.float32)
