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

Drafts: another decoder on the same vocabulary (ModelDraft), or the target's own multi-token
prediction module (MTPDraft, model.mtp.depth 1: one token a round). Batch 1: the kept prefix
differs between rows, and each model has one cache index.

Glossary: B batch, L length, P prompt length, S key length, D d_model, V vocab, K draft
tokens per round, N new tokens.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.families import decoder
from zoo.families import decoding
from zoo.infer import generate
from zoo.models import head as head_lib
from zoo.models import layers
from zoo.models import mtp as mtp_lib
from zoo.models import transformer


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


class ModelDraft:
  """Another decoder drafts: k tokens a round, one cached step each; after the round its
  cache index goes back past the kept tokens."""

  def __init__(self, model, k, room, draw):
    self.model, self.layout = generate.decoding_model(model)
    self.k, self.room, self.draw = k, room, draw

  def start(self, variables, ids, segments, first, rng, prefilled):
    del first, rng, prefilled
    _, cache, self.feed = decoder.prefill(self.model, self.layout(variables), ids, segments,
                                          self.room, self.k)
    return cache

  def propose(self, cache, n, pending, rng):
    """k draft tokens after `pending` (new-token slot n - 1), each drawn from the draft's
    logits; the k-th is fed too, so that the cache holds every token a round can keep."""
    def one(carry, j):
      token, cache = carry
      logits_1LV, cache = self.feed(token[None, None], n - 1 + j, cache)
      logits_V = logits_1LV[0, 0]
      return (self.draw(logits_V, jax.random.fold_in(rng, j)), cache), (token, logits_V)
    (_, cache), (fed_K1, q_logits_K1V) = jax.lax.scan(
        one, (pending, cache), jnp.arange(self.k + 1))
    return fed_K1[1:], q_logits_K1V[:self.k], cache

  def advance(self, cache, kept, a, fed_K1, token, hidden_K1D, rng):
    del a, fed_K1, token, hidden_K1D, rng
    return rewind(cache, kept)


class MTPDraft:
  """The target's own multi-token prediction module drafts (DeepSeek-V3's use of it): one
  token a round. Its cache slot j is position j (the target's final-norm output there and
  token j + 1); after each round it writes the round's last two kept positions (the one
  before rewritten alike when nothing was accepted) and drafts the next token from the
  last, so it never holds a rejected token."""

  def __init__(self, target, draw):
    m = self.config = target.config
    self.draw = draw
    self.module = mtp_lib.MTP(m, transformer.Block)
    self.embed = layers.Embed(m.vocab_size, m.d_model, dtype=jnp.dtype(m.dtype),
                              param_dtype=jnp.dtype(m.param_dtype))  # the target's table

  def _run(self, variables, cache, hidden_BLD, ids_BL, at):
    """Slots at, at + 1, ... (len ids_BL) written -> (the last slot's logits [V], cache)."""
    segments_BS, positions_BS = self.kv
    take = lambda a: jax.lax.dynamic_slice_in_dim(a, at + 1, ids_BL.shape[1], axis=1)
    params = nn.unbox(variables['params'])
    embed = lambda ids: self.embed.apply({'params': params['token_embed']}, ids)
    state = {k: v['mtp'] for k, v in variables.items() if k != 'params' and 'mtp' in v}
    hidden, mutated = self.module.apply(
        {'params': params['mtp'], **state, 'cache': rewind(cache, at)}, hidden_BLD, embed,
        ids_BL, take(segments_BS), take(positions_BS), segments_BS, 1, mutable=['cache'])
    logits_V = head_lib.project(self.config, params, hidden[0][:, -1:])[0, 0]
    return logits_V, mutated['cache']

  def start(self, variables, ids, segments, first, rng, prefilled):
    """The prompt's slots 0..P-1 (the last with the first new token) -> the state: (cache,
    the drafted token, its logits, the final-norm output of the last kept position)."""
    hidden_BPD, self.kv = prefilled[3], prefilled[4]
    self.variables = variables  # the target's: closed over by advance, in the same trace
    next_ids = jnp.concatenate([ids[:, 1:], first[None, None]], axis=1)
    shaped = lambda i: jnp.zeros((*i.shape, self.config.d_model), jnp.dtype(self.config.dtype))
    empty = decoding.empty_cache(self.module, (hidden_BPD, shaped, next_ids, segments,
                                               segments, self.kv[0], 1))
    logits_V, cache = self._run(variables, empty, hidden_BPD, next_ids, 0)
    return (cache, self.draw(logits_V, rng), logits_V, hidden_BPD[0, -1])

  def propose(self, state, n, pending, rng):
    del n, pending, rng
    _, draft, logits_V, _ = state
    return draft[None], logits_V[None], state

  def advance(self, state, kept, a, fed_K1, token, hidden_K1D, rng):
    """kept: the new pending token's position q' = q + a + 1; writes slots q' - 2, q' - 1."""
    cache, _, _, h_prev_D = state
    hidden_3D = jnp.concatenate([h_prev_D[None], hidden_K1D])  # positions q - 1, q, q + 1
    pair_2D = jax.lax.dynamic_slice_in_dim(hidden_3D, a, 2)
    ids_12 = jnp.stack([fed_K1[a], token])[None]
    logits_V, cache = self._run(self.variables, cache, pair_2D[None], ids_12, kept - 2)
    return (cache, self.draw(logits_V, rng), logits_V, pair_2D[1])


def make(target, draft, max_new_tokens, draft_tokens, sampling, eos_id, pad_id):
  """-> fn(target variables, draft variables, ids [1, P], segment ids [1, P], rng) ->
  (new tokens [1, N], {'rounds', 'accepted'}: target passes after the prefill, draft tokens
  kept), to jit. draft: another decoder on the same vocabulary (its variables passed), or
  'mtp': the target's prediction module (model.mtp.depth 1; draft_tokens 1; the draft
  variables unused). sampling: generate.sample's keyword arguments."""
  k = draft_tokens
  target, target_layout = generate.decoding_model(target)
  room = max_new_tokens + k + 1  # a round may write k + 1 slots past the last kept token
  draw = lambda logits_V, rng: generate.sample(logits_V[None], rng, **sampling)[0]
  own = draft == 'mtp'
  if own and (target.config.mtp.depth != 1 or k != 1):
    raise ValueError(f'the prediction module drafts one token a round from model.mtp.depth=1; '
                     f'got depth {target.config.mtp.depth}, {k} draft tokens')
  drafter = MTPDraft(target, draw) if own else ModelDraft(draft, k, room, draw)

  def fn(target_variables, draft_variables, ids, segments, rng):
    P = ids.shape[1]
    target_variables = target_layout(target_variables)
    started = decoder.prefill(target, target_variables, ids, segments, room, k, hidden=own)
    p_logits, p_cache, p_feed = started[:3]
    first = draw(p_logits[0], jax.random.fold_in(rng, 0))
    q_state = drafter.start(target_variables if own else draft_variables, ids, segments,
                            first, jax.random.fold_in(rng, max_new_tokens + 1), started)
    out_N = jnp.full((max_new_tokens + k + 1,), pad_id, jnp.int32).at[0].set(first)

    def cond(carry):
      n, _, _, _, _, done, _, _ = carry
      return (n < max_new_tokens) & ~done

    def body(carry):
      n, pending, p_cache, q_state, out_N, _, rounds, accepted = carry
      round_rng = jax.random.fold_in(rng, rounds + 1)
      draft_rng, accept_rng, next_rng = jax.random.split(round_rng, 3)
      drafts_K, q_logits_KV, q_state = drafter.propose(q_state, n, pending, draft_rng)
      fed_K1 = jnp.concatenate([pending[None], drafts_K])
      verified = p_feed(fed_K1[None], n - 1, p_cache)
      p_logits_1KV, p_cache = verified[:2]
      a, token = accept(p_logits_1KV[0], q_logits_KV, drafts_K, accept_rng, sampling)
      slots_K1 = jnp.arange(k + 1)
      new_K1 = jnp.where(slots_K1 < a, jnp.concatenate([drafts_K, drafts_K[:1]]), token)
      new_K1 = jnp.where(slots_K1 <= a, new_K1, pad_id)
      out_N = jax.lax.dynamic_update_slice(out_N, new_K1, (n,))
      done = jnp.any((new_K1 == eos_id) & (slots_K1 <= a))
      kept = P + n + a  # the next round writes its pending token here
      q_state = drafter.advance(q_state, kept, a, fed_K1, token,
                                verified[2][0] if own else None, next_rng)
      return (n + a + 1, token, rewind(p_cache, kept), q_state, out_N, done, rounds + 1,
              accepted + a)

    carry = (jnp.int32(1), first, p_cache, q_state, out_N, first == eos_id, jnp.int32(0),
             jnp.int32(0))
    _, _, _, _, out_N, _, rounds, accepted = jax.lax.while_loop(cond, body, carry)
    out_N = out_N[:max_new_tokens]
    after_eos = jnp.cumsum(out_N == eos_id) - (out_N == eos_id) > 0
    return jnp.where(after_eos, pad_id, out_N)[None], {'rounds': rounds, 'accepted': accepted}
  return fn
