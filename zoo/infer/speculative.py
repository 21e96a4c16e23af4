"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023): a draft model proposes k
tokens one at a time, the target scores all of them in one forward pass over its cache, the
longest accepted prefix is kept and one more token comes from the target, so every round
emits between 1 and k + 1 tokens for one target pass.

Acceptance: greedy (temperature 0) keeps a draft token while it is the target's argmax, so
the output is plain greedy decoding's, token for token. Sampling keeps draft token x with
probability min(1, p(x) / q(x)) (p the target's, q the draft's distribution after the same
temperature and top-k/top-p/min-p filters) and replaces the first rejected one by a draw
from max(p - q, 0), renormalised; after k acceptances the extra token is drawn from p. Each
token is then distributed as the target's own sampling would draw it.

Both models' caches are decoder caches (zoo/families/decoder.py `prefill`) with k + 1 slots
of room; after a round both cache indices go back to just past the kept tokens, so the keys
of rejected tokens are overwritten by the next round. A local (sliding-window) layer's ring
keeps k slots beyond its window for that (zoo/models/attention.py `_rolling`).

Batch 1: the kept prefix differs between rows, and each model has one cache index.

Glossary: V vocab, k draft tokens per round, N new tokens.
"""

import jax
import jax.numpy as jnp

from zoo.families import decoder
from zoo.infer import generate


def rewind(cache, index):
  """The cache with every layer's cache index set to `index` (the slots after it are
  overwritten before any query can see them)."""
  def set_index(path, leaf):
    return jnp.full_like(leaf, index) if path[-1].key == 'cache_index' else leaf
  return jax.tree_util.tree_map_with_path(set_index, cache)


def _probs(logits_V, sampling):
  return jax.nn.softmax(generate.filter_logits(logits_V[None], **sampling)[0])


def accept(p_logits_KV, q_logits_KV, drafts_K, rng, sampling):
  """The target's logits at the k + 1 verified positions (p_logits_KV: [k + 1, V]), the
  draft's at the first k (q_logits_KV: [k, V]) and its k tokens -> (accepted count a, the
  token that follows them)."""
  k = drafts_K.shape[0]
  if sampling['temperature'] == 0:
    matches_K = drafts_K == jnp.argmax(p_logits_KV[:k], axis=-1)
    a = jnp.sum(jnp.cumprod(matches_K.astype(jnp.int32)))
    return a, jnp.argmax(p_logits_KV[a]).astype(jnp.int32)
  uniform_rng, draw_rng = jax.random.split(rng)
  p_KV = jax.vmap(lambda x: _probs(x, sampling))(p_logits_KV)
  q_KV = jax.vmap(lambda x: _probs(x, sampling))(q_logits_KV)
  rows_K = jnp.arange(k)
  p_K, q_K = p_KV[rows_K, drafts_K], q_KV[rows_K, drafts_K]
  kept_K = jax.random.uniform(uniform_rng, (k,)) * q_K < p_K  # u < p / q, q > 0 drawn
  a = jnp.sum(jnp.cumprod(kept_K.astype(jnp.int32)))
  q_next_V = jnp.concatenate([q_KV, jnp.zeros_like(q_KV[:1])])[a]  # none after k accepted
  residual_V = jnp.maximum(p_KV[a] - q_next_V, 0.0)
  residual_V = jnp.where(jnp.sum(residual_V) > 0, residual_V, p_KV[a])
  token = jax.random.categorical(draw_rng, jnp.log(residual_V))
  return a, token.astype(jnp.int32)


def make(target, draft, max_new_tokens, draft_tokens, sampling, eos_id, pad_id):
  """-> fn(target variables, draft variables, ids [1, P], segment ids [1, P], rng) ->
  (new tokens [1, N], {'rounds', 'accepted'}: target passes after the prefill, draft tokens
  kept), to jit. Both models decoders on one vocabulary; sampling: generate.sample's keyword
  arguments."""
  k = draft_tokens
  target, target_layout = generate.decoding_model(target)
  draft, draft_layout = generate.decoding_model(draft)
  room = max_new_tokens + k + 1  # a round may write k + 1 slots past the last kept token
  draw = lambda logits_V, rng: generate.sample(logits_V[None], rng, **sampling)[0]

  def fn(target_variables, draft_variables, ids, segments, rng):
    P = ids.shape[1]
    p_logits, p_cache, p_feed = decoder.prefill(
        target, target_layout(target_variables), ids, segments, room, k)
    _, q_cache, q_feed = decoder.prefill(
        draft, draft_layout(draft_variables), ids, segments, room, k)
    first = draw(p_logits[0], jax.random.fold_in(rng, 0))
    out_N = jnp.full((max_new_tokens + k + 1,), pad_id, jnp.int32).at[0].set(first)

    def propose(n, pending, q_cache, rng):
      """k draft tokens after `pending` (new-token slot n - 1), each drawn from the draft's
      logits; the k-th is fed too, so the draft's cache holds every kept token."""
      def one(carry, j):
        token, cache = carry
        logits_1LV, cache = q_feed(token[None, None], n - 1 + j, cache)
        logits_V = logits_1LV[0, 0]
        return (draw(logits_V, jax.random.fold_in(rng, j)), cache), (token, logits_V)
      (_, q_cache), (fed_K1, q_logits_K1V) = jax.lax.scan(
          one, (pending, q_cache), jnp.arange(k + 1))
      return fed_K1[1:], q_logits_K1V[:k], q_cache

    def cond(carry):
      n, _, _, _, _, done, _, _ = carry
      return (n < max_new_tokens) & ~done

    def body(carry):
      n, pending, p_cache, q_cache, out_N, _, rounds, accepted = carry
      round_rng = jax.random.fold_in(rng, rounds + 1)
      draft_rng, accept_rng = jax.random.split(round_rng)
      drafts_K, q_logits_KV, q_cache = propose(n, pending, q_cache, draft_rng)
      fed = jnp.concatenate([pending[None], drafts_K])[None]
      p_logits_1KV, p_cache = p_feed(fed, n - 1, p_cache)
      a, token = accept(p_logits_1KV[0], q_logits_KV, drafts_K, accept_rng, sampling)
      slots_K1 = jnp.arange(k + 1)
      new_K1 = jnp.where(slots_K1 < a, jnp.concatenate([drafts_K, drafts_K[:1]]), token)
      new_K1 = jnp.where(slots_K1 <= a, new_K1, pad_id)
      out_N = jax.lax.dynamic_update_slice(out_N, new_K1, (n,))
      done = jnp.any((new_K1 == eos_id) & (slots_K1 <= a))
      kept = P + n + a  # the next round writes its pending token here
      return (n + a + 1, token, rewind(p_cache, kept), rewind(q_cache, kept), out_N, done,
              rounds + 1, accepted + a)

    carry = (jnp.int32(1), first, p_cache, q_cache, out_N, first == eos_id, jnp.int32(0),
             jnp.int32(0))
    _, _, _, _, out_N, _, rounds, accepted = jax.lax.while_loop(cond, body, carry)
    out_N = out_N[:max_new_tokens]
    after_eos = jnp.cumsum(out_N == eos_id) - (out_N == eos_id) > 0
    return jnp.where(after_eos, pad_id, out_N)[None], {'rounds': rounds, 'accepted': accepted}
  return fn
