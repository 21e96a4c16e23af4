"""Flash attention with an additive position bias computed inside each block (Pallas TPU;
interpret mode on CPU): T5's bucketed relative position bias and ALiBi, never materialised.

Blockwise with an online softmax (forward), and two backward kernels: dq (one query block
against every key block; it also sums T5's bias gradient into the [buckets, H] table) and
dk/dv (one key block against every query block of the query heads sharing it: GQA/MQA).
Each block's bias comes from the query and key positions (zoo.kernels.bias.PositionBias):
the bucket of key - query position looked up in the table (held in SMEM), or -slope *
|distance|. The lookup is a select per bucket over the block, looping only over the buckets
among the block's visible pairs: far from the diagonal (beyond max_distance) that is one,
near it all of them.
Masks as the reference: segment ids (0 = padding, packed documents never see each other),
causal, a causal sliding window; key blocks a query block cannot see are skipped (and not
fetched). Masked logits take the reference's finite MASKED value and pass no gradient, so
real rows equal the reference; padding rows (no key visible) may differ and carry no loss.

Layout inside the kernels: q [B, H, L, K], k/v [B, G, S, K]; per-row ids and positions are
given both as columns [B, L, 128] and as rows [B, 8, L] so each block reads the one it
broadcasts without a relayout (the dk/dv kernel works on transposed [keys, queries] blocks).

Glossary: B batch, L query length, S key length, H heads, G kv heads, K head dim.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from zoo.kernels import bias as bias_lib
from zoo.kernels import reference
from zoo.kernels import shard
from zoo.kernels import splash

DEFAULT_BLOCK, LANES = splash.DEFAULT_BLOCK, splash.LANES  # the same blocks as splash
SUBLANES = 8
NT = (((1,), (1,)), ((), ()))  # a @ b.T
_f32 = jnp.float32


def block_sizes(length, kv_length, block_q=0, block_kv=0):
  """(block_q, block_kv); 0 = 512; at most the length (T5's decoder is shorter than its
  encoder). Each divides its length and is a multiple of 128 or the whole length."""
  block_q = min(block_q or DEFAULT_BLOCK, length)
  block_kv = min(block_kv or DEFAULT_BLOCK, kv_length)
  fits = lambda b, n: n % b == 0 and (b % LANES == 0 or b == n)
  if not (fits(block_q, length) and fits(block_kv, kv_length)):
    raise ValueError(f'model.attention.block_q={block_q} / block_kv={block_kv} must divide '
                     f'the query length {length} and key length {kv_length} and be multiples '
                     f'of {LANES} (or the whole length); set them so (0 = 512), or data.seq_len '
                     'to a multiple of the block')
  return block_q, block_kv


def supports(length, kv_length):
  try:
    block_sizes(length, kv_length)
  except ValueError:
    return False
  return True


@dataclasses.dataclass(frozen=True)
class _Spec:
  """What a call computes, fixed at trace time."""
  kind: str  # 't5' | 'alibi'
  bidirectional: bool
  num_buckets: int
  max_distance: int
  causal: bool
  window: int
  scale: float
  block_q: int
  block_kv: int
  length: int
  kv_length: int
  heads_per_group: int

  @property
  def q_blocks(self):
    return self.length // self.block_q

  @property
  def kv_blocks(self):
    return self.kv_length // self.block_kv


def _kv_range(spec, i):
  """First and last key block query block i can see."""
  bq, bk = spec.block_q, spec.block_kv
  first, last = 0, spec.kv_blocks - 1
  if spec.causal:
    last = jnp.minimum(last, (i * bq + bq - 1) // bk)
  if spec.window:
    first = jnp.maximum(0, (i * bq - spec.window + 1) // bk)
  return first, last


def _q_range(spec, j):
  """First and last query block that can see key block j."""
  bq, bk = spec.block_q, spec.block_kv
  first, last = 0, spec.q_blocks - 1
  if spec.causal:
    first = (j * bk) // bq
  if spec.window:
    last = jnp.minimum(last, (j * bk + bk + spec.window - 2) // bq)
  return first, last


def _visible(first, last, index):
  return (index >= first) & (index <= last)


def _clamp(first, last, index):
  """A skipped block's index maps to a visible one: the pipeline does not fetch it."""
  return jnp.minimum(jnp.maximum(index, first), last)


def _bucket_range(buckets, mask):
  """The smallest and largest bucket among the block's visible pairs (first > last when none
  is visible): far from the diagonal a block's pairs share one bucket."""
  first = jnp.min(jnp.where(mask, buckets, jnp.iinfo(jnp.int32).max))
  last = jnp.max(jnp.where(mask, buckets, -1))
  return first, last


def _biased_logits(spec, qk, h, q_offset, kv_offset, q_ids, kv_ids, q_pos, kv_pos, param_ref,
                   transposed):
  """qk [rows, cols] float32 (queries x keys, or keys x queries when transposed); ids and
  positions broadcastable to it -> (masked logits with the bias, the mask, T5's bucket ids
  or None)."""
  q_axis, kv_axis = (1, 0) if transposed else (0, 1)
  s = qk * spec.scale if spec.scale != 1.0 else qk
  mask = (q_ids == kv_ids) & (kv_ids > 0)
  if spec.causal or spec.window:
    q_index = jax.lax.broadcasted_iota(jnp.int32, qk.shape, q_axis) + q_offset
    kv_index = jax.lax.broadcasted_iota(jnp.int32, qk.shape, kv_axis) + kv_offset
    if spec.causal:
      mask &= kv_index <= q_index
    if spec.window:
      mask &= kv_index > q_index - spec.window
  relative = kv_pos - q_pos
  buckets = None
  if spec.kind == 'alibi':
    s += bias_lib.alibi(param_ref[h], relative)
  else:  # the table looked up bucket by bucket, over the buckets the block holds
    buckets = bias_lib.relative_position_bucket(relative, spec.bidirectional, spec.num_buckets,
                                                spec.max_distance)
    first, last = _bucket_range(buckets, mask)
    s += jax.lax.fori_loop(
        first, last + 1, lambda b, table: jnp.where(buckets == b, param_ref[h, b], table),
        jnp.zeros(s.shape, _f32))
  return jnp.where(mask, s, reference.MASKED), mask, buckets


# ------------------------------------------------------------------------------ forward

def _forward_kernel(q_ref, k_ref, v_ref, q_ids_ref, kv_ids_ref, q_pos_ref, kv_pos_ref,
                    param_ref, o_ref, lse_ref, m_scratch, l_scratch, acc_scratch, *, spec):
  h, i, j = pl.program_id(1), pl.program_id(2), pl.program_id(3)

  @pl.when(j == 0)
  def _start():
    m_scratch[...] = jnp.full(m_scratch.shape, -jnp.inf, _f32)
    l_scratch[...] = jnp.zeros(l_scratch.shape, _f32)
    acc_scratch[...] = jnp.zeros(acc_scratch.shape, _f32)

  @pl.when(_visible(*_kv_range(spec, i), j))
  def _step():
    qk = jax.lax.dot_general(q_ref[...], k_ref[...], NT, preferred_element_type=_f32)
    s, _, _ = _biased_logits(spec, qk, h, i * spec.block_q, j * spec.block_kv,
                             q_ids_ref[:, :1], kv_ids_ref[:1, :], q_pos_ref[:, :1],
                             kv_pos_ref[:1, :], param_ref, transposed=False)
    m_prev = m_scratch[...]
    m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
    p = jnp.exp(s - m_next[:, :1])
    alpha = jnp.exp(m_prev - m_next)
    l_scratch[...] = alpha * l_scratch[...] + jnp.sum(p, axis=1, keepdims=True)
    m_scratch[...] = m_next
    v = v_ref[...]
    acc_scratch[...] = acc_scratch[...] * alpha[:, :1] + jnp.dot(
        p.astype(v.dtype), v, preferred_element_type=_f32)

  @pl.when(j == spec.kv_blocks - 1)
  def _finish():
    l = l_scratch[...]
    o_ref[...] = (acc_scratch[...] / l[:, :1]).astype(o_ref.dtype)
    lse_ref[...] = m_scratch[...] + jnp.log(l)


def _q_spec(spec, K):
  return pl.BlockSpec((None, None, spec.block_q, K), lambda b, h, i, j: (b, h, i, 0))


def _kv_spec_by_q(spec, K):
  """Keys/values for query head h's block i at step j (clamped to the visible blocks)."""
  def index(b, h, i, j):
    return b, h // spec.heads_per_group, _clamp(*_kv_range(spec, i), j), 0
  return pl.BlockSpec((None, None, spec.block_kv, K), index)


def _ids_specs_by_q(spec):
  """Query ids/positions as columns, key ids/positions as rows, for grid (b, h, i, j)."""
  column = pl.BlockSpec((None, spec.block_q, LANES), lambda b, h, i, j: (b, i, 0))
  row = pl.BlockSpec((None, SUBLANES, spec.block_kv),
                     lambda b, h, i, j: (b, 0, _clamp(*_kv_range(spec, i), j)))
  return column, row, column, row


def _smem():
  return pl.BlockSpec(memory_space=pltpu.SMEM)


def _forward(spec, interpret, q, k, v, params, rows):
  B, H, L, K = q.shape
  out_shape = (jax.ShapeDtypeStruct(q.shape, q.dtype),
               jax.ShapeDtypeStruct((B, H, L, LANES), _f32))
  o_spec = _q_spec(spec, K)
  lse_spec = _q_spec(spec, LANES)
  o, lse = pl.pallas_call(
      functools.partial(_forward_kernel, spec=spec),
      name='flash_bias_fwd',
      grid=(B, H, spec.q_blocks, spec.kv_blocks),
      in_specs=[_q_spec(spec, K), _kv_spec_by_q(spec, K), _kv_spec_by_q(spec, K),
                *_ids_specs_by_q(spec), _smem()],
      out_specs=[o_spec, lse_spec], out_shape=out_shape,
      scratch_shapes=[pltpu.VMEM((spec.block_q, LANES), _f32),
                      pltpu.VMEM((spec.block_q, LANES), _f32),
                      pltpu.VMEM((spec.block_q, K), _f32)],
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=('parallel', 'parallel', 'parallel', 'arbitrary')),
      interpret=interpret,
  )(q, k, v, rows['q_ids_col'], rows['kv_ids_row'], rows['q_pos_col'], rows['kv_pos_row'],
    params)
  return o, lse[..., 0]


# ------------------------------------------------------------------------------ backward

def _fold_lanes(row):
  """[1, columns] -> [1, min(columns, 128)]: sums of 128-lane slices."""
  width = min(row.shape[1], LANES)
  total = row[:, :width]
  for c in range(width, row.shape[1], width):
    total += row[:, c:c + width]
  return total


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref, kv_ids_ref, q_pos_ref,
               kv_pos_ref, param_ref, dq_ref, *rest, spec):
  dtable_ref, dq_scratch = rest if spec.kind == 't5' else (None, *rest)
  h, i, j = pl.program_id(1), pl.program_id(2), pl.program_id(3)

  @pl.when(j == 0)
  def _start():
    dq_scratch[...] = jnp.zeros(dq_scratch.shape, _f32)

  if dtable_ref is not None:
    @pl.when((i == 0) & (j == 0))
    def _start_table():
      dtable_ref[...] = jnp.zeros(dtable_ref.shape, _f32)

  @pl.when(_visible(*_kv_range(spec, i), j))
  def _step():
    k, v = k_ref[...], v_ref[...]
    qk = jax.lax.dot_general(q_ref[...], k, NT, preferred_element_type=_f32)
    s, mask, buckets = _biased_logits(spec, qk, h, i * spec.block_q, j * spec.block_kv,
                                      q_ids_ref[:, :1], kv_ids_ref[:1, :], q_pos_ref[:, :1],
                                      kv_pos_ref[:1, :], param_ref, transposed=False)
    p = jnp.exp(s - jnp.expand_dims(lse_ref[0], -1))
    dp = jax.lax.dot_general(do_ref[...].astype(v.dtype), v, NT, preferred_element_type=_f32)
    ds = jnp.where(mask, p * (dp - jnp.expand_dims(di_ref[0], -1)), 0.0)
    dq_scratch[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=_f32)
    if dtable_ref is not None:  # d table[b] = sum of ds over the block's pairs in bucket b
      def add(b, carry):
        in_bucket = jnp.sum(jnp.where(buckets == b, ds, 0.0), axis=0, keepdims=True)
        dtable_ref[pl.ds(b, 1), :] += _fold_lanes(in_bucket)
        return carry
      first, last = _bucket_range(buckets, mask)
      jax.lax.fori_loop(first, last + 1, add, 0)

  @pl.when(j == spec.kv_blocks - 1)
  def _finish():
    dq_ref[...] = (dq_scratch[...] * spec.scale).astype(dq_ref.dtype)


def _dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, di_ref, q_ids_ref, kv_ids_ref, q_pos_ref,
                kv_pos_ref, param_ref, dk_ref, dv_ref, dk_scratch, dv_scratch, *, spec):
  g, j, n, i = (pl.program_id(a) for a in (1, 2, 3, 4))
  h = g * spec.heads_per_group + n

  @pl.when((n == 0) & (i == 0))
  def _start():
    dk_scratch[...] = jnp.zeros(dk_scratch.shape, _f32)
    dv_scratch[...] = jnp.zeros(dv_scratch.shape, _f32)

  @pl.when(_visible(*_q_range(spec, j), i))
  def _step():
    q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
    kq = jax.lax.dot_general(k, q, NT, preferred_element_type=_f32)  # [keys, queries]
    s, mask, _ = _biased_logits(spec, kq, h, i * spec.block_q, j * spec.block_kv,
                                q_ids_ref[:1, :], kv_ids_ref[:, :1], q_pos_ref[:1, :],
                                kv_pos_ref[:, :1], param_ref, transposed=True)
    p = jnp.exp(s - lse_ref[...])
    dv_scratch[...] += jnp.dot(p.astype(do.dtype), do, preferred_element_type=_f32)
    dp = jax.lax.dot_general(v, do.astype(v.dtype), NT, preferred_element_type=_f32)
    ds = jnp.where(mask, p * (dp - di_ref[...]), 0.0)
    dk_scratch[...] += jnp.dot(ds.astype(q.dtype), q, preferred_element_type=_f32)

  @pl.when((n == spec.heads_per_group - 1) & (i == spec.q_blocks - 1))
  def _finish():
    dk_ref[...] = (dk_scratch[...] * spec.scale).astype(dk_ref.dtype)
    dv_ref[...] = dv_scratch[...].astype(dv_ref.dtype)


def _backward_dq(spec, interpret, q, k, v, do, lse, di, params, rows):
  B, H, L, K = q.shape
  row_spec = pl.BlockSpec((None, None, 1, spec.block_q), lambda b, h, i, j: (b, h, 0, i))
  out_specs = [_q_spec(spec, K)]
  out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype)]
  if spec.kind == 't5':
    lanes = min(spec.block_kv, LANES)
    out_specs.append(pl.BlockSpec((None, None, spec.num_buckets, lanes),
                                  lambda b, h, i, j: (b, h, 0, 0)))
    out_shape.append(jax.ShapeDtypeStruct((B, H, spec.num_buckets, lanes), _f32))
  q_axis = 'arbitrary' if spec.kind == 't5' else 'parallel'  # the table sums over blocks
  outs = pl.pallas_call(
      functools.partial(_dq_kernel, spec=spec),
      name='flash_bias_dq',
      grid=(B, H, spec.q_blocks, spec.kv_blocks),
      in_specs=[_q_spec(spec, K), _kv_spec_by_q(spec, K), _kv_spec_by_q(spec, K),
                _q_spec(spec, K), row_spec, row_spec, *_ids_specs_by_q(spec), _smem()],
      out_specs=out_specs, out_shape=out_shape,
      scratch_shapes=[pltpu.VMEM((spec.block_q, K), _f32)],
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=('parallel', 'parallel', q_axis, 'arbitrary')),
      interpret=interpret,
  )(q, k, v, do, lse, di, rows['q_ids_col'], rows['kv_ids_row'], rows['q_pos_col'],
    rows['kv_pos_row'], params)
  dtable = outs[1].sum(axis=(0, 3)) if spec.kind == 't5' else jnp.zeros_like(params)
  return outs[0], dtable


def _backward_dkv(spec, interpret, q, k, v, do, lse, di, params, rows):
  B, G, S, K = k.shape
  N = spec.heads_per_group

  def q_index(b, g, j, n, i):
    return b, g * N + n, _clamp(*_q_range(spec, j), i), 0

  def q_row_index(b, g, j, n, i):
    return b, g * N + n, 0, _clamp(*_q_range(spec, j), i)

  q_spec = pl.BlockSpec((None, None, spec.block_q, K), q_index)
  kv_spec = pl.BlockSpec((None, None, spec.block_kv, K), lambda b, g, j, n, i: (b, g, j, 0))
  row_spec = pl.BlockSpec((None, None, 1, spec.block_q), q_row_index)
  q_row = pl.BlockSpec((None, SUBLANES, spec.block_q),
                       lambda b, g, j, n, i: (b, 0, _clamp(*_q_range(spec, j), i)))
  kv_column = pl.BlockSpec((None, spec.block_kv, LANES), lambda b, g, j, n, i: (b, j, 0))
  return pl.pallas_call(
      functools.partial(_dkv_kernel, spec=spec),
      name='flash_bias_dkv',
      grid=(B, G, spec.kv_blocks, N, spec.q_blocks),
      in_specs=[q_spec, kv_spec, kv_spec, q_spec, row_spec, row_spec, q_row, kv_column, q_row,
                kv_column, _smem()],
      out_specs=[kv_spec, kv_spec],
      out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
      scratch_shapes=[pltpu.VMEM((spec.block_kv, K), _f32),
                      pltpu.VMEM((spec.block_kv, K), _f32)],
      compiler_params=pltpu.CompilerParams(dimension_semantics=(
          'parallel', 'parallel', 'parallel', 'arbitrary', 'arbitrary')),
      interpret=interpret,
  )(q, k, v, do, lse, di, rows['q_ids_row'], rows['kv_ids_col'], rows['q_pos_row'],
    rows['kv_pos_col'], params)


# ------------------------------------------------------------------------- custom vjp

@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _attend(spec, interpret, q, k, v, params, rows):
  return _forward(spec, interpret, q, k, v, params, rows)[0]


def _attend_forward(spec, interpret, q, k, v, params, rows):
  o, lse = _forward(spec, interpret, q, k, v, params, rows)
  return o, (q, k, v, params, rows, o, lse)


def _attend_backward(spec, interpret, residuals, do):
  q, k, v, params, rows, o, lse = residuals
  di = jnp.sum(o.astype(_f32) * do.astype(_f32), axis=-1)
  lse, di = lse[:, :, None, :], di[:, :, None, :]  # [B, H, 1, L]: lane-dense rows
  dq, dparams = _backward_dq(spec, interpret, q, k, v, do, lse, di, params, rows)
  dk, dv = _backward_dkv(spec, interpret, q, k, v, do, lse, di, params, rows)
  zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, jax.dtypes.float0), rows)
  return dq, dk, dv, dparams.astype(params.dtype), zeros


_attend.defvjp(_attend_forward, _attend_backward)


# --------------------------------------------------------------------------- the entry

def _layouts(q_ids_BL, kv_ids_BS, q_pos_BL, kv_pos_BS):
  """Per-row ints as columns [B, N, 128] and rows [B, 8, N] (what the blocks broadcast)."""
  column = lambda x: jnp.broadcast_to(x[:, :, None], (*x.shape, LANES))
  row = lambda x: jnp.broadcast_to(x[:, None, :], (x.shape[0], SUBLANES, x.shape[1]))
  named = {'q_ids': q_ids_BL, 'kv_ids': kv_ids_BS, 'q_pos': q_pos_BL, 'kv_pos': kv_pos_BS}
  layouts = {}
  for name, x in named.items():
    x = x.astype(jnp.int32)
    layouts[name + '_col'], layouts[name + '_row'] = column(x), row(x)
  return layouts


def _local(q_BLHK, k_BSGK, v_BSGK, q_ids_BL, kv_ids_BS, q_pos_BL, kv_pos_BS, params, *,
           bias, causal, window, scale, blocks, interpret):
  """One shard: [B, L, H, K] queries against [B, S, G, K] keys/values; params [.., H]."""
  _, L, H, _ = q_BLHK.shape
  S, G = k_BSGK.shape[1], k_BSGK.shape[2]
  block_q, block_kv = block_sizes(L, S, *blocks)
  spec = _Spec(kind=bias.kind, bidirectional=bias.bidirectional,
               num_buckets=params.shape[0] if bias.kind == 't5' else 0,
               max_distance=bias.max_distance, causal=causal, window=window,
               scale=float(scale), block_q=block_q, block_kv=block_kv, length=L, kv_length=S,
               heads_per_group=H // G)
  rows = _layouts(q_ids_BL, kv_ids_BS, q_pos_BL, kv_pos_BS)
  per_head = params.T if bias.kind == 't5' else params  # [H, buckets] / [H]: SMEM by head
  out_BHLK = _attend(spec, interpret, q_BLHK.transpose(0, 2, 1, 3),
                     k_BSGK.transpose(0, 2, 1, 3), v_BSGK.transpose(0, 2, 1, 3),
                     per_head.astype(_f32), rows)
  return out_BHLK.transpose(0, 2, 1, 3)


def attention(q_BLHK, k_BSGK, v_BSGK, mask, bias, scale, blocks=(0, 0), interpret=False):
  """Attention with `mask` (zoo.kernels.mask.Mask) and `bias` (bias.PositionBias) computed
  per block; batch over the batch mesh axes and heads over `tensor` when a mesh is set."""
  fn = functools.partial(_local, bias=bias, causal=mask.causal, window=mask.window,
                         scale=scale, blocks=tuple(blocks), interpret=interpret)
  rows = (mask.q_segment_ids, mask.kv_segment_ids, bias.q_positions, bias.kv_positions)
  return shard.over_mesh(fn, q_BLHK, k_BSGK, v_BSGK, rows=rows, head_params=(bias.params,))
