"""Generation: prefill the prompt into a KV cache, then decode one token at a time.

Decoder-only: prompts are left-padded to the longest, so every row's next token goes to the
same cache slot; padding has segment id 0 (never attended) and positions count from each
row's first real token. Encoder-decoder: the encoder runs once, the decoder starts from
id 0 (as in training) with its own cache; cross-attention reads the encoder output.
Sampling: temperature (0 = greedy), then top-k and top-p (nucleus) filtering; or beam
search (zoo/infer/beam.py) over the same cache, its rows reordered with the beams. A row
stops at EOS; its later tokens are padding. The whole loop is one jitted `lax.while_loop`.

Glossary: B batch, P prompt length, N new tokens, S cache slots, V vocab, W beams.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from zoo.infer import beam
from zoo.models import encoder_decoder


def left_pad(prompts, pad_id):
  """Token lists -> (ids [B, P], segment ids [B, P]: 1 for tokens, 0 for padding)."""
  length = max(len(p) for p in prompts)
  ids = np.full((len(prompts), length), pad_id, np.int32)
  segments = np.zeros((len(prompts), length), np.int32)
  for row, prompt in enumerate(prompts):
    ids[row, length - len(prompt):] = prompt
    segments[row, length - len(prompt):] = 1
  return ids, segments


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


def _empty_cache(model, args, method=None):
  """Zeros shaped like the 'cache' collection a call with `args` creates."""
  shapes = jax.eval_shape(
      lambda: model.init(jax.random.PRNGKey(0), *args, method=method)['cache'])
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


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


def decoder_start(model, variables, ids_BP, segments_BP, max_new_tokens):
  """Decoder-only: left-padded prompts prefilled -> (first logits [B, V], cache, step)."""
  B, P = ids_BP.shape
  S = P + max_new_tokens
  kv_segments_BS = jnp.concatenate([segments_BP, jnp.ones((B, max_new_tokens), jnp.int32)], 1)
  pads_B1 = P - jnp.sum(segments_BP > 0, axis=1, keepdims=True)
  kv_positions_BS = jnp.maximum(jnp.arange(S)[None] - pads_B1, 0).astype(jnp.int32)
  at = lambda a, start, length: jax.lax.dynamic_slice_in_dim(a, start, length, axis=1)

  def batch_at(ids_BL, start):
    return {'inputs': ids_BL, 'segment_ids': at(kv_segments_BS, start, ids_BL.shape[1]),
            'positions': at(kv_positions_BS, start, ids_BL.shape[1]),
            'kv_segment_ids': kv_segments_BS, 'kv_positions': kv_positions_BS}

  def run(cache, ids_BL, start):
    logits_BLV, mutated = model.apply({**variables, 'cache': cache}, batch_at(ids_BL, start),
                                      mutable=['cache'])
    return logits_BLV[:, -1], mutated['cache']

  logits_BV, cache = run(_empty_cache(model, (batch_at(ids_BP, 0),)), ids_BP, 0)
  return logits_BV, cache, lambda token_B, i, cache: run(cache, token_B[:, None], P + i)


def encoder_decoder_start(model, variables, ids_BS, segments_BS, max_new_tokens):
  """Encoder-decoder: encoder inputs (padding anywhere, segment 0) encoded, the start token
  decoded -> (first logits [B, V], cache, step)."""
  B, N = ids_BS.shape[0], max_new_tokens
  encoder_batch = {'encoder_inputs': ids_BS, 'encoder_segment_ids': segments_BS}
  encoded_BSD = model.apply(variables, encoder_batch, method=encoder_decoder.EncoderDecoder.encode)
  # cache slots: the start token, then each new token fed back (the last one unused)
  kv_segments_BS = jnp.ones((B, N + 1), jnp.int32)
  kv_positions_BS = jnp.broadcast_to(jnp.arange(N + 1, dtype=jnp.int32), (B, N + 1))

  def batch_at(token_B, i):
    return {**encoder_batch, 'decoder_inputs': token_B[:, None],
            'decoder_segment_ids': jnp.ones((B, 1), jnp.int32),
            'decoder_positions': jnp.full((B, 1), i, jnp.int32),
            'decoder_kv_segment_ids': kv_segments_BS, 'decoder_kv_positions': kv_positions_BS}

  def run(cache, token_B, i):
    logits_BLV, mutated = model.apply({**variables, 'cache': cache}, encoded_BSD,
                                      batch_at(token_B, i),
                                      method=encoder_decoder.EncoderDecoder.decode,
                                      mutable=['cache'])
    return logits_BLV[:, -1], mutated['cache']

  start_B = jnp.zeros((B,), jnp.int32)  # decoding starts from id 0, as in training
  cache = _empty_cache(model, (encoded_BSD, batch_at(start_B, 0)),
                       method=encoder_decoder.EncoderDecoder.decode)
  logits_BV, cache = run(cache, start_B, 0)
  return logits_BV, cache, lambda token_B, i, cache: run(cache, token_B, i + 1)


STARTS = {'decoder': decoder_start, 'encoder_decoder': encoder_decoder_start}


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


def make(model, family, max_new_tokens, sampling, eos_id, pad_id, num_beams=1,
         length_alpha=0.0):
  """-> fn(variables, ids, segment ids, rng) -> new tokens [B, N], to jit (one trace: the
  decode loop is a lax.while_loop). num_beams > 1: beam search (sampling unused)."""
  start = functools.partial(STARTS[family], model, max_new_tokens=max_new_tokens)

  def fn(variables, ids, segments, rng):
    if num_beams == 1:
      logits_BV, cache, step = start(variables, ids, segments)
      return _decode_loop(step, logits_BV, cache, rng, max_new_tokens, dict(sampling), eos_id,
                          pad_id)
    repeat = lambda a: jnp.repeat(jnp.asarray(a), num_beams, axis=0)  # rows b*W .. b*W+W-1
    logits_XV, cache, step = start(variables, repeat(ids), repeat(segments))
    return beam.search(step, logits_XV, cache, reorder_cache, num_beams, max_new_tokens,
                       eos_id, pad_id, length_alpha)[0]
  return fn
