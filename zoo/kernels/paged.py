"""Attention over serving's paged KV cache (zoo/serve; the pages described by a
mask.Pages).

A layer's keys and values share one pool [N pages, page size, 2G, K], a key head g at 2g
and its value head at 2g + 1: the layout of JAX's Pallas TPU kernel
`ragged_paged_attention`, which reads the pages in place. The kernels:
- 'xla' (every platform): each row's pages gathered ([B, S = table width x page size]) and
  attended by the reference kernel under the mask's dense form, so every mask and option
  the models have works (windows, chunks, sinks, position biases);
- 'pallas' (TPU): the ragged kernel over the rows' real tokens packed end to end. It masks
  causally, with a sliding window and a soft cap, and nothing else. The engine chooses
  it only on TPU and for models that need nothing more (`pallas_refusal`). JAX 0.10.2's
  interpreters cannot run it on a CPU (docs/contracts.md, Known problems): the tests run
  the packing around JAX's reference of the kernel and compile the kernel for a TPU chip
  through libtpu.

Glossary: B rows, L tokens a row, S keys a row, H heads, G kv heads, K head dim, N pages,
T page size, C combined kv heads 2G, P page-table width, X packed tokens B x L.
"""

import jax
import jax.numpy as jnp

from zoo.kernels import reference


def token_slots(pages, valid_BL):
  """Each fed token's slot in a flat pool of N x T slots (a padding token's in page 0,
  which no sequence holds)."""
  T = pages.size
  positions_BL = pages.positions
  page_BL = jnp.take_along_axis(pages.table, positions_BL // T, axis=1)
  L = valid_BL.shape[1]
  return jnp.where(valid_BL, page_BL * T + positions_BL % T, jnp.arange(L)[None] % T)


def row_slots(table_BP, T):
  """[B, S]: each row's slots in a flat pool, its pages in order."""
  return (table_BP[:, :, None] * T + jnp.arange(T)[None, None]).reshape(table_BP.shape[0], -1)


def write(pool_NTCK, k_BLGK, v_BLGK, pages, valid_BL):
  """The new keys and values into the pool at their tokens' slots."""
  N, T, C, K = pool_NTCK.shape
  pairs_BLG2K = jnp.stack([k_BLGK, v_BLGK], axis=3).astype(pool_NTCK.dtype)
  flat = pool_NTCK.reshape(N * T, C // 2, 2, K).at[token_slots(pages, valid_BL)].set(
      pairs_BLG2K)
  return flat.reshape(N, T, C, K)


def gather(pool_NTCK, table_BP):
  """-> (keys, values) [B, S, G, K] of each row's pages, in order."""
  N, T, C, K = pool_NTCK.shape
  pairs_BSG2K = pool_NTCK.reshape(N * T, C // 2, 2, K)[row_slots(table_BP, T)]
  return pairs_BSG2K[:, :, :, 0], pairs_BSG2K[:, :, :, 1]


def attention(q_BLHK, pool_NTCK, mask, scale, softcap=0.0, sinks=None, bias=None,
              kernel='xla'):
  """q_BLHK against each row's pages (mask: a mask.Mask with `pages`) -> [B, L, H, K]."""
  if kernel == 'pallas':
    from jax.experimental.pallas.ops.tpu import (  # pylint: disable=g-import-not-at-top
        ragged_paged_attention as rpa)
    with jax.default_matmul_precision('default'):  # Mosaic refuses bf16 at 'highest'
      return ragged(rpa.ragged_paged_attention, q_BLHK, pool_NTCK, mask, scale, softcap)
  k_BSGK, v_BSGK = gather(pool_NTCK, mask.pages.table)
  return reference.dot_product_attention(q_BLHK, k_BSGK.astype(q_BLHK.dtype),
                                         v_BSGK.astype(q_BLHK.dtype), mask.dense(),
                                         bias=bias, scale=scale, softcap=softcap, sinks=sinks)


def pallas_refusal(m):
  """Why the Pallas kernel cannot serve model config m ('' when it can)."""
  a = m.attention
  reasons = [(a.sinks, 'attention sinks'), (a.chunk, 'chunked layers'),
             (m.position in ('alibi', 't5_bias'), f'the {m.position} position bias'),
             (m.mla.kv_lora_rank, "MLA's latent cache")]
  return ', '.join(why for bad, why in reasons if bad)


def ragged(kernel, q_BLHK, pool_NTCK, mask, scale, softcap):
  """`kernel` (JAX's ragged_paged_attention, or its reference in tests) over the rows' real
  tokens (each row's first ones) packed end to end, then put back in their rows (padding's
  outputs are zeros)."""
  B, L, H, K = q_BLHK.shape
  valid_BL = mask.q_segment_ids > 0
  counts_B = jnp.sum(valid_BL, axis=1).astype(jnp.int32)
  starts_B1 = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(counts_B)])
  x_X = jnp.arange(B * L, dtype=jnp.int32)
  row_X = jnp.clip(jnp.searchsorted(starts_B1, x_X, side='right') - 1, 0, B - 1)
  q_XHK = q_BLHK[row_X, jnp.clip(x_X - starts_B1[row_X], 0, L - 1)]
  ends_B = jnp.sum(mask.kv_segment_ids > 0, axis=1).astype(jnp.int32)
  window = mask.window or None
  table_BP = mask.pages.table.astype(jnp.int32)
  T = pool_NTCK.shape[1]
  # blocks given, not looked up by the TPU version (which AOT compiles and interpret mode
  # lack): about 128 keys and 32 queries a block
  out_XHK = kernel(
      q_XHK, pool_NTCK.astype(q_BLHK.dtype), ends_B, table_BP, starts_B1,
      jnp.asarray([B], jnp.int32), sm_scale=scale, sliding_window=window,
      soft_cap=softcap or None,
      num_kv_pages_per_block=max(1, min(table_BP.shape[1], 128 // T)),
      num_queries_per_block=min(32, B * L))
  packed_BL = jnp.clip(starts_B1[:-1, None] + jnp.arange(L)[None], 0, B * L - 1)
  return jnp.where(valid_BL[:, :, None, None], out_XHK[packed_BL], 0).astype(q_BLHK.dtype)

