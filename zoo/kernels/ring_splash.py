"""Ring attention whose local blocks run JAX's splash kernel (TPU; interpret mode on CPU).

The ring is zoo/kernels/ring.py's (key/value chunks passed one hop per step over the
`context` axis, n steps), but each block of queries against a chunk of keys is one splash
call, which skips the key blocks its mask hides, and the running softmax is kept as
(output, log-sum-exp) pairs: splash returns each block's normalised output and its
log-sum-exp, and two blocks combine as o = o1 e^(lse1 - lse) + o2 e^(lse2 - lse) with
lse = logaddexp(lse1, lse2).

Splash masks are static, so the blocks are cut where the mask is one of a few shapes.
A causal sequence is laid out by ring.balance (the decoder does): device i holds chunks i
and 2n-1-i of 2n, each c = L / 2 long, and a query chunk a sees key chunk b by its
distance d = a - b alone: nothing when d < 0, the causal triangle when d = 0, everything
(or, with a sliding window, a band offset by d c) when d > 0. Each device picks the class
of its four chunk pairs per step with lax.switch; every device does the same work. A
bidirectional sequence keeps one chunk per device and every block is full.

The backward pass is written out (custom_vjp): the gradients of one block given the whole
sequence's output and log-sum-exp are what splash's own backward kernels compute from
those residuals, so each step calls them on the block (queries against the chunk that is
here) and the keys' and values' gradients travel round the ring with their chunk, home
after the n-th hop. That backward function is splash's module-private
`_splash_attention_bwd` (jax 0.10's signature; tests/kernels/ring_splash_test.py checks it
against the reference on every run).

Attention sinks (a logit per head in every row's normalizer) start the running log-sum-exp
as a block whose output is 0. Given the sink-inclusive output and log-sum-exp, splash's
backward kernels compute the queries', keys' and values' gradients unchanged (its
probabilities exp(logit - lse) are then the sink softmax's); the sinks' own gradient is
-sum over rows of exp(sink - lse) (d_out . out).

Segment ids go to splash as they are: padding queries (segment 0) attend padding keys,
which the reference masks; no real token sees padding either way. GQA/MQA: splash's MQA
kernel per kv head over its Q query heads.

Glossary: B batch, L local queries, H heads, G kv heads, Q = H // G, K head dim, P chunks
per device (2 causal, 1 bidirectional), c = L / P, n devices on the ring.
"""

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel

from zoo.kernels import splash as splash_lib

MASKED = splash_attention_kernel.DEFAULT_MASK_VALUE  # splash's masked logit


def supports(length, causal):
  """The local length L cuts into chunks splash can block."""
  chunk, rest = divmod(length, 2 if causal else 1)
  return not rest and splash_lib.supports(chunk, chunk)


def _masks(c, causal, window):
  """Static masks of a c x c block by chunk distance d = 0, 1, ... (the empty class, d < 0
  or beyond the window, is added by the ring); without a window the last mask (full)
  serves every d > 0."""
  if not causal:
    return [splash.FullMask((c, c))]
  if not window:
    return [splash.CausalMask((c, c)), splash.FullMask((c, c))]
  farthest = (window + c - 2) // c  # the largest d with a key inside the window
  return [splash.LocalMask((c, c), window_size=(window - 1, 0), offset=d * c)
          for d in range(farthest + 1)]


def _class(distance, causal, window, classes):
  """Index into [empty] + masks for a (dynamic) chunk distance."""
  if not causal:
    return jnp.int32(1)
  if not window:
    return jnp.clip(distance + 1, 0, 2)
  return jnp.where((distance < 0) | (distance >= classes), 0, distance + 1)


def _kernels(c, heads_per_group, causal, window, blocks, interpret, softcap=0.0):
  block_q, block_kv = splash_lib.block_sizes(c, c, *blocks)
  sizes = splash.BlockSizes(
      block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv, block_q_dkv=block_q,
      block_kv_dkv=block_kv, block_kv_dkv_compute=block_kv, block_q_dq=block_q,
      block_kv_dq=block_kv)
  return [splash.make_splash_mqa(splash.MultiHeadMask([mask] * heads_per_group),
                                 block_sizes=sizes, head_shards=1, q_seq_shards=1,
                                 save_residuals=True, interpret=interpret,
                                 attn_logits_soft_cap=softcap or None)
          for mask in _masks(c, causal, window)]


def _flat(info):
  """A mask info as splash's jitted entry point hands it to the backward kernels."""
  if info is None or info.partial_mask_blocks is None or info.partial_mask_blocks.ndim == 3:
    return info
  blocks = info.partial_mask_blocks
  return info._replace(partial_mask_blocks=blocks.reshape(-1, *blocks.shape[-2:]))


def _per_row(fn, residuals=0):
  """fn(q, k, v, q_seg, kv_seg, *residuals) on one kv head's [Q, c, K] queries and [c, K]
  keys/values and [c] segment ids -> the same over [B, G, ...] ([B, c] segment ids)."""
  return jax.vmap(jax.vmap(fn, in_axes=(0, 0, 0, None, None) + (0,) * residuals))


def _forward(kernel):
  def one(q, k, v, q_seg, kv_seg):
    out, (lse,) = kernel(q, k, v, segment_ids=splash.SegmentIds(q=q_seg, kv=kv_seg))
    visible = jnp.isfinite(lse)  # rows whose key blocks were all skipped: -inf / NaN
    return (jnp.where(visible[..., None], out.astype(jnp.float32), 0),
            jnp.where(visible, lse, MASKED))
  return _per_row(one)


def _backward(kernel):
  kw = kernel.kwargs
  def one(q, k, v, q_seg, kv_seg, out, lse, d_out):
    res = (q, k, v, splash.SegmentIds(q=q_seg, kv=kv_seg), None, out, lse,
           _flat(kernel.dq_mask_info), _flat(kernel.dkv_mask_info))
    grads = splash_attention_kernel._splash_attention_bwd(  # pylint: disable=protected-access
        False, kw['mask_value'], kw['is_mqa'], kw['block_sizes'], None,
        kw['mask_function'], kw['attn_logits_soft_cap'], kw['interpret'], res, d_out)
    return tuple(g.astype(jnp.float32) for g in grads[3:6])
  return _per_row(one, residuals=3)


def _empty_forward(q, *_):
  return jnp.zeros(q.shape, jnp.float32), jnp.full(q.shape[:-1], MASKED, jnp.float32)


def _empty_backward(q, k, *_):
  return (jnp.zeros(q.shape, jnp.float32), jnp.zeros(k.shape, jnp.float32),
          jnp.zeros(k.shape, jnp.float32))


def _ring(axis, causal, window, make_kernels):
  """The ring on chunked, pre-scaled inputs: q [P, B, G, Q, c, K], k/v [P, B, G, c, K],
  segment ids [P, B, c] -> output [P, B, G, Q, c, K]. The kernels are made inside each
  rule: their mask tables are arrays of the trace that makes them."""

  def chunk_ids(device, pieces):
    n = jax.lax.axis_size(axis)
    return [device, 2 * n - 1 - device][:pieces]

  def pairs(t, pieces, classes):
    """(query piece, key piece, class) for the chunk that is here at step t."""
    n = jax.lax.axis_size(axis)
    me = jax.lax.axis_index(axis)
    mine, theirs = chunk_ids(me, pieces), chunk_ids((me - t) % n, pieces)
    return [(a, b, _class(mine[a] - theirs[b], causal, window, classes))
            for a in range(pieces) for b in range(pieces)]

  def hop(xs):
    n = jax.lax.axis_size(axis)
    return [jax.lax.ppermute(x, axis, [(i, (i + 1) % n) for i in range(n)]) for x in xs]

  def forward(q, k, v, q_seg, kv_seg, sinks):
    pieces = q.shape[0]
    kernels = make_kernels()
    forwards = [_empty_forward] + [_forward(kernel) for kernel in kernels]

    def step(carry, t):
      out, lse, k, v, kv_seg = carry
      out, lse = list(out), list(lse)
      for a, b, cls in pairs(t, pieces, len(kernels)):
        o_blk, lse_blk = jax.lax.switch(cls, forwards, q[a], k[b], v[b], q_seg[a], kv_seg[b])
        new = jnp.logaddexp(lse[a], lse_blk)
        out[a] = (out[a] * jnp.exp(lse[a] - new)[..., None] +
                  o_blk * jnp.exp(lse_blk - new)[..., None])
        lse[a] = new
      return (jnp.stack(out), jnp.stack(lse), *hop((k, v, kv_seg))), None

    lse_start = jnp.full(q.shape[:-1], MASKED, jnp.float32)
    if sinks is not None:  # [G, Q]
      lse_start = jnp.broadcast_to(sinks.astype(jnp.float32)[..., None], q.shape[:-1])
    start = (jnp.zeros(q.shape, jnp.float32), lse_start, k, v, kv_seg)
    # not unrolled for plan mode's FLOP count (ring.unrolled): the compiler counts none of
    # the kernels' FLOPs, which the plan adds from the analytic count
    (out, lse, *_), _ = jax.lax.scan(step, start, jnp.arange(jax.lax.axis_size(axis)))
    return out.astype(q.dtype), lse

  def forward_rule(q, k, v, q_seg, kv_seg, sinks):
    out, lse = forward(q, k, v, q_seg, kv_seg, sinks)
    return out, (q, k, v, q_seg, kv_seg, sinks, out, lse)

  def backward_rule(res, d_out):
    q, k, v, q_seg, kv_seg, sinks, out, lse = res
    pieces = q.shape[0]
    kernels = make_kernels()
    backwards = [_empty_backward] + [_backward(kernel) for kernel in kernels]

    def step(carry, t):
      dq, k, v, kv_seg, dk, dv = carry
      dq, dk, dv = list(dq), list(dk), list(dv)
      for a, b, cls in pairs(t, pieces, len(kernels)):
        g_q, g_k, g_v = jax.lax.switch(cls, backwards, q[a], k[b], v[b], q_seg[a], kv_seg[b],
                                       out[a], lse[a], d_out[a])
        dq[a], dk[b], dv[b] = dq[a] + g_q, dk[b] + g_k, dv[b] + g_v
      return (jnp.stack(dq), *hop((k, v, kv_seg, jnp.stack(dk), jnp.stack(dv)))), None

    zeros = lambda x: jnp.zeros(x.shape, jnp.float32)
    start = (zeros(q), k, v, kv_seg, zeros(k), zeros(v))
    (dq, _, _, _, dk, dv), _ = jax.lax.scan(step, start, jnp.arange(jax.lax.axis_size(axis)))
    d_sinks = None
    if sinks is not None:
      rows = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
      d_sinks = -jnp.sum(jnp.exp(sinks.astype(jnp.float32)[None, None, ..., None] - lse) * rows,
                         axis=(0, 1, 4)).astype(sinks.dtype)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, d_sinks

  run = jax.custom_vjp(lambda *a: forward(*a)[0])
  run.defvjp(forward_rule, backward_rule)
  return run


def ring_attention(q_BLHK, k_BLGK, v_BLGK, q_segments_BL, kv_segments_BL, *sinks, axis,
                   causal=False, window=0, scale=None, blocks=(0, 0), interpret=False,
                   softcap=0.0):
  """Inside shard_map over `axis` (check_vma=False): this device's queries, keys and values
  (a causal sequence laid out by ring.balance), and its heads' sinks [H] if any -> its
  queries' output [B, L, H, K]."""
  B, L, H, K = q_BLHK.shape
  G = k_BLGK.shape[2]
  Q = H // G
  P = 2 if causal else 1
  c = L // P
  scale = K ** -0.5 if scale is None else scale
  kernels = lambda: _kernels(c, Q, causal, window, tuple(blocks), interpret, softcap)
  q = (q_BLHK * jnp.asarray(scale, q_BLHK.dtype)).reshape(B, P, c, G, Q, K)
  q = q.transpose(1, 0, 3, 4, 2, 5)
  kv = lambda x: x.reshape(B, P, c, G, K).transpose(1, 0, 3, 2, 4)
  segments = lambda s: s.astype(jnp.int32).reshape(B, P, c).transpose(1, 0, 2)
  out = _ring(axis, causal, window, kernels)(q, kv(k_BLGK), kv(v_BLGK),
                                             segments(q_segments_BL), segments(kv_segments_BL),
                                             sinks[0].reshape(G, Q) if sinks else None)
  return out.transpose(1, 0, 4, 2, 3, 5).reshape(B, L, H, K)
