"""The reference attention on CPUs under a causal mask, in query blocks that skip the keys
the mask hides: block i of n holds queries i L/n .. (i+1) L/n - 1 and attends keys
0 .. (i+1) L/n - 1 only, so the logits, softmax and both matmuls cover (n + 1) / 2n of the
[L, L] square (5/8 at n = 4), forward and backward. The same result as the whole square,
where a hidden key's probability is exactly 0 (up to the order of float sums). A padding
query (segment 0) may attend no key; the whole square gives it the mean of all L values,
and so do the blocks, so padding tokens' states (which an MoE layer routes) do not change
either. With attention sinks the whole square gives a padding query 0 (the sink takes its
probability), and so do the blocks.

At the bench's shape (2 CPU cores, L = 128) the train step takes 3-5% less time with 4
blocks and none less with 8 (blocks of 16 queries run the matmuls too slowly); at L = 512,
16% less with 4 or 8. kernels.attention runs it on CPUs only: on TPUs and GPUs splash and
cuDNN skip hidden blocks themselves, and plan mode's compiled FLOPs keep the whole square
the analytic count is checked against.

Glossary: B batch, L length (queries and keys are the same tokens), H heads, G kv heads,
K head dim.
"""

import jax.numpy as jnp

from zoo.kernels import reference

BLOCKS = 4  # query blocks
MIN_BLOCK = 32  # queries per block at least; shorter sequences run the whole square


def supports(mask, q_length, kv_length):
  """Whether `mask` (a mask.Mask) lets the blocks run: causal, queries and keys the same
  in-order tokens (not a cache, not ring attention's layout), a length they divide."""
  return (mask.causal and not mask.kv_cache and mask.slots is None and
          isinstance(mask.q_start, int) and mask.q_start == 0 and q_length == kv_length and
          q_length % BLOCKS == 0 and q_length // BLOCKS >= MIN_BLOCK)


def attention(q_BLHK, k_BLGK, v_BLGK, mask, bias=None, scale=None, softcap=0.0, sinks=None):
  """reference.dot_product_attention(q, k, v, mask.dense(), bias, scale, softcap, sinks) for a
  mask that `supports` takes; bias None or an array broadcastable to [B, H, L, L]."""
  L = q_BLHK.shape[1]
  C = L // BLOCKS
  dense = mask.dense()
  outs = []
  for i in range(BLOCKS):
    rows, keys = slice(i * C, (i + 1) * C), slice(0, (i + 1) * C)
    block_bias = None if bias is None else _block(bias, rows, keys)
    outs.append(reference.dot_product_attention(
        q_BLHK[:, rows], k_BLGK[:, keys], v_BLGK[:, keys], _block(dense, rows, keys),
        block_bias, scale, softcap, sinks))
  out_BLHK = jnp.concatenate(outs, axis=1)
  H, G = q_BLHK.shape[2], k_BLGK.shape[2]
  mean_BHK = jnp.repeat(jnp.mean(v_BLGK, axis=1), H // G, axis=1)
  if sinks is not None:
    mean_BHK = jnp.zeros_like(mean_BHK)
  padding_BL11 = (mask.q_segment_ids == 0)[:, :, None, None]
  return jnp.where(padding_BL11, mean_BHK[:, None].astype(out_BLHK.dtype), out_BLHK)


def _block(x, rows, keys):
  """x [..., L or 1, L or 1] -> its [rows, keys] block (broadcast dims kept)."""
  return x[..., rows if x.shape[-2] > 1 else slice(None),
           keys if x.shape[-1] > 1 else slice(None)]
