"""Generation: prefill the prompt into a KV cache, then decode one token at a time.

How a family starts (its prompt layout, the prefill, the step that feeds a token back)
is the family's `start_generation` (zoo/families): decoder-only prompts are left-padded so
every row's next token goes to the same cache slot; T5 encodes once and decodes from id 0.
Each step's logits first get the penalties for tokens seen so far (`penalize`: CTRL's
repetition penalty, a frequency penalty; the prompt counts as seen where the family says
the prompt is the text being continued, `PENALTIES_COUNT_PROMPT`); then sampling:
temperature (0 = greedy), then top-k, top-p (nucleus) and min-p filtering; or beam search
(zoo/infer/beam.py) over the same cache, its rows (and counts) reordered with the beams.
Before `min_new_tokens` new tokens EOS cannot come (transformers' min_new_tokens). A row
stops at EOS; its later tokens are padding. The whole loop is one jitted
`lax.while_loop`. Stop strings are text: zoo/infer/run.py cuts each completion at the first.

Glossary: B batch, P prompt length, N new tokens, V vocab, W beams, R = B x W beam rows.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections

from zoo import families
from zoo.infer import beam
from zoo.models import transformer


def filter_logits(logits_BV, temperature, top_k=0, top_p=1.0, min_p=0.0):
  """Scaled logits with everything outside the top-k, outside the top-p mass and below
  min_p x the likeliest token's probability set to -inf (the likeliest token always stays).
  top_k=0, top_p=1 and min_p=0 turn each filter off."""
  logits_BV = logits_BV.astype(jnp.float32) / temperature
  if top_k:
    kth_B1 = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
    logits_BV = jnp.where(logits_BV < kth_B1, -jnp.inf, logits_BV)
  if top_p < 1.0:
    sorted_BV = jnp.sort(logits_BV, axis=-1)[:, ::-1]
    probs_BV = jax.nn.softmax(sorted_BV, axis=-1)
    before_BV = jnp.cumsum(probs_BV, axis=-1) - probs_BV  # mass of the likelier tokens
    kept_BV = before_BV < top_p
    cutoff_B1 = jnp.min(jnp.where(kept_BV, sorted_BV, jnp.inf), axis=-1, keepdims=True)
    logits_BV = jnp.where(logits_BV < cutoff_B1, -jnp.inf, logits_BV)
  if min_p > 0:  # p < min_p * p_max  <=>  logit < max logit + log(min_p)
    floor_B1 = jnp.max(logits_BV, axis=-1, keepdims=True) + jnp.log(min_p)
    logits_BV = jnp.where(logits_BV < floor_B1, -jnp.inf, logits_BV)
  return logits_BV


def penalize(logits_BV, counts_BV, repetition=1.0, frequency=0.0):
  """Logits of the tokens seen so far (counts_BV: how often each was seen) made less likely:
  CTRL's repetition penalty (Keskar et al. 2019) divides a seen token's positive logit by
  `repetition` and multiplies a negative one by it; the frequency penalty subtracts
  `frequency` x the token's count. repetition=1 and frequency=0 change nothing."""
  logits_BV = logits_BV.astype(jnp.float32)
  repeated_BV = jnp.where(logits_BV > 0, logits_BV / repetition, logits_BV * repetition)
  logits_BV = jnp.where(counts_BV > 0, repeated_BV, logits_BV)
  return logits_BV - frequency * counts_BV.astype(jnp.float32)


def sample(logits_BV, rng, temperature, top_k=0, top_p=1.0, min_p=0.0):
  """-> int32 [B]: argmax when temperature is 0, else a draw from the filtered softmax."""
  if temperature == 0:
    return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
  filtered_BV = filter_logits(logits_BV, temperature, top_k, top_p, min_p)
  return jax.random.categorical(rng, filtered_BV, axis=-1).astype(jnp.int32)


def count(counts_BV, token_B, seen_B):
  """counts_BV with each row's token counted where seen_B."""
  rows_B = jnp.arange(token_B.shape[0])
  return counts_BV.at[rows_B, token_B].add(seen_B.astype(counts_BV.dtype))


def prompt_counts(ids_BP, segments_BP, vocab_size):
  """[B, V] int32: how often each token occurs in each row's prompt (padding not counted)."""
  rows_B1 = jnp.arange(ids_BP.shape[0])[:, None]
  zeros_BV = jnp.zeros((ids_BP.shape[0], vocab_size), jnp.int32)
  return zeros_BV.at[rows_B1, ids_BP].add((segments_BP > 0).astype(jnp.int32))


def _decode_loop(step_fn, logits_BV, cache, counts_BV, rng, max_new_tokens, sampling,
                 penalties, eos_id, pad_id, min_new_tokens):
  """Penalize, sample, record, feed back, until every row has hit EOS or N tokens are out.
  penalties: penalize's keyword arguments, or None for none (counts_BV then None)."""
  B = logits_BV.shape[0]

  def cond(carry):
    i, _, _, _, _, done_B = carry
    return (i < max_new_tokens) & ~jnp.all(done_B)

  def body(carry):
    i, logits_BV, cache, counts_BV, out_BN, done_B = carry
    if penalties:
      logits_BV = penalize(logits_BV, counts_BV, **penalties)
    logits_BV = beam.forbid_eos(logits_BV, eos_id, i, min_new_tokens)
    token_B = sample(logits_BV, jax.random.fold_in(rng, i), **sampling)
    token_B = jnp.where(done_B, pad_id, token_B)
    out_BN = out_BN.at[:, i].set(token_B)
    if penalties:
      counts_BV = count(counts_BV, token_B, ~done_B)
    logits_BV, cache = step_fn(token_B, i, cache)
    return i + 1, logits_BV, cache, counts_BV, out_BN, done_B | (token_B == eos_id)

  out_BN = jnp.full((B, max_new_tokens), pad_id, jnp.int32)
  carry = (jnp.int32(0), logits_BV, cache, counts_BV, out_BN, jnp.zeros((B,), jnp.bool_))
  return jax.lax.while_loop(cond, body, carry)[4]


def reorder_cache(cache, rows):
  """The cache of the given batch rows (the batch axis sits before the dims each leaf has
  per row: keys [G, K, S], values [G, S, K], a Gated DeltaNet layer's state [H, K, J] and
  segment [], its convolution's inputs [W - 1, H, K] and their segments [W - 1]; the layer
  scan stacks layers in front). The cross-attention's input keys and values stay: the beams
  of a row share its encoder input."""
  def pick(path, leaf):
    name = path[-1].key
    per_row = (3 if name in ('cached_key', 'cached_value', 'state') or
               name.endswith('_conv_inputs') else
               1 if name.endswith('_conv_segments') else 0 if name == 'state_segment'
               else None)
    if per_row is None:
      return leaf  # cache_index: the same for every row
    return jnp.take(leaf, rows, axis=leaf.ndim - 1 - per_row)
  return jax.tree_util.tree_map_with_path(pick, cache)


def decode_rules(rules):
  """The logical-axis rules to trace decoding under: the training rules without the residual
  stream's `activation_embed` constraint. With it, [B, 1, D] steps on a data x fsdp x tensor
  mesh (batch over two axes, D over tensor) came out wrong from XLA's SPMD partitioner
  (jax 0.10.2, CPU; tests/infer/generate_test.py keeps the check); the parameters' own
  shardings still place every matmul."""
  return tuple(rule for rule in rules if rule[0] != 'activation_embed')


def decoding_model(model):
  """-> (the model to decode with, fn(variables) -> its variables). A layer scan unrolled
  whole (model.scan_unroll at least every stack's length: the CPU setting) decodes with the
  layers unscanned, each with its own parameters and cache, sliced out once before the
  token loop: inside it XLA:CPU copies every layer's slice of the stacked parameters and
  caches on every token (half of a token's time at the bench shape). Otherwise (TPU/GPU:
  compile time flat in depth) the scan decodes as it trains."""
  m = model.config
  family = families.get(m)
  per_unit = m.moe.every if m.moe.num_experts else 1  # layers per scanned unit
  if not m.scan_layers or m.scan_unroll < max(m[f] // per_unit for f in family.LAYER_FIELDS):
    return model, lambda variables: variables
  unscanned = ml_collections.ConfigDict(m.as_configdict())
  unscanned.scan_layers = False
  decoding = family.build(ml_collections.FrozenConfigDict(unscanned), model.adapters)
  return decoding, lambda variables: {
      k: transformer.unstack_layers(v) for k, v in variables.items()}


def make(model, max_new_tokens, sampling, eos_id, pad_id, num_beams=1, length_alpha=0.0,
         penalties=None, beam_rules='zoo', min_new_tokens=0):
  """-> fn(variables, ids, segment ids, rng) -> new tokens [B, N], to jit (one trace: the
  decode loop is a lax.while_loop); the model's family says how decoding starts.
  sampling: sample's keyword arguments; penalties: penalize's ({'repetition': 1.2,
  'frequency': 0.0}), None or at their neutral values for none. num_beams > 1: beam search
  (sampling unused, penalties applied to every beam; beam_rules: zoo/infer/beam.py's
  rules). min_new_tokens: EOS cannot be among the first that many new tokens."""
  family = families.get(model.config)
  model, layout = decoding_model(model)
  start = functools.partial(family.start_generation, model, max_new_tokens=max_new_tokens)
  penalties = dict(penalties or {})
  if penalties.get('repetition', 1.0) == 1.0 and not penalties.get('frequency', 0.0):
    penalties = None

  def counts(ids, segments):
    """What the penalties count as seen before the first new token: the prompt, where the
    family continues it; nothing where it is another sequence (T5's encoder input)."""
    if not family.PENALTIES_COUNT_PROMPT:
      segments = jnp.zeros_like(segments)
    return prompt_counts(jnp.asarray(ids), jnp.asarray(segments), model.config.vocab_size)

  def fn(variables, ids, segments, rng):
    variables = layout(variables)
    if num_beams == 1:
      logits_BV, cache, step = start(variables, ids, segments)
      seen_BV = counts(ids, segments) if penalties else None
      return _decode_loop(step, logits_BV, cache, seen_BV, rng, max_new_tokens,
                          dict(sampling), penalties, eos_id, pad_id, min_new_tokens)
    repeat = lambda a: jnp.repeat(jnp.asarray(a), num_beams, axis=0)  # rows b*W .. b*W+W-1
    logits_RV, cache, step = start(variables, repeat(ids), repeat(segments))
    adjust = None
    if penalties:
      adjust = (counts(repeat(ids), repeat(segments)),
                functools.partial(penalize, **penalties), count)
    return beam.search(step, logits_RV, cache, reorder_cache, num_beams, max_new_tokens,
                       eos_id, pad_id, length_alpha, adjust, beam_rules, min_new_tokens)[0]
  return fn
