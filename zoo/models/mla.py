"""Multi-head latent attention (DeepSeek-V2/V3, model.mla): keys and values come from one
compressed latent per token, so a decoding cache holds the latent, not the heads.

Glossary: B batch, L query length, S key length, D d_model, H heads, C kv_lora_rank (the
latent), Q q_lora_rank, N qk_nope_head_dim, R qk_rope_head_dim, V v_head_dim, K head dim,
E the key down-projection's width (C + R), I the indexer's
heads, J its head dim, T keys it keeps per query.

- queries: x -> [Q] -> RMSNorm -> [H, N + R] (q_lora_rank 0: x -> [H, N + R] directly);
- keys and values: x -> [C + R]; the C part RMSNormed is the latent c, the R part the rotary
  key, one for all heads; keys [H, N + R] = (c W_key_up [C, H, N], the rotary key), values
  c W_value_up [C, H, V];
- logits x (N + R)^-0.5, times YaRN's mscale(factor, mscale_all_dim)^2 where RoPE is YaRN
  scaled (DeepSeek's convention).

Training runs the zoo's kernels on the expanded heads (values zero-padded to N + R: the
kernels take one head dim; v_head_dim <= N + R). Decoding keeps the latent and the rotary key in the
'cache' collection (C + R values per token and layer) and absorbs the up-projections: the
query's N part times W_key_up gives its latent query, the attention output over the latents
times W_value_up gives the heads' values, so a step reads only the cache.

With an indexer (model.mla.index_heads, DeepSeek-V3.2) training and prefill attend in the
absorbed form to the keys the indexer keeps (zoo/kernels/sparse.py), and decoding caches the
indexer's keys beside the latent and attends only the kept slots.
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo import kernels
from zoo.kernels import paged as paged_lib
from zoo.kernels import reference
from zoo.kernels import sparse
from zoo.models import attention
from zoo.models import indexer as indexer_lib
from zoo.models import layers
from zoo.models import lora as lora_lib
from zoo.models import rope


def softmax_scale(m):
  """(N + R)^-0.5, times YaRN's mscale(factor, mscale_all_dim)^2 under YaRN scaling."""
  scale = (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim) ** -0.5
  r = m.rope_scaling
  if r.type == 'yarn' and r.mscale_all_dim and r.factor > 1:
    scale *= (0.1 * r.mscale_all_dim * math.log(r.factor) + 1.0) ** 2
  return scale


class LatentAttention(nn.Module):
  """Self-attention through a compressed latent; the same call as MultiHeadAttention's
  (x, mask, positions; no cross-attention, no position bias, no window)."""
  config: object  # the model config (model.mla, heads, rope, kernel)
  out_init_scale: float = 1.0
  rope_scaling: tuple = ()
  lora: lora_lib.Spec = lora_lib.Spec()
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD, kv_BSD=None, mask=None, q_positions_BL=None, kv_positions_BS=None,
               bias=None):
    m, a = self.config, self.config.mla
    H, C, N, R, V = m.num_heads, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, \
        a.v_head_dim
    dense = lambda name, f, axes, num_in=1, scale=1.0: layers.DenseGeneral(
        f, axes, num_in=num_in, dtype=self.dtype, param_dtype=self.param_dtype,
        init_std=m.kernel_init_std, init_scale=scale, quant=m.quant,
        lora=self.lora, name=name)
    norm = lambda name, axis: layers.Norm(m.norm, m.norm_eps, axis=axis, name=name,
                                          dtype=self.dtype, param_dtype=self.param_dtype)
    index = None
    if a.q_lora_rank:
      # the down-projections' latent dim unsplit: their embed dim takes fsdp
      latent_q = norm('query_norm', 'q_lora')(
          dense('query_down', a.q_lora_rank, ('embed', None))(x_BLD))
      q_BLHK = dense('query_up', (H, N + R), ('q_lora', 'heads', 'head_dim'))(latent_q)
      if a.index_heads:
        index = indexer_lib.Indexer(m, self.rope_scaling, self.dtype, self.param_dtype,
                                    name='indexer')(x_BLD, latent_q, q_positions_BL)
    else:
      q_BLHK = dense('query', (H, N + R), ('embed', 'heads', 'head_dim'))(x_BLD)
    down_BLE = dense('kv_down', C + R, ('embed', None))(x_BLD)
    c_BLC = norm('kv_norm', 'kv_lora')(down_BLE[..., :C])
    k_rope_BL1R = rope.apply(down_BLE[..., None, C:], q_positions_BL, m.rope_theta,
                             self.rope_scaling)
    q_nope_BLHN = q_BLHK[..., :N]
    q_rope_BLHR = rope.apply(q_BLHK[..., N:], q_positions_BL, m.rope_theta, self.rope_scaling)
    up = lambda name, features: self.param(name, nn.with_logical_partitioning(
        nn.initializers.normal(m.kernel_init_std) if m.kernel_init_std else
        nn.initializers.variance_scaling(1.0, 'fan_in', 'truncated_normal', in_axis=0,
                                         out_axis=(1, 2)), ('kv_lora', 'heads', 'head_dim')),
        (C, H, features), self.param_dtype).astype(self.dtype)
    key_up_CHN, value_up_CHV = up('key_up', N), up('value_up', V)
    scale = softmax_scale(m)
    if mask.kv_cache:
      out_BLHV = self._decode(q_nope_BLHN, q_rope_BLHR, c_BLC, k_rope_BL1R[:, :, 0], mask,
                              key_up_CHN, value_up_CHV, scale, index)
    elif index:
      out_BLHV = self._sparse(q_nope_BLHN, q_rope_BLHR, c_BLC, k_rope_BL1R[:, :, 0], mask,
                              key_up_CHN, value_up_CHV, scale, index)
    else:
      out_BLHV = self._attend(q_nope_BLHN, q_rope_BLHR, c_BLC, k_rope_BL1R, mask, key_up_CHN,
                              value_up_CHV, scale)
    out_BLHV = nn.with_logical_constraint(out_BLHV, ('batch', 'length', 'heads', 'head_dim'))
    return dense('out', x_BLD.shape[-1], ('heads', 'head_dim', 'embed'), num_in=2,
                 scale=self.out_init_scale)(out_BLHV)

  def _attend(self, q_nope_BLHN, q_rope_BLHR, c_BLC, k_rope_BL1R, mask, key_up_CHN,
              value_up_CHV, scale):
    """Training and prefill without a cache: the heads expanded, the zoo's kernels."""
    m = self.config
    H, V = q_nope_BLHN.shape[2], value_up_CHV.shape[-1]
    k_nope_BLHN = jnp.einsum('BLC,CHN->BLHN', c_BLC, key_up_CHN)
    v_BLHV = jnp.einsum('BLC,CHV->BLHV', c_BLC, value_up_CHV)
    k_rope_BLHR = jnp.broadcast_to(k_rope_BL1R, (*k_rope_BL1R.shape[:2], H,
                                                 k_rope_BL1R.shape[-1]))
    q_BLHK = jnp.concatenate([q_nope_BLHN, q_rope_BLHR.astype(q_nope_BLHN.dtype)], -1)
    k_BLHK = jnp.concatenate([k_nope_BLHN, k_rope_BLHR.astype(k_nope_BLHN.dtype)], -1)
    q_BLHK = nn.with_logical_constraint(q_BLHK, ('batch', 'length', 'heads', 'head_dim'))
    K = q_BLHK.shape[-1]
    if m.attention.log_max_logit:
      attention.sow_max_logits(self, q_BLHK, k_BLHK, mask, scale)
    # the kernels take one head dim: values zero-padded to it, the output cut back
    v_BLHK = jnp.pad(v_BLHV, ((0, 0), (0, 0), (0, 0), (0, K - V)))
    out = kernels.attention(q_BLHK, k_BLHK, v_BLHK, mask, scale=scale,
                            kernel=m.attention.kernel,
                            block_sizes=(m.attention.block_q, m.attention.block_kv))
    return out[..., :V]

  def _sparse(self, q_nope_BLHN, q_rope_BLHR, c_BLC, k_rope_BLR, mask, key_up_CHN,
              value_up_CHV, scale, index):
    """DeepSeek Sparse Attention (zoo/kernels/sparse.py) in the absorbed form; the
    indexer's KL summed over the real queries, and their count, sown in 'indexer'."""
    a = self.config.mla
    index_q_BLIJ, index_k_BLJ, weights_BLI = index
    q_latent_BLHC = jnp.einsum('BLHN,CHN->BLHC', q_nope_BLHN, key_up_CHN,
                               preferred_element_type=jnp.float32)
    out_BLHC, _, kl = sparse.attention(
        (q_latent_BLHC, q_rope_BLHR), (c_BLC, k_rope_BLR), (index_q_BLIJ, index_k_BLJ,
                                                              weights_BLI),
        mask, a.index_top_k, a.index_block, scale, dense=a.index_stage == 'warmup')
    self.sow('indexer', 'kl', kl)
    self.sow('indexer', 'queries', jnp.sum(mask.q_segment_ids > 0).astype(jnp.float32))
    out_BLHV = jnp.einsum('BLHC,CHV->BLHV', out_BLHC, value_up_CHV.astype(jnp.float32))
    return out_BLHV.astype(self.dtype)

  def _decode(self, q_nope_BLHN, q_rope_BLHR, c_BLC, k_rope_BLR, mask, key_up_CHN,
              value_up_CHV, scale, index=None):
    """The latent cache (contiguous, or serving's pages): the new latents and rotary keys
    (and the indexer's keys) written, then attention over all S slots with the
    up-projections absorbed, only to the keys the indexer keeps where it has one."""
    news = {'latent': c_BLC, 'rope_key': k_rope_BLR}
    if index:
      news['index_key'] = index[1]
    if mask.pages is not None:  # serving: the latents in a pool of pages
      cached = {name: self._paged(name, new, mask) for name, new in news.items()}
      visible_B1LS = mask.dense()
    else:
      cached, visible_B1LS = self._cached(news, mask)
    latent_BSC, rope_key_BSR = cached['latent'], cached['rope_key']
    if index:
      scores_BLS = sparse.index_scores(index[0], cached['index_key'], index[2])
      keys_BLT, kept_BLT = sparse.select(scores_BLS, visible_B1LS[:, 0],
                                         self.config.mla.index_top_k)
      chosen_BLS = jax.vmap(jax.vmap(lambda keys_T, kept_T, row_S: row_S.at[keys_T].set(
          kept_T)))(keys_BLT, kept_BLT, jnp.zeros_like(visible_B1LS[:, 0]))
      visible_B1LS = visible_B1LS & chosen_BLS[:, None]
    f32 = jnp.float32
    q_latent_BLHC = jnp.einsum('BLHN,CHN->BLHC', q_nope_BLHN, key_up_CHN,
                               preferred_element_type=f32)
    logits_BHLS = (jnp.einsum('BLHC,BSC->BHLS', q_latent_BLHC, latent_BSC.astype(f32)) +
                   jnp.einsum('BLHR,BSR->BHLS', q_rope_BLHR.astype(f32),
                              rope_key_BSR.astype(f32))) * scale
    logits_BHLS = jnp.where(visible_B1LS, logits_BHLS, reference.MASKED)
    probs_BHLS = jax.nn.softmax(logits_BHLS, axis=-1)
    out_BLHC = jnp.einsum('BHLS,BSC->BLHC', probs_BHLS, latent_BSC.astype(f32))
    return jnp.einsum('BLHC,CHV->BLHV', out_BLHC, value_up_CHV.astype(f32)).astype(self.dtype)

  def _paged(self, name, new, mask):
    """Serving: `new` [B, L, width] into the pool `paged_<name>` [pages x page size, width]
    at its tokens' slots (zoo/kernels/paged.py) -> [B, S, width] over each row's pages."""
    pages = mask.pages
    pool = self.variable('cache', f'paged_{name}', jnp.zeros,
                         (pages.count * pages.size, new.shape[-1]), new.dtype)
    slots_BL = paged_lib.token_slots(pages, mask.q_segment_ids > 0)
    pool.value = pool.value.at[slots_BL].set(new.astype(pool.value.dtype))
    return pool.value[paged_lib.row_slots(pages.table, pages.size)]

  def _cached(self, news, mask):
    """Each new [B, L, width] (the latents, rotary keys, the indexer's keys) written at the
    cache index -> ({name: all S cached}, the mask with the queries at their slots)."""
    B, L, _ = news['latent'].shape
    S = mask.kv_segment_ids.shape[1]
    index = self.variable('cache', 'cache_index', jnp.zeros, (), jnp.int32)
    start = index.value
    cached = {}
    for name, new in news.items():
      cache = self.variable('cache', f'cached_{name}', jnp.zeros, (B, S, new.shape[-1]),
                            news['latent'].dtype)
      cache.value = nn.with_logical_constraint(
          jax.lax.dynamic_update_slice(cache.value, new.astype(cache.value.dtype),
                                       (0, start, 0)), ('batch', 'length', None))
      cached[name] = cache.value
    index.value = start + L
    return cached, mask.replace(q_start=start).dense()


def cache_values_per_token(m):
  """Values a token adds to one layer's cache: the latent and the rotary key (and the
  indexer's key, DeepSeek Sparse Attention's)."""
  a = m.mla
  return a.kv_lora_rank + a.qk_rope_head_dim + (a.index_head_dim if a.index_heads else 0)

