"""Dimensions derived from the model config, shared by the modules, counting and conversion."""

from zoo.models import rope

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
  """model.rope_scaling as zoo/models/rope.py takes it: (type, its fields...), or ()."""
  r = m.rope_scaling
  if r.type == 'llama3':
    return ('llama3', r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_length)
  if r.type == 'linear':
    return ('linear', r.factor)
  if r.type == 'dynamic':
    return ('dynamic', r.factor, r.original_max_length)
  if r.type == 'yarn':
    factor = r.attention_factor or rope.yarn_attention_factor(r.factor, r.mscale,
                                                              r.mscale_all_dim)
    return ('yarn', r.factor, r.original_max_length, r.beta_fast, r.beta_slow, factor,
            r.truncate)
  return ()


def shared_mlp_dim(m):
  """The shared experts' MLP width: model.moe.shared_mlp_dim, else num_shared_experts x the
  routed experts' width."""
  return m.moe.shared_mlp_dim or (m.moe.expert_mlp_dim or m.mlp_dim) * m.moe.num_shared_experts


def dropout(m, adapters):
  """True where training draws dropout masks: model.dropout_rate, or the adapters'
  (train.lora's lora.Spec) dropout."""
  return bool(m.dropout_rate or (adapters.rank and adapters.dropout))
