"""Generation: prefill the prompt into a KV cache, then decode one token at a time.

How a family starts (its prompt layout, the prefill, the step that feeds a token back)
is the family's `start_generation` (zoo/families): decoder-only prompts are left-padded so
every row's next token goes to the same cache slot; T5 encodes once and decodes from id 0.
Sampling: temperature (0 = greedy), then top-k and top-p (nucleus) filtering; or beam
search (zoo/infer/beam.py) over the same cache, its rows reordered with the beams. A row
stops at EOS; its later tokens are padding. The whole loop is one jitted `lax.while_loop`.

Glossary: B batch, N new tokens, V vocab, W beams, R = B x W beam rows.
"""

import functools

import jax
import jax.numpy as jnp

from zoo import families
from zoo.infer import beam


def filter_logits(logits_BV, temperature, top_k=0, top_p=1.0):
  """Scaled logits with everything outside the top-k and the top-p mass set to -inf (the
  most likely token always stays)."""
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
  return logits_BV


def sample(logits_BV, rng, temperature, top_k=0, top_p=1.0):
  """-> int32 [B]: argmax when temperature is 0, else a draw from the filtered softmax."""
  if temperature == 0:
    return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
  filtered_BV = filter_logits(logits_BV, temperature, top_k, top_p)
  return jax.random.categorical(rng, filtered_BV, axis=-1).astype(jnp.int32)


def _decode_loop(step_fn, logits_BV, cache, rng, max_new_tokens, sampling, eos_id, pad_id):
  """Sample, record, feed back, until every row has hit EOS or N tokens are out."""
  B = logits_BV.shape[0]

  def cond(carry):
    i, _, _, _, done_B = carry
    return (i < max_new_tokens) & ~jnp.all(done_B)

  def body(carry):
    i, logits_BV, cache, out_BN, done_B = carry
    token_B = sample(logits_BV, jax.random.fold_in(rng, i), **sampling)
    token_B = jnp.where(done_B, pad_id, token_B)
    out_BN = out_BN.at[:, i].set(token_B)
    logits_BV, cache = step_fn(token_B, i, cache)
    return i + 1, logits_BV, cache, out_BN, done_B | (token_B == eos_id)

  out_BN = jnp.full((B, max_new_tokens), pad_id, jnp.int32)
  carry = (jnp.int32(0), logits_BV, cache, out_BN, jnp.zeros((B,), jnp.bool_))
  return jax.lax.while_loop(cond, body, carry)[3]


def reorder_cache(cache, rows):
  """The KV cache of the given batch rows (the batch axis sits before [S, G, K]; the layer
  scan stacks layers in front)."""
  def pick(path, leaf):
    if path[-1].key in ('cached_key', 'cached_value'):
      return jnp.take(leaf, rows, axis=leaf.ndim - 4)
    return leaf  # cache_index: the same for every row
  return jax.tree_util.tree_map_with_path(pick, cache)


def decode_rules(rules):
  """The logical-axis rules to trace decoding under: the training rules without the residual
  stream's `activation_embed` constraint. With it, [B, 1, D] steps on a data x fsdp x tensor
  mesh (batch over two axes, D over tensor) came out wrong from XLA's SPMD partitioner
  (jax 0.10.2, CPU; tests/infer/generate_test.py keeps the check); the parameters' own
  shardings still place every matmul."""
  return tuple(rule for rule in rules if rule[0] != 'activation_embed')


def make(model, max_new_tokens, sampling, eos_id, pad_id, num_beams=1, length_alpha=0.0):
  """-> fn(variables, ids, segment ids, rng) -> new tokens [B, N], to jit (one trace: the
  decode loop is a lax.while_loop); the model's family says how decoding starts.
  num_beams > 1: beam search (sampling unused)."""
  start = functools.partial(families.get(model.config).start_generation, model,
                            max_new_tokens=max_new_tokens)

  def fn(variables, ids, segments, rng):
    if num_beams == 1:
      logits_BV, cache, step = start(variables, ids, segments)
      return _decode_loop(step, logits_BV, cache, rng, max_new_tokens, dict(sampling), eos_id,
                          pad_id)
    repeat = lambda a: jnp.repeat(jnp.asarray(a), num_beams, axis=0)  # rows b*W .. b*W+W-1
    logits_RV, cache, step = start(variables, repeat(ids), repeat(segments))
    return beam.search(step, logits_RV, cache, reorder_cache, num_beams, max_new_tokens,
                       eos_id, pad_id, length_alpha)[0]
  return fn
