"""Dimensions derived from the model config, shared by the modules, counting and conversion."""

POSITION_BIASES = ('t5_bias', 'alibi')  # positions added to the attention scores


def head_dim(m):
  return m.head_dim or m.d_model // m.num_heads


def kv_heads(m):
  return m.num_kv_heads or m.num_heads


def has_position_bias(m):
  """True where attention adds a position bias (flash_bias computes it per block; splash
  takes none)."""
  return m.position in POSITION_BIASES


def rope_scaling(m):
  """-> (factor, low_freq_factor, high_freq_factor, original_max_length), or () for none."""
  r = m.rope_scaling
  if r.type == 'none':
    return ()
  return (r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_length)
