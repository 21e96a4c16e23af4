"""The gated delta rule (Yang et al. 2024, "Gated Delta Networks"), the sequence mixer of
Qwen3-Next's linear-attention layers: per head a state S [K, J] that each token t decays
and corrects toward its value,

  S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T,   o_t = S_t^T q_t,

with g_t <= 0 the log decay and beta_t in (0, 1) the write strength. The state resets where
the segment id changes (packed documents and left padding run as the documents alone).

`recurrent` is the token-by-token scan (the reference and what tests compare with);
`chunked` the training form: within chunks of C tokens the updates are solved at once (a
unit lower-triangular system, the "UT transform") and matmuls, and a scan over chunks
carries the state, so memory is linear in the length and the work is matmuls. Both take
the state (and the segment it belongs to) a call starts from and return the one it ends
with, which is what decoding keeps in its cache.

q and k come normalised, and q scaled, from the caller (zoo/models/delta_net.py).

Glossary: B batch, L length, H heads, K key head dim, J value head dim, N chunks, C chunk
length.
"""

import jax
import jax.numpy as jnp


def _wide(x):
  """x in float32, or wider (float64 tests)."""
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def recurrent(q_BLHK, k_BLHK, v_BLHJ, g_BLH, beta_BLH, segment_ids_BL, state_BHKJ=None,
              state_segment_B=None):
  """The delta rule token by token -> (o [B, L, H, J] float32, final state [B, H, K, J],
  final segment [B]). A token whose segment differs from the one before starts from a zero
  state; `state_segment_B` is the segment `state_BHKJ` belongs to (default: the first
  token's)."""
  B, L, H, K = q_BLHK.shape
  J = v_BLHJ.shape[-1]
  if state_BHKJ is None:
    state_BHKJ = jnp.zeros((B, H, K, J), _wide(v_BLHJ).dtype)
  state_segment_B = (segment_ids_BL[:, 0] if state_segment_B is None
                     else state_segment_B.astype(segment_ids_BL.dtype))

  def step(carry, xs):
    S_BHKJ, prev_B = carry
    q_BHK, k_BHK, v_BHJ, g_BH, beta_BH, seg_B = xs
    S_BHKJ = jnp.where((seg_B == prev_B)[:, None, None, None], S_BHKJ, 0.0)
    S_BHKJ = S_BHKJ * jnp.exp(g_BH)[:, :, None, None]
    read_BHJ = jnp.einsum('BHKJ,BHK->BHJ', S_BHKJ, k_BHK)
    delta_BHJ = (v_BHJ - read_BHJ) * beta_BH[:, :, None]
    S_BHKJ = S_BHKJ + jnp.einsum('BHK,BHJ->BHKJ', k_BHK, delta_BHJ)
    return (S_BHKJ, seg_B), jnp.einsum('BHKJ,BHK->BHJ', S_BHKJ, q_BHK)

  xs = tuple(jnp.moveaxis(_wide(x), 1, 0) for x in (q_BLHK, k_BLHK, v_BLHJ, g_BLH, beta_BLH))
  (state_BHKJ, segment_B), o_LBHJ = jax.lax.scan(
      step, (_wide(state_BHKJ), state_segment_B),
      (*xs, jnp.moveaxis(segment_ids_BL, 1, 0)))
  return jnp.moveaxis(o_LBHJ, 0, 1), state_BHKJ, segment_B


def chunked(q_BLHK, k_BLHK, v_BLHJ, g_BLH, beta_BLH, segment_ids_BL, chunk,
            state_BHKJ=None, state_segment_B=None):
  """The delta rule in chunks of `chunk` tokens (the length is padded up to a multiple;
  the padding neither reads nor writes) -> the same as `recurrent`, in float32."""
  B, L, H, K = q_BLHK.shape
  J = v_BLHJ.shape[-1]
  C = min(chunk, L)
  pad = -L % C
  if state_BHKJ is None:
    state_BHKJ = jnp.zeros((B, H, K, J), _wide(v_BLHJ).dtype)
  state_segment_B = (segment_ids_BL[:, 0] if state_segment_B is None
                     else state_segment_B.astype(segment_ids_BL.dtype))
  q_BLHK, k_BLHK, v_BLHJ, g_BLH, beta_BLH = map(_wide, (q_BLHK, k_BLHK, v_BLHJ, g_BLH, beta_BLH))
  if pad:  # padding joins the last token's segment and changes nothing: k, beta, g = 0
    zeros = lambda x: jnp.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 2))
    q_BLHK, k_BLHK, v_BLHJ, g_BLH, beta_BLH = map(zeros, (q_BLHK, k_BLHK, v_BLHJ, g_BLH, beta_BLH))
    segment_ids_BL = jnp.pad(segment_ids_BL, ((0, 0), (0, pad)), mode='edge')
  N = (L + pad) // C
  # [B, N, H, C, ...]: chunks, then heads, then the tokens of a chunk
  split = lambda x: x.reshape(B, N, C, H, *x.shape[3:]).swapaxes(2, 3)
  q_BNHCK, k_BNHCK, v_BNHCJ = split(q_BLHK), split(k_BLHK), split(v_BLHJ)
  g_BNHC, beta_BNHC = split(g_BLH), split(beta_BLH)
  seg_BNC = segment_ids_BL.reshape(B, N, C)
  # the segment of the token before each chunk (the state it starts from belongs to it)
  before_BN = jnp.concatenate([state_segment_B[:, None], seg_BNC[:, :-1, -1]], axis=1)

  cum_BNHC = jnp.cumsum(g_BNHC, axis=-1)  # log decay from the chunk's start to each token
  same_BNCC = seg_BNC[:, :, :, None] == seg_BNC[:, :, None, :]
  causal_CC = jnp.tril(jnp.ones((C, C), bool))
  within_BN1CC = (same_BNCC & causal_CC[None, None])[:, :, None]
  # Gamma[i, j] = exp(cum_i - cum_j) for j <= i in one segment, else 0 (exponents <= 0)
  gap_BNHCC = jnp.where(within_BN1CC, cum_BNHC[..., :, None] - cum_BNHC[..., None, :], -jnp.inf)
  gamma_BNHCC = jnp.exp(gap_BNHCC)
  # which tokens continue the state the chunk starts from
  carried_BN1C = (seg_BNC == before_BN[:, :, None])[:, :, None]
  from_start_BNHC = jnp.where(carried_BN1C, jnp.exp(cum_BNHC), 0.0)

  # the UT transform: (I + A) u = beta v - beta exp(cum) K S0, A = strictly lower beta Gamma K K^T
  kk_BNHCC = jnp.einsum('BNHCK,BNHDK->BNHCD', k_BNHCK, k_BNHCK)
  strict_CC = jnp.tril(jnp.ones((C, C), bool), -1)
  system_BNHCC = jnp.where(strict_CC[None, None, None],
                           beta_BNHC[..., None] * gamma_BNHCC * kk_BNHCC, 0.0)
  system_BNHCC = system_BNHCC + jnp.eye(C, dtype=system_BNHCC.dtype)[None, None, None]
  rhs = jnp.concatenate([beta_BNHC[..., None] * v_BNHCJ,
                               (beta_BNHC * from_start_BNHC)[..., None] * k_BNHCK], axis=-1)
  solved = jnp.einsum('BNHCD,BNHDX->BNHCX', unit_lower_inverse(system_BNHCC),
                            rhs)
  values_BNHCJ, keys_read_BNHCK = solved[..., :J], solved[..., J:]
  attend_BNHCC = jnp.einsum('BNHCK,BNHDK->BNHCD', q_BNHCK, k_BNHCK) * gamma_BNHCC
  q_read_BNHCK = q_BNHCK * from_start_BNHC[..., None]
  # each token's decay to the chunk's end, if it is in the last token's segment
  last_BN1C = (seg_BNC == seg_BNC[:, :, -1:])[:, :, None]
  to_end_BNHC = jnp.where(last_BN1C, jnp.exp(cum_BNHC[..., -1:] - cum_BNHC), 0.0)
  k_write_BNHCK = k_BNHCK * to_end_BNHC[..., None]
  keep_BNH = jnp.where(carried_BN1C[..., -1], jnp.exp(cum_BNHC[..., -1]), 0.0)

  def step(S_BHKJ, xs):
    values_BHCJ, keys_read_BHCK, attend_BHCC, q_read_BHCK, k_write_BHCK, keep_BH = xs
    u_BHCJ = values_BHCJ - jnp.einsum('BHCK,BHKJ->BHCJ', keys_read_BHCK, S_BHKJ)
    o_BHCJ = (jnp.einsum('BHCK,BHKJ->BHCJ', q_read_BHCK, S_BHKJ) +
              jnp.einsum('BHCD,BHDJ->BHCJ', attend_BHCC, u_BHCJ))
    S_BHKJ = (S_BHKJ * keep_BH[:, :, None, None] +
              jnp.einsum('BHCK,BHCJ->BHKJ', k_write_BHCK, u_BHCJ))
    return S_BHKJ, o_BHCJ

  by_chunk = lambda x: jnp.moveaxis(x, 1, 0)
  state_BHKJ, o_NBHCJ = jax.lax.scan(
      step, _wide(state_BHKJ),
      tuple(map(by_chunk, (values_BNHCJ, keys_read_BNHCK, attend_BNHCC, q_read_BNHCK,
                           k_write_BNHCK, keep_BNH))))
  o_BLHJ = o_NBHCJ.transpose(1, 0, 3, 2, 4).reshape(B, N * C, H, J)[:, :L]
  return o_BLHJ, state_BHKJ, seg_BNC[:, -1, -1]


@jax.custom_vjp
def unit_lower_inverse(t):
  """The inverse of unit lower-triangular matrices [..., C, C] by blocks, in log2(C)
  rounds of matmuls (padded to a power of two with the identity): each round joins pairs of
  inverted diagonal blocks, [[A, 0], [M, B]]^-1 = [[A^-1, 0], [-B^-1 M A^-1, B^-1]]. Only
  matmuls, so the MXU runs it and autodiff needs nothing more; unlike the triangular solve,
  whose XLA:CPU call hung beside the experts' ragged matmuls in one step.
  """
  width = t.shape[-1]
  lead = t.shape[:-2]
  C = 1 << (width - 1).bit_length()
  if C != width:  # [[T, 0], [0, I]]^-1 = [[T^-1, 0], [0, I]]
    t = jnp.pad(t, [(0, 0)] * len(lead) + [(0, C - width)] * 2)
    t = t + jnp.diag((jnp.arange(C) >= width).astype(t.dtype))[(None,) * len(lead)]
  inv = jnp.ones((*lead, C, 1, 1), t.dtype)  # C blocks of one
  size = 1
  while size < C:
    n = C // (2 * size)
    pairs = jnp.moveaxis(jnp.diagonal(
        t.reshape(*lead, n, 2 * size, n, 2 * size), axis1=-4, axis2=-2), -1, -3)
    lower = pairs[..., size:, :size]
    halves = inv.reshape(*lead, n, 2, size, size)
    first, second = halves[..., 0, :, :], halves[..., 1, :, :]
    corner = -jnp.einsum('...ab,...bc,...cd->...ad', second, lower, first)
    zeros = jnp.zeros_like(first)
    inv = jnp.concatenate([jnp.concatenate([first, zeros], -1),
                                jnp.concatenate([corner, second], -1)], -2)
    size *= 2
  return inv.reshape(*lead, C, C)[..., :width, :width]


def _inverse_forward(t):
  inv = unit_lower_inverse(t)
  return inv, inv


def _inverse_backward(inv, d_inv):
  """d(T^-1) = -T^-1 dT T^-1: the cotangent of T is -T^-T d(T^-1) T^-T, kept strictly
  lower (T's diagonal is 1 and its upper triangle 0 by construction)."""
  inv_t = jnp.swapaxes(inv, -1, -2)
  d_t = -jnp.einsum('...ab,...bc,...cd->...ad', inv_t, d_inv, inv_t)
  C = inv.shape[-1]
  return (jnp.where(jnp.tril(jnp.ones((C, C), bool), -1)[(None,) * (inv.ndim - 2)],
                    d_t, 0.0),)


unit_lower_inverse.defvjp(_inverse_forward, _inverse_backward)
