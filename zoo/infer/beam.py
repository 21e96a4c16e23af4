"""Beam search over any step function: W beams per row, scored by log probability divided by
the GNMT length penalty ((5 + length) / 6)^alpha (Wu et al. 2016; alpha 0 = none).

Each step extends every alive beam by every token, keeps the 2W best extensions (so W of
them can go on even if W end at EOS), moves those ending at EOS to the row's finished list
(its W best kept) and the W best others on, reordering the cache with them. A row is done
when its worst finished score beats what its best alive beam could still reach; the search
stops when every row is done or after N tokens. Each row returns its best finished
sequence (EOS included, padding after), or its best alive one if none finished.

Glossary: B rows, W beams, N new tokens, V vocab.
"""

import jax
import jax.numpy as jnp


def length_penalty(length, alpha):
  return ((5.0 + length) / 6.0) ** alpha


def search(step_fn, logits_XV, cache, reorder, num_beams, max_new_tokens, eos_id, pad_id,
           alpha=0.0):
  """step_fn(tokens [B*W], i, cache) -> (logits [B*W, V], cache) feeds token i of every beam;
  logits_XV [B*W, V] are the first token's (the beams of a row start identical);
  reorder(cache, rows [B*W]) -> the cache of those rows. -> (tokens [B, N], scores [B])."""
  W, N = num_beams, max_new_tokens
  B, V = logits_XV.shape[0] // W, logits_XV.shape[1]
  row_B1 = jnp.arange(B)[:, None]
  take = lambda a_BW, index_BK: jnp.take_along_axis(a_BW, index_BK, axis=1)
  take_seqs = lambda s_BWN, index_BK: jnp.take_along_axis(s_BWN, index_BK[..., None], axis=1)
  neg_inf = jnp.float32(-jnp.inf)

  def cond(carry):
    i, _, _, alive_BW, _, finished_BW, _ = carry
    reachable_B = alive_BW[:, 0] / length_penalty(N, alpha)  # log probs only fall
    return (i < N) & ~jnp.all(finished_BW[:, -1] >= reachable_B)

  def body(carry):
    i, logits_XV, cache, alive_BW, alive_BWN, finished_BW, finished_BWN = carry
    log_probs_BWV = jax.nn.log_softmax(logits_XV.astype(jnp.float32)).reshape(B, W, V)
    scores_BK, flat_BK = jax.lax.top_k((alive_BW[..., None] + log_probs_BWV).reshape(B, -1),
                                       2 * W)
    beam_BK, token_BK = flat_BK // V, (flat_BK % V).astype(jnp.int32)
    seqs_BKN = take_seqs(alive_BWN, beam_BK)
    seqs_BKN = jax.lax.dynamic_update_slice_in_dim(seqs_BKN, token_BK[..., None], i, axis=2)
    ended_BK = token_BK == eos_id

    # the W best extensions that did not end go on
    alive_BW, keep_BW = jax.lax.top_k(jnp.where(ended_BK, neg_inf, scores_BK), W)
    alive_BWN = take_seqs(seqs_BKN, keep_BW)
    # those that ended join the finished, scored with the length penalty; the W best stay
    ended_scores_BK = jnp.where(ended_BK, scores_BK / length_penalty(i + 1, alpha), neg_inf)
    finished_BW, best_BW = jax.lax.top_k(
        jnp.concatenate([finished_BW, ended_scores_BK], axis=1), W)
    finished_BWN = take_seqs(jnp.concatenate([finished_BWN, seqs_BKN], axis=1), best_BW)

    rows_X = (row_B1 * W + take(beam_BK, keep_BW)).reshape(-1)
    logits_XV, cache = step_fn(take(token_BK, keep_BW).reshape(-1), i, reorder(cache, rows_X))
    return i + 1, logits_XV, cache, alive_BW, alive_BWN, finished_BW, finished_BWN

  start_BW = jnp.where(jnp.arange(W) == 0, 0.0, neg_inf)[None].repeat(B, 0)  # beam 0 only
  empty_BWN = jnp.full((B, W, N), pad_id, jnp.int32)
  carry = (jnp.int32(0), logits_XV, cache, start_BW, empty_BWN,
           jnp.full((B, W), neg_inf), empty_BWN)
  _, _, _, alive_BW, alive_BWN, finished_BW, finished_BWN = jax.lax.while_loop(
      cond, body, carry)
  any_finished_B = finished_BW[:, 0] > neg_inf
  alive_scores_B = alive_BW[:, 0] / length_penalty(N, alpha)
  tokens_BN = jnp.where(any_finished_B[:, None], finished_BWN[:, 0], alive_BWN[:, 0])
  return tokens_BN, jnp.where(any_finished_B, finished_BW[:, 0], alive_scores_B)
