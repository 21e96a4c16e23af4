"""The multi-head (GQA/MQA) attention module and position biases (T5, ALiBi); the attention
itself runs in zoo/kernels (the reference, splash, flash_bias, cuDNN), which also builds the
masks and computes the biases (zoo/kernels/bias.py).

Glossary: B batch, L query length, S key length, D d_model, H heads, G kv heads,
Q = H // G query heads per kv head, K head dim, R ring slots a local layer's cache keeps.

Masks are boolean, True = may attend, broadcastable to [B, H, L, S]; modules pass a
`Mask` (segment ids, causal, window) so each kernel can build its own form.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo import kernels
from zoo.kernels import bias as bias_lib
from zoo.kernels import mask as mask_lib
from zoo.kernels import paged as paged_lib
from zoo.kernels import reference
from zoo.models import layers
from zoo.models import lora as lora_lib
from zoo.models import quant as quant_lib
from zoo.models import rope

# --------------------------------------------------------------------------- module

class MultiHeadAttention(nn.Module):
  """Self- or cross-attention with H query heads sharing G kv heads. Given a `Mask` with
  kv_cache (decoding), self-attention writes its keys and values into the 'cache'
  collection at the cache index and attends over all S cached slots. `cache_kv_input`
  (cross-attention while decoding): the keys and values of `kv_BSD` (the encoder output)
  are projected on the first call and kept in the 'cache' collection; later calls read
  them and skip the projections (a cache made by `init` holds none, so the first call
  after it projects)."""
  num_heads: int
  num_kv_heads: int
  head_dim: int
  use_bias: bool = False
  rope_theta: float | None = None  # None = no rotary embedding
  rope_scaling: tuple = ()  # dims.rope_scaling(m): zoo/models/rope.py
  rope_fraction: float = 1.0  # the share of each head's channels that rotates
  output_gate: bool = False  # out x sigmoid(x W_gate) per head and channel (Qwen3-Next)
  fold_scale: bool = False  # T5: logits unscaled, K^-0.5 folded into the query init
  query_scale: float = 0.0  # logits x query_scale^-0.5 (Gemma's query_pre_attn_scalar); 0 = K
  softcap: float = 0.0  # logits soft-capped (Gemma 2); 0 = none
  qk_norm: tuple = ()  # (norm kind, eps): queries and keys normalised per head (Qwen 3)
  sinks: bool = False  # a learned logit per head in each row's softmax normalizer (gpt-oss)
  qk_l2_norm: float = 0.0  # eps > 0: q and k RMS-normalised per head, no gain, after RoPE
  # (floor, scale): queries x (log(floor((position + 1) / floor) + 1) scale + 1) (Llama 4's
  # temperature tuning on its NoPE layers); () = none
  temperature: tuple = ()
  init_std: float = 0.0
  out_init_scale: float = 1.0
  cache_kv_input: bool = False  # cross-attention while decoding: project kv_BSD once
  kernel: str = 'xla'  # model.attention.kernel (zoo/kernels)
  block_sizes: tuple = (0, 0)  # splash (block_q, block_kv); 0 = min(512, length)
  log_max_logit: bool = False  # sow each head's max logit into 'logits' (training)
  quant: quant_lib.Recipe = quant_lib.Recipe()  # the projections' (model.quant)
  lora: lora_lib.Spec = lora_lib.Spec()  # adapters on the projections it targets
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD, kv_BSD=None, mask=None, q_positions_BL=None, kv_positions_BS=None,
               bias=None):
    kv_BSD = x_BLD if kv_BSD is None else kv_BSD
    dense = lambda name, f, axes, num_in=1, scale=1.0: layers.DenseGeneral(
        f, axes, num_in=num_in, use_bias=self.use_bias, dtype=self.dtype,
        param_dtype=self.param_dtype, init_std=self.init_std, init_scale=scale,
        quant=self.quant, lora=self.lora, name=name)
    H, G, K = self.num_heads, self.num_kv_heads, self.head_dim
    q_BLHK = dense('query', (H, K), ('embed', 'heads', 'head_dim'),
                   scale=1.0 / K if self.fold_scale else 1.0)(x_BLD)
    project_kv = lambda: (dense('key', (G, K), ('embed', 'kv_heads', 'head_dim'))(kv_BSD),
                          dense('value', (G, K), ('embed', 'kv_heads', 'head_dim'))(kv_BSD))
    if self.cache_kv_input:
      k_BSGK, v_BSGK = self._cached_input(project_kv)
    else:
      k_BSGK, v_BSGK = project_kv()
    if self.qk_norm:
      norm = lambda name: layers.Norm(*self.qk_norm, axis='head_dim', name=name,
                                      dtype=self.dtype, param_dtype=self.param_dtype)
      q_BLHK, k_BSGK = norm('query_norm')(q_BLHK), norm('key_norm')(k_BSGK)
    if self.rope_theta is not None:
      q_BLHK = rope.apply(q_BLHK, q_positions_BL, self.rope_theta, self.rope_scaling,
                          self.rope_fraction)
      k_BSGK = rope.apply(k_BSGK, kv_positions_BS, self.rope_theta, self.rope_scaling,
                          self.rope_fraction)
    if self.qk_l2_norm:
      q_BLHK, k_BSGK = rms(q_BLHK, self.qk_l2_norm), rms(k_BSGK, self.qk_l2_norm)
    if self.temperature:
      floor, scale = self.temperature
      positions_BL = q_positions_BL.astype(jnp.float32)
      factor_BL = jnp.log1p(jnp.floor((positions_BL + 1.0) / floor)) * scale + 1.0
      q_BLHK = (q_BLHK * factor_BL[:, :, None, None]).astype(q_BLHK.dtype)
    q_BLHK = nn.with_logical_constraint(q_BLHK, ('batch', 'length', 'heads', 'head_dim'))
    kernel = self.kernel
    paged = isinstance(mask, mask_lib.Mask) and mask.pages is not None  # serving
    if isinstance(mask, mask_lib.Mask) and mask.kv_cache and not paged:
      if 0 < mask.window < mask.kv_segment_ids.shape[1]:  # a local layer keeps its window
        k_BSGK, v_BSGK, mask = self._rolling(k_BSGK, v_BSGK, mask)
        kernel = 'xla'  # a dense mask over the ring and the new keys
      else:
        k_BSGK, v_BSGK, mask = self._cached(k_BSGK, v_BSGK, mask)
    scale = 1.0 if self.fold_scale else (self.query_scale or K) ** -0.5
    sinks_H = None
    if self.sinks:
      sinks_H = self.param('sinks', nn.with_logical_partitioning(nn.initializers.zeros,
                                                                 ('heads',)), (H,),
                           self.param_dtype).astype(jnp.float32)
    if self.log_max_logit and not (isinstance(mask, mask_lib.Mask) and mask.kv_cache):
      sow_max_logits(self, q_BLHK, k_BSGK, mask, scale)
    if paged:
      out_BLHK = self._paged(q_BLHK, k_BSGK, v_BSGK, mask, scale, sinks_H, bias)
    else:
      out_BLHK = kernels.attention(q_BLHK, k_BSGK, v_BSGK, mask, bias=bias, scale=scale,
                                   kernel=kernel, block_sizes=self.block_sizes,
                                   softcap=self.softcap, sinks=sinks_H)
    out_BLHK = nn.with_logical_constraint(out_BLHK, ('batch', 'length', 'heads', 'head_dim'))
    if self.output_gate:
      gate_BLHK = dense('gate', (H, K), ('embed', 'heads', 'head_dim'))(x_BLD)
      out_BLHK = (out_BLHK.astype(jnp.float32) *
                  jax.nn.sigmoid(gate_BLHK.astype(jnp.float32))).astype(out_BLHK.dtype)
    return dense('out', x_BLD.shape[-1], ('heads', 'head_dim', 'embed'), num_in=2,
                 scale=self.out_init_scale)(out_BLHK)

  def _cached_input(self, project_kv):
    """The input's keys and values from the 'cache' collection, projected and kept there by
    the first call (whether it is the first is known when tracing)."""
    if self.has_variable('cache', 'input_key') and not self.is_initializing():
      return self.get_variable('cache', 'input_key'), self.get_variable('cache', 'input_value')
    k_BSGK, v_BSGK = project_kv()
    if not self.is_initializing():
      self.put_variable('cache', 'input_key', k_BSGK)
      self.put_variable('cache', 'input_value', v_BSGK)
    return k_BSGK, v_BSGK

  def _cached(self, k_BLGK, v_BLGK, mask):
    """Writes the new keys and values at the cache index -> (all S cached keys, values,
    the mask with the queries at their slots). The cache holds keys as [B, G, K, S] and
    values as [B, G, S, K], the operand layouts of the two attention matmuls, so a step
    reads them without copying: in [B, S, G, K] XLA:CPU transposed every layer's whole
    cache on every token (a third of a decode step at the bench shape)."""
    B, L, G, K = k_BLGK.shape
    S = mask.kv_segment_ids.shape[1]
    slot = lambda name, shape: self.variable('cache', name, jnp.zeros, shape, k_BLGK.dtype)
    key = slot('cached_key', (B, G, K, S))
    value = slot('cached_value', (B, G, S, K))
    index = self.variable('cache', 'cache_index', jnp.zeros, (), jnp.int32)
    start = index.value
    write = lambda cache, new, at, axes: nn.with_logical_constraint(
        jax.lax.dynamic_update_slice(cache, new.astype(cache.dtype), at), axes)
    key.value = write(key.value, k_BLGK.transpose(0, 2, 3, 1), (0, 0, 0, start),
                      ('batch', 'kv_heads', 'head_dim', 'length'))
    value.value = write(value.value, v_BLGK.transpose(0, 2, 1, 3), (0, 0, start, 0),
                        ('batch', 'kv_heads', 'length', 'head_dim'))
    index.value = start + L
    return (key.value.transpose(0, 3, 1, 2), value.value.transpose(0, 2, 1, 3),
            mask.replace(q_start=start))

  def _paged(self, q_BLHK, k_BLGK, v_BLGK, mask, scale, sinks_H, bias):
    """Serving (zoo/serve): the new keys and values into the layer's pool of pages, then
    the queries against each row's pages (zoo/kernels/paged.py; mask.pages.kernel). Every
    layer kind keeps all its pages: a local or chunked layer's window is the mask's."""
    pages = mask.pages
    G, K = k_BLGK.shape[2:]
    pool = self.variable('cache', 'paged_kv', jnp.zeros, (pages.count, pages.size, 2 * G, K),
                         k_BLGK.dtype)
    pool.value = paged_lib.write(pool.value, k_BLGK, v_BLGK, pages, mask.q_segment_ids > 0)
    if isinstance(bias, bias_lib.PositionBias):
      bias = bias.dense()
    return paged_lib.attention(q_BLHK, pool.value, mask, scale, self.softcap, sinks_H, bias,
                               pages.kernel)

  def _rolling(self, k_BLGK, v_BLGK, mask):
    """A local (or chunked: zoo.kernels.mask.Mask.chunked) layer's cache: the last R = W +
    mask.lookahead cache slots' keys and values in a ring (slot t at t mod R; W =
    mask.window). The L new queries attend the ring's slots and their own keys within the
    window -> (R + L keys, values, the dense mask [B, 1, L, R + L]); then the last min(L, R)
    new keys and values overwrite the ring.
    Equal to the whole cache: the window holds the same keys. Moving the cache index back
    by up to `lookahead` slots (rejected speculative tokens) leaves the ring right: the
    slots it overwrote are R apart from what it kept, outside every later query's window."""
    B, L, G, K = k_BLGK.shape
    W = mask.window
    R = W + mask.lookahead
    slot = lambda name, shape: self.variable('cache', name, jnp.zeros, shape, k_BLGK.dtype)
    key = slot('cached_key', (B, G, K, R))
    value = slot('cached_value', (B, G, R, K))
    index = self.variable('cache', 'cache_index', jnp.zeros, (), jnp.int32)
    start = index.value
    held_R = start - 1 - jnp.mod(start - 1 - jnp.arange(R), R)  # the newest slot < start
    kv_slots_S = jnp.concatenate([held_R, start + jnp.arange(L)])  # S = R + L keys
    q_slots_L = start + jnp.arange(L)
    last = mask.kv_segment_ids.shape[1] - 1
    kv_segments_BS = jnp.take(mask.kv_segment_ids, jnp.clip(kv_slots_S, 0, last), axis=1)
    kv_segments_BS = jnp.where(kv_slots_S >= 0, kv_segments_BS, 0)  # ring slots not written
    q_segments_BL = mask.q_segment_ids
    dense_BLS = ((q_segments_BL[:, :, None] == kv_segments_BS[:, None, :]) &
                 (kv_segments_BS[:, None, :] > 0) &
                 (kv_slots_S[None, None, :] <= q_slots_L[None, :, None]) &
                 (kv_slots_S[None, None, :] > q_slots_L[None, :, None] - W))
    keys_BSGK = jnp.concatenate([key.value.transpose(0, 3, 1, 2), k_BLGK.astype(key.value.dtype)],
                                axis=1)
    values_BSGK = jnp.concatenate([value.value.transpose(0, 2, 1, 3),
                                   v_BLGK.astype(value.value.dtype)], axis=1)
    n = min(L, R)
    ring_n = jnp.mod(start + L - n + jnp.arange(n), R)
    key.value = key.value.at[:, :, :, ring_n].set(k_BLGK[:, L - n:].transpose(0, 2, 3, 1))
    value.value = value.value.at[:, :, ring_n, :].set(v_BLGK[:, L - n:].transpose(0, 2, 1, 3))
    index.value = start + L
    return keys_BSGK, values_BSGK, dense_BLS[:, None]


# ------------------------------------------------------------------- position biases

class RelativePositionBias(nn.Module):
  """One learned [buckets, H] table per stack -> T5's bias.PositionBias of the logits (the
  kernels compute it per block or take its dense [B, H, L, S] form)."""
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
    return bias_lib.PositionBias(q_positions_BL, kv_positions_BS, table, kind='t5',
                                 bidirectional=self.bidirectional,
                                 max_distance=self.max_distance)


def rms(x, eps):
  """x / RMS(x) over the last axis, in float32, no gain (Llama 4's L2Norm)."""
  x32 = x.astype(jnp.float32)
  return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)).astype(x.dtype)


def sow_max_logits(module, q_BLHK, k_BSGK, mask, scale):
  """Each head's max logit [H] into the 'logits' collection (model.attention.log_max_logit)."""
  dense = mask.dense() if isinstance(mask, mask_lib.Mask) else mask
  module.sow('logits', 'max_logit', reference.max_logits(q_BLHK, k_BSGK, dense, scale))


def alibi_bias(q_positions_BL, kv_positions_BS, num_heads):
  """ALiBi's bias.PositionBias: -slope_h * |query position - key position|."""
  slopes = jnp.asarray(bias_lib.alibi_slopes(num_heads))
  return bias_lib.PositionBias(q_positions_BL, kv_positions_BS, slopes, kind='alibi')
