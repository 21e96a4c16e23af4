"""The Gated DeltaNet layer, Qwen3-Next's linear-attention mixer (model.attention.pattern
letter 'D'; its shape in model.delta): q, k and v projections each through a short causal
depthwise convolution and SiLU, q and k L2-normalised (q x K^-0.5), per head a decay
g = -exp(decay_log) softplus(a + decay_bias) and a write strength beta = sigmoid(b), the
gated delta rule (zoo/kernels/delta.py) over the sequence, then an RMS norm of each head's
output gated by SiLU(z) and the output projection.

The convolution and the rule stop at segment boundaries, so packed documents (and left
padding) run as the documents alone. Decoding keeps, per layer, a fixed-size cache: the
state [B, H, K, J] and the convolution's last width - 1 inputs, with the segments they
belong to; nothing grows with the sequence.

Glossary: B batch, L length, D d_model, G key heads, H value heads (each key head serves
H / G of them), K key head dim, J value head dim, W convolution width, P the convolution's
W - 1 held input tokens, T tokens P + L, S keys (attention's argument, unused here).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.kernels import delta as delta_lib
from zoo.models import layers
from zoo.models import lora as lora_lib
from zoo.models import quant as quant_lib

L2_EPS = 1e-6  # the q and k normalisation's (transformers' and FLA's)


class GatedDeltaNet(nn.Module):
  """x [B, L, D] and the layer's `Mask` (its query segment ids; kv_cache when decoding)
  -> [B, L, D]. Called as attention is; positions and a position bias go unused (the state
  carries the order)."""
  key_heads: int
  value_heads: int
  key_dim: int
  value_dim: int
  conv_width: int = 4
  chunk: int = 64
  norm_eps: float = 1e-6
  init_std: float = 0.0
  out_init_scale: float = 1.0
  quant: quant_lib.Recipe = quant_lib.Recipe()
  lora: lora_lib.Spec = lora_lib.Spec()
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD, mask, q_positions_BL=None, kv_positions_BS=None, bias=None):
    G, H, K, J = self.key_heads, self.value_heads, self.key_dim, self.value_dim
    dense = lambda name, f, axes, num_in=1, scale=1.0: layers.DenseGeneral(
        f, axes, num_in=num_in, dtype=self.dtype, param_dtype=self.param_dtype,
        init_std=self.init_std, init_scale=scale, quant=self.quant, lora=self.lora, name=name)
    segment_ids_BL = mask.q_segment_ids
    decoding = mask.kv_cache
    pages = mask.pages
    if pages is not None:  # serving: one sequence a row, its padding after its tokens
      valid_BL = segment_ids_BL > 0
      segment_ids_BL = jnp.ones_like(segment_ids_BL)
    q_BLGK = dense('query', (G, K), ('embed', 'heads', 'head_dim'))(x_BLD)
    k_BLGK = dense('key', (G, K), ('embed', 'heads', 'head_dim'))(x_BLD)
    v_BLHJ = dense('value', (H, J), ('embed', 'heads', 'head_dim'))(x_BLD)
    z_BLHJ = dense('gate', (H, J), ('embed', 'heads', 'head_dim'))(x_BLD)
    b_BLH = dense('write', H, ('embed', 'heads'))(x_BLD)
    a_BLH = dense('decay', H, ('embed', 'heads'))(x_BLD)

    fed_B = None if pages is None else jnp.sum(valid_BL, axis=1)
    convolve = lambda name, x: self._conv(name, x, segment_ids_BL, decoding, pages, fed_B)
    q_BLGK, k_BLGK, v_BLHJ = (convolve(n, x) for n, x in (('query', q_BLGK), ('key', k_BLGK),
                                                          ('value', v_BLHJ)))
    wide = jnp.promote_types(self.dtype, jnp.float32)  # float32, or float64 in tests
    l2 = lambda x: x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + L2_EPS)
    q_BLGK = l2(q_BLGK.astype(wide)) * K ** -0.5
    k_BLGK = l2(k_BLGK.astype(wide))
    q_BLHK, k_BLHK = (jnp.repeat(x, H // G, axis=2) for x in (q_BLGK, k_BLGK))
    q_BLHK = nn.with_logical_constraint(q_BLHK, ('batch', 'length', 'heads', 'head_dim'))
    k_BLHK = nn.with_logical_constraint(k_BLHK, ('batch', 'length', 'heads', 'head_dim'))

    decay_log_H = self.param('decay_log', nn.with_logical_partitioning(
        lambda key, shape, dtype: jnp.log(jax.random.uniform(key, shape, dtype, 1.0, 16.0)),
        ('heads',)), (H,), self.param_dtype)
    decay_bias_H = self.param('decay_bias', nn.with_logical_partitioning(
        nn.initializers.ones, ('heads',)), (H,), self.param_dtype)
    g_BLH = -jnp.exp(decay_log_H.astype(wide))[None, None] * jax.nn.softplus(
        a_BLH.astype(wide) + decay_bias_H.astype(wide)[None, None])
    beta_BLH = jax.nn.sigmoid(b_BLH.astype(wide))

    if pages is not None:  # padding changes nothing: no write, no decay
      real = lambda x: jnp.where(valid_BL.reshape(*valid_BL.shape, *(1,) * (x.ndim - 2)), x, 0)
      k_BLHK, beta_BLH, g_BLH = real(k_BLHK), real(beta_BLH), real(g_BLH)
    if decoding:
      state, state_segment, store = self._held('state', (H, K, J), jnp.float32, x_BLD.shape[0],
                                               (), segment_ids_BL.dtype, pages)
      o_BLHJ, state_BHKJ, segment_B = delta_lib.chunked(
          q_BLHK, k_BLHK, v_BLHJ, g_BLH, beta_BLH, segment_ids_BL, self.chunk, state,
          state_segment)
      if not self.is_initializing():
        store(state_BHKJ, segment_B)
    else:
      o_BLHJ, _, _ = delta_lib.chunked(q_BLHK, k_BLHK, v_BLHJ, g_BLH, beta_BLH,
                                       segment_ids_BL, self.chunk)
    o_BLHJ = nn.with_logical_constraint(o_BLHJ, ('batch', 'length', 'heads', 'head_dim'))
    # the gated norm: RMS over each head's output (float32), x scale, x SiLU(z)
    scale_J = self.param('norm_scale', nn.with_logical_partitioning(
        nn.initializers.ones, ('head_dim',)), (J,), self.param_dtype)
    o_BLHJ = o_BLHJ * jax.lax.rsqrt(jnp.mean(o_BLHJ * o_BLHJ, axis=-1, keepdims=True) +
                                    self.norm_eps)
    o_BLHJ = (o_BLHJ.astype(self.dtype) *
              scale_J.astype(self.dtype)[None, None, None]).astype(wide)
    o_BLHJ = (o_BLHJ * jax.nn.silu(z_BLHJ.astype(wide))).astype(self.dtype)
    return dense('out', x_BLD.shape[-1], ('heads', 'head_dim', 'embed'), num_in=2,
                 scale=self.out_init_scale)(o_BLHJ)

  def _conv(self, name, x_BLHK, segment_ids_BL, decoding, pages=None, fed_B=None):
    """The causal depthwise convolution of width W over each channel, then SiLU; a tap
    reads an input of another segment as 0. Decoding reads the cached last W - 1 inputs
    (and their segments) before the new ones and keeps the newest W - 1 (serving: before a
    row's padding, after its fed_B tokens)."""
    W = self.conv_width
    B, L = x_BLHK.shape[:2]
    kernel_WHK = self.param(f'{name}_conv', nn.with_logical_partitioning(
        nn.initializers.variance_scaling(1.0, 'fan_in', 'truncated_normal', in_axis=0,
                                         out_axis=(1, 2)),
        (None, 'heads', 'head_dim')), (W, *x_BLHK.shape[2:]), self.param_dtype)
    if decoding:
      past_BPHK, past_segments_BP, store = self._held(
          f'{name}_conv_inputs', (W - 1, *x_BLHK.shape[2:]), x_BLHK.dtype, B, (W - 1,),
          segment_ids_BL.dtype, pages, f'{name}_conv_segments')
    else:
      past_BPHK = jnp.zeros((B, W - 1, *x_BLHK.shape[2:]), x_BLHK.dtype)
      past_segments_BP = jnp.full((B, W - 1), -1, segment_ids_BL.dtype)
    inputs_BTHK = jnp.concatenate([past_BPHK, x_BLHK], axis=1)  # T = W - 1 + L
    segments_BT = jnp.concatenate([past_segments_BP, segment_ids_BL], axis=1)
    wide = jnp.promote_types(self.dtype, jnp.float32)
    out_BLHK = jnp.zeros(x_BLHK.shape, wide)
    for w in range(W):  # tap w reads the input W - 1 - w tokens back
      same_BL = segments_BT[:, w:w + L] == segment_ids_BL
      tap_BLHK = (inputs_BTHK[:, w:w + L].astype(wide) *
                  kernel_WHK[w].astype(wide)[None, None])
      out_BLHK = out_BLHK + jnp.where(same_BL[:, :, None, None], tap_BLHK, 0.0)
    if decoding and not self.is_initializing():
      newest_B1 = jnp.full((B, 1), L) if fed_B is None else fed_B[:, None]
      kept_BP = jnp.arange(W - 1)[None] + newest_B1  # the W - 1 inputs before the next
      store(jnp.take_along_axis(inputs_BTHK, kept_BP[:, :, None, None], axis=1),
            jnp.take_along_axis(segments_BT, kept_BP, axis=1))
    return jax.nn.silu(out_BLHK).astype(self.dtype)

  def _held(self, name, shape, dtype, B, segment_shape, segment_dtype, pages,
            segment_name=None):
    """A decoding cache entry and its segments -> (value [B, *shape], segments [B,
    *segment_shape], store(value, segments)). Serving keeps them in a pool with a slot per
    sequence (pages.slots): a row starting at position 0 reads no past (zeros, segment 0)."""
    segment_name = segment_name or f'{name}_segment'
    if pages is None:
      value = self.variable('cache', name, jnp.zeros, (B, *shape), dtype)
      segments = self.variable('cache', segment_name, jnp.zeros, (B, *segment_shape),
                               segment_dtype)

      def store(new_value, new_segments):
        value.value, segments.value = new_value, new_segments
      return value.value, segments.value, store
    pool = self.variable('cache', f'{name}_pool', jnp.zeros, (pages.slot_count, *shape), dtype)
    continuing_B = (pages.positions[:, 0] > 0).astype(segment_dtype)
    past_segments = jnp.broadcast_to(continuing_B.reshape(-1, *(1,) * len(segment_shape)),
                                     (B, *segment_shape))

    def store_pool(new_value, _):
      pool.value = pool.value.at[pages.slots].set(new_value.astype(dtype))
    # a new sequence's past is zeros (what it keeps of it is read as its own segment later)
    continuing = continuing_B.reshape(-1, *(1,) * len(shape)) > 0
    past = jnp.where(continuing, pool.value[pages.slots], 0)
    return past, past_segments, store_pool


def state_bytes(key_heads, value_heads, key_dim, value_dim, conv_width, cache_bytes):
  """One sequence's decoding cache in one Gated DeltaNet layer: the float32 state and the
  convolution's held inputs (in the cache dtype's `cache_bytes` per value)."""
  conv = (conv_width - 1) * (2 * key_heads * key_dim + value_heads * value_dim)
  return int(value_heads * key_dim * value_dim * 4 + conv * cache_bytes)
