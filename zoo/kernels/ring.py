"""Ring attention over a `context` mesh axis (Liu, Zaharia and Abbeel 2023): each device
holds one chunk of the sequence's queries, keys and values; the key/value chunks travel
round the ring (`ppermute`, one hop per step, n steps for n devices) and every device
folds each chunk into its queries' output with an online softmax (float32 running max,
running sum, weighted values), so no device ever holds the whole sequence's keys.

Which keys a query may attend is computed from what travels with the chunks: each token's
slot in the sequence (causal and sliding window compare slots) and its segment id (packed
documents never see each other; 0 = padding). So the chunks may be any slice of the
sequence: `balance` lays a causal sequence out so device i holds chunks i and 2n-1-i of
2n, an early and a late one, and every device does the same causal work.

A masked logit is the reference kernel's finite MASKED, not -inf: a block its queries see
nothing of adds weight that the first block they do see clears (its correction factor
underflows to 0), and a query that sees nothing at all averages the values as the
reference does. Attention sinks (a logit per head in every row's normalizer) start the
running max and sum, as a block of one key whose value is 0 would. Gradients flow through
the scan and the ppermutes (each step rematerialised, so the backward pass holds one block
of logits at a time).

Glossary: B batch, L local queries, S local keys, H heads, G kv heads, Q = H // G, K head
dim, n devices on the ring.
"""

import contextlib

import jax
import jax.numpy as jnp

from zoo.kernels import reference

_unrolled = []


@contextlib.contextmanager
def unrolled():
  """Trace the ring's hops unrolled: the compiler's cost analysis counts a scan's body
  once, so plan mode's FLOP count (zoo/plan/compiled.py) compiles them unrolled. Training
  keeps the scan: unrolled, the compiler holds several blocks' logits at once."""
  _unrolled.append(True)
  try:
    yield
  finally:
    _unrolled.pop()


def balance(x_BL, n, axis=1):
  """The sequence axis reordered into 2n chunks [0, 2n-1, 1, 2n-2, ...]: split evenly over
  n devices, device i holds chunks i and 2n-1-i."""
  chunks = jnp.split(x_BL, 2 * n, axis=axis)
  return jnp.concatenate([c for i in range(n) for c in (chunks[i], chunks[2 * n - 1 - i])],
                         axis=axis)


def unbalance(x_BL, n, axis=1):
  """balance's inverse."""
  pairs = jnp.split(x_BL, 2 * n, axis=axis)
  order = [None] * (2 * n)
  for i in range(n):
    order[i], order[2 * n - 1 - i] = pairs[2 * i], pairs[2 * i + 1]
  return jnp.concatenate(order, axis=axis)


def ring_attention(q_BLHK, k_BSGK, v_BSGK, q_slots_BL, kv_slots_BS, q_segments_BL,
                   kv_segments_BS, *sinks, axis, causal=False, window=0, scale=None,
                   softcap=0.0):
  """Inside shard_map over `axis` (check_vma=False, as zoo/kernels/shard.py runs it):
  this device's chunk of queries, keys and values (with their slots and segment ids, and
  the sinks [H] of its heads, if any) -> its queries' attention output [B, L, H, K], equal
  to the reference kernel on the whole sequence."""
  n = jax.lax.axis_size(axis)
  B, L, H, K = q_BLHK.shape
  G = k_BSGK.shape[2]
  scale = K ** -0.5 if scale is None else scale
  q_BLGQK = q_BLHK.reshape(B, L, G, H // G, K)
  hop = [(i, (i + 1) % n) for i in range(n)]

  @jax.checkpoint
  def step(carry, _):
    max_BGQL, sum_BGQL, out_BGQLK, k_BSGK, v_BSGK, kv_slots_BS, kv_segments_BS = carry
    logits_BGQLS = reference.soft_cap(jnp.einsum(
        'BLGQK,BSGK->BGQLS', q_BLGQK, k_BSGK, preferred_element_type=jnp.float32) * scale,
                                      softcap)
    allowed_BLS = ((q_segments_BL[:, :, None] == kv_segments_BS[:, None, :]) &
                   (kv_segments_BS[:, None, :] > 0))
    if causal:
      allowed_BLS &= kv_slots_BS[:, None, :] <= q_slots_BL[:, :, None]
    if window:
      allowed_BLS &= kv_slots_BS[:, None, :] > q_slots_BL[:, :, None] - window
    logits_BGQLS = jnp.where(allowed_BLS[:, None, None], logits_BGQLS, reference.MASKED)
    new_max_BGQL = jnp.maximum(max_BGQL, jnp.max(logits_BGQLS, axis=-1))
    correction_BGQL = jnp.exp(max_BGQL - new_max_BGQL)
    probs_BGQLS = jnp.exp(logits_BGQLS - new_max_BGQL[..., None])
    sum_BGQL = sum_BGQL * correction_BGQL + jnp.sum(probs_BGQLS, axis=-1)
    out_BGQLK = out_BGQLK * correction_BGQL[..., None] + jnp.einsum(
        'BGQLS,BSGK->BGQLK', probs_BGQLS, v_BSGK.astype(jnp.float32))
    passed = [jax.lax.ppermute(x, axis, hop)
              for x in (k_BSGK, v_BSGK, kv_slots_BS, kv_segments_BS)]
    return (new_max_BGQL, sum_BGQL, out_BGQLK, *passed), None

  stats = (B, G, H // G, L)
  if sinks:  # the sink's logit, whose exp(0) = 1 and value 0
    max_start = jnp.broadcast_to(sinks[0].astype(jnp.float32).reshape(G, H // G, 1), stats)
    sum_start = jnp.ones(stats, jnp.float32)
  else:
    max_start = jnp.full(stats, reference.MASKED, jnp.float32)
    sum_start = jnp.zeros(stats, jnp.float32)
  start = (max_start, sum_start,
           jnp.zeros((*stats, K), jnp.float32), k_BSGK, v_BSGK, kv_slots_BS, kv_segments_BS)
  (_, sum_BGQL, out_BGQLK, *_), _ = jax.lax.scan(step, start, None, length=n,
                                                  unroll=bool(_unrolled))
  out_BGQLK = out_BGQLK / sum_BGQL[..., None]
  return out_BGQLK.transpose(0, 3, 1, 2, 4).reshape(B, L, H, K).astype(q_BLHK.dtype)
