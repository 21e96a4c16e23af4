"""Splash attention (JAX's Pallas TPU kernel: block-sparse flash attention that skips fully
masked blocks), for every mask the zoo uses, sharded with shard_map.

Masks: causal (CausalMask), bidirectional (FullMask), causal sliding window
(LocalMask, window - 1 keys back), two-sided window (LocalMask, window keys each way), each
with segment ids for packing and padding. Padding
queries (segment 0) attend other padding keys here while the reference masks them
entirely; no real token ever sees padding either way, and padding carries no loss.
GQA/MQA: the MQA kernel per kv head over its N query heads; MHA: the MHA kernel.
The softmax scale is applied to q before the kernel (splash takes unscaled logits).
Attention sinks (gpt-oss: a logit per head in every row's normalizer) are splash's own
`sinks` argument, forward and backward, split over `tensor` with their heads.
On CPU the kernel runs in Pallas interpret mode (slow, exact: for tests). On TPU with
bfloat16 it needs the default matmul precision: Mosaic rejects bfloat16 operands when
jax_default_matmul_precision is 'highest' ("Bad lhs type").

Glossary: B batch, L query length, S key length, H heads, G kv heads, Q = H // G query
heads per kv head, K head dim.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash

from zoo.kernels import shard

DEFAULT_BLOCK = 512
LANES = 128  # blocks (and so lengths) are multiples of this


def supports(length, kv_length):
  return length % LANES == 0 and kv_length % LANES == 0


def block_sizes(length, kv_length, block_q=0, block_kv=0):
  """(block_q, block_kv) with 0 = min(512, length); multiples of 128 dividing the lengths."""
  block_q = block_q or min(DEFAULT_BLOCK, length)
  block_kv = block_kv or min(DEFAULT_BLOCK, kv_length)
  if length % block_q or kv_length % block_kv or block_q % LANES or block_kv % LANES:
    raise ValueError(f'model.attention.block_q={block_q} / block_kv={block_kv} must be '
                     f'multiples of {LANES} dividing the query length {length} and key length '
                     f'{kv_length}; pad data.seq_len to a multiple of {LANES} or use 0 '
                     '(min(512, length))')
  return block_q, block_kv


def _base_mask(length, kv_length, causal, window):
  if window and causal:
    return splash.LocalMask((length, kv_length), window_size=(window - 1, 0), offset=0)
  if window:  # a bidirectional stack's window: |q - k| <= window
    return splash.LocalMask((length, kv_length), window_size=(window, window), offset=0)
  if causal:
    return splash.CausalMask((length, kv_length))
  return splash.FullMask((length, kv_length))


def _local(q_BLHK, k_BSGK, v_BSGK, q_segment_BL, kv_segment_BS, *sinks, causal, window, scale,
           blocks, interpret, softcap=0.0):
  """One shard: [B, L, H, K] queries against [B, S, G, K] keys/values (and the shard's
  sinks [H], if any)."""
  sinks_H = sinks[0].astype(jnp.float32) if sinks else None
  B, L, H, K = q_BLHK.shape
  S, G = k_BSGK.shape[1], k_BSGK.shape[2]
  N = H // G
  block_q, block_kv = block_sizes(L, S, *blocks)
  sizes = splash.BlockSizes(
      block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv, block_q_dkv=block_q,
      block_kv_dkv=block_kv, block_kv_dkv_compute=block_kv, block_q_dq=block_q,
      block_kv_dq=block_kv)
  base = _base_mask(L, S, causal, window)
  q_BHLK = (q_BLHK * jnp.asarray(scale, q_BLHK.dtype)).transpose(0, 2, 1, 3)
  k_BGSK, v_BGSK = k_BSGK.transpose(0, 2, 1, 3), v_BSGK.transpose(0, 2, 1, 3)
  segments = lambda q_seg, kv_seg: splash.SegmentIds(q=q_seg, kv=kv_seg)
  if N == 1:  # MHA
    kernel = splash.make_splash_mha(splash.MultiHeadMask([base] * H), block_sizes=sizes,
                                    head_shards=1, q_seq_shards=1, interpret=interpret,
                                    attn_logits_soft_cap=softcap or None)
    out_BHLK = jax.vmap(lambda q, k, v, qs, ks: kernel(q, k, v, segment_ids=segments(qs, ks),
                                                       sinks=sinks_H))(
        q_BHLK, k_BGSK, v_BGSK, q_segment_BL, kv_segment_BS)
  else:  # GQA / MQA: each kv head serves its N query heads
    kernel = splash.make_splash_mqa(splash.MultiHeadMask([base] * N), block_sizes=sizes,
                                    head_shards=1, q_seq_shards=1, interpret=interpret,
                                    attn_logits_soft_cap=softcap or None)
    per_group = lambda q, k, v, seg, sinks_Q: kernel(q, k, v, segment_ids=seg, sinks=sinks_Q)
    sinks_GQ = None if sinks_H is None else sinks_H.reshape(G, N)
    per_batch = lambda q, k, v, qs, ks: jax.vmap(per_group, in_axes=(0, 0, 0, None, 0))(
        q.reshape(G, N, L, K), k, v, segments(qs, ks), sinks_GQ).reshape(H, L, K)
    out_BHLK = jax.vmap(per_batch)(q_BHLK, k_BGSK, v_BGSK, q_segment_BL, kv_segment_BS)
  return out_BHLK.transpose(0, 2, 1, 3).astype(q_BLHK.dtype)


def attention(q_BLHK, k_BSGK, v_BSGK, mask, scale, blocks=(0, 0), interpret=False,
              softcap=0.0, sinks=None):
  """Splash attention with `mask` (zoo.kernels.mask.Mask), logits soft-capped at `softcap`
  (0 = none), sinks [H] or None; batch split over the batch mesh axes and heads over
  `tensor` under shard_map when a mesh is set."""
  fn = functools.partial(_local, causal=mask.causal, window=mask.window, scale=scale,
                         blocks=tuple(blocks), interpret=interpret, softcap=softcap)
  return shard.over_mesh(fn, q_BLHK, k_BSGK, v_BSGK, rows=(
      mask.q_segment_ids.astype(jnp.int32), mask.kv_segment_ids.astype(jnp.int32)),
      head_params=() if sinks is None else (sinks,))
