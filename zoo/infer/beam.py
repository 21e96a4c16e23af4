"""Beam search over any step function: W beams per row, scored by log probability divided by
the GNMT length penalty ((5 + length) / 6)^alpha (Wu et al. 2016; alpha 0 = none).

Each step extends every alive beam by every token, keeps the 2W best extensions (so W of
them can go on even if W end at EOS), moves those ending at EOS to the row's finished list
(its W best kept) and the W best others on, reordering the cache with them. A row is done
when its worst finished score beats what its best alive beam could still reach; the search
stops when every row is done or after N tokens. Each row returns its best finished
sequence (EOS included, padding after), or its best alive one if none finished. These are
T5X's rules; rules='transformers' follows transformers' instead (search's docstring;
docs/generate.md compares them).

Glossary: B rows, W beams, R = B x W beam rows, J = 2W candidates per row and step,
N new tokens, V vocab.
"""

import jax
import jax.numpy as jnp


def length_penalty(length, alpha, rules='zoo'):
  """The divisor of a finished beam's log probability: GNMT's ((5 + length) / 6)^alpha, or
  transformers' length^alpha (its length_penalty)."""
  if rules == 'transformers':
    return jnp.asarray(length, jnp.float32) ** alpha
  return ((5.0 + length) / 6.0) ** alpha


def forbid_eos(scores_BV, eos_id, i, min_new_tokens):
  """scores_BV (logits or log probs) with EOS at -inf while new token i comes before
  min_new_tokens (0 = never)."""
  if not min_new_tokens:
    return scores_BV
  eos_V = jnp.arange(scores_BV.shape[-1]) == eos_id
  return jnp.where(eos_V & (i < min_new_tokens), -jnp.inf, scores_BV)


def search(step_fn, logits_RV, cache, reorder, num_beams, max_new_tokens, eos_id, pad_id,
           alpha=0.0, penalties=None, rules='zoo', min_new_tokens=0):
  """step_fn(tokens [B*W], i, cache) -> (logits [B*W, V], cache) feeds token i of every beam;
  logits_RV [B*W, V] are the first token's (the beams of a row start identical);
  reorder(cache, rows [B*W]) -> the cache of those rows. penalties: None, or (counts [B*W, V]
  of the tokens seen, penalize(logits, counts) -> logits, count(counts, tokens, seen) ->
  counts): each beam's logits are penalized by what it has seen, its counts moving with it.
  rules='transformers' follows transformers' beam search (5.x, early_stopping=False)
  instead: the penalty length^alpha; only the W best of the 2W extensions may finish; at
  the last step those W finish whether they end at EOS or not; a row takes no more finished
  beams once its best alive one, penalized at its current length, cannot beat its worst
  finished one. min_new_tokens: EOS's log probability -inf (after the softmax, unlike the
  others, as transformers does) before that many new tokens. -> (tokens [B, N], scores [B])."""
  W, N = num_beams, max_new_tokens
  B, V = logits_RV.shape[0] // W, logits_RV.shape[1]
  transformers = rules == 'transformers'
  row_B1 = jnp.arange(B)[:, None]
  take = lambda a_BW, index_BJ: jnp.take_along_axis(a_BW, index_BJ, axis=1)
  take_seqs = lambda s_BWN, index_BJ: jnp.take_along_axis(s_BWN, index_BJ[..., None], axis=1)
  neg_inf = jnp.float32(-jnp.inf)

  penalize, count = (None, None) if penalties is None else penalties[1:]

  def cond(carry):
    i, open_B = carry[0], carry[-1]
    return (i < N) & jnp.any(open_B)

  def body(carry):
    (i, logits_RV, cache, counts_RV, alive_BW, alive_BWN, finished_BW, finished_BWN,
     open_B) = carry
    if penalize:
      logits_RV = penalize(logits_RV, counts_RV)
    log_probs_RV = jax.nn.log_softmax(logits_RV.astype(jnp.float32))
    log_probs_BWV = forbid_eos(log_probs_RV, eos_id, i, min_new_tokens).reshape(B, W, V)
    scores_BJ, flat_BJ = jax.lax.top_k((alive_BW[..., None] + log_probs_BWV).reshape(B, -1),
                                       2 * W)
    beam_BJ, token_BJ = flat_BJ // V, (flat_BJ % V).astype(jnp.int32)
    seqs_BJN = take_seqs(alive_BWN, beam_BJ)
    seqs_BJN = jax.lax.dynamic_update_slice_in_dim(seqs_BJN, token_BJ[..., None], i, axis=2)
    ended_BJ = token_BJ == eos_id
    if transformers:  # the length limit ends extensions too
      ended_BJ |= i + 1 >= N

    # the W best extensions that did not end go on
    alive_BW, keep_BW = jax.lax.top_k(jnp.where(ended_BJ, neg_inf, scores_BJ), W)
    alive_BWN = take_seqs(seqs_BJN, keep_BW)
    # those that ended join the finished, scored with the length penalty; the W best stay
    # (transformers: only ended extensions among the W best, and only while the row is open)
    finishing_BJ = ended_BJ
    if transformers:
      finishing_BJ &= (jnp.arange(2 * W) < W)[None] & open_B[:, None]
    ended_scores_BJ = jnp.where(finishing_BJ,
                                scores_BJ / length_penalty(i + 1, alpha, rules), neg_inf)
    finished_BW, best_BW = jax.lax.top_k(
        jnp.concatenate([finished_BW, ended_scores_BJ], axis=1), W)
    finished_BWN = take_seqs(jnp.concatenate([finished_BWN, seqs_BJN], axis=1), best_BW)
    # a row is open while its best alive beam could still beat its worst finished one: at
    # the longest length (log probs only fall), or for transformers at the current one
    best_alive_B = alive_BW[:, 0] / length_penalty(i + 1 if transformers else N, alpha, rules)
    open_B = (open_B if transformers else True) & (best_alive_B > finished_BW[:, -1])

    rows_R = (row_B1 * W + take(beam_BJ, keep_BW)).reshape(-1)
    tokens_R = take(token_BJ, keep_BW).reshape(-1)
    if count:
      counts_RV = count(counts_RV[rows_R], tokens_R, jnp.ones_like(tokens_R, jnp.bool_))
    logits_RV, cache = step_fn(tokens_R, i, reorder(cache, rows_R))
    return (i + 1, logits_RV, cache, counts_RV, alive_BW, alive_BWN, finished_BW,
            finished_BWN, open_B)

  start_BW = jnp.where(jnp.arange(W) == 0, 0.0, neg_inf)[None].repeat(B, 0)  # beam 0 only
  empty_BWN = jnp.full((B, W, N), pad_id, jnp.int32)
  counts_RV = None if penalties is None else penalties[0]
  carry = (jnp.int32(0), logits_RV, cache, counts_RV, start_BW, empty_BWN,
           jnp.full((B, W), neg_inf), empty_BWN, jnp.ones((B,), jnp.bool_))
  _, _, _, _, alive_BW, alive_BWN, finished_BW, finished_BWN, _ = jax.lax.while_loop(
      cond, body, carry)
  any_finished_B = finished_BW[:, 0] > neg_inf
  alive_scores_B = alive_BW[:, 0] / length_penalty(N, alpha, rules)
  tokens_BN = jnp.where(any_finished_B[:, None], finished_BWN[:, 0], alive_BWN[:, 0])
  return tokens_BN, jnp.where(any_finished_B, finished_BW[:, 0], alive_scores_B)
