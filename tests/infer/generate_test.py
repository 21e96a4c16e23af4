"""Generation against decoding without a cache: the cached logits equal the full forward
pass's (left-padded prompts, every position scheme, windows, parallel blocks, experts, T5),
greedy generation equals greedy decoding by full forward passes, rows stop at EOS, and
top-k / top-p filtering matches numpy."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from tests import helpers
from zoo import families
from zoo.families import decoding
from zoo import presets
from zoo import sharding
from zoo.infer import generate
from zoo.data import tokenizer as tokenizer_lib
from zoo.infer import run

PROMPTS = [[2, 10, 11, 12, 13, 14], [2, 20, 21]]  # the second is left-padded by 3
TEACHER = [30, 31, 32, 33]  # tokens fed after the prompts


def _decoder(moe=None, window=0, **overrides):
  config = helpers.tiny_config(**overrides)
  config.model.attention.window = window
  if moe:
    config.model.moe.update(moe)
  model = families.build(config.model)
  params = model.init(jax.random.PRNGKey(0), families.example_batch(config.model, 1, 16))
  return model, {'params': params['params']}


def _full_logits(model, variables, tokens):
  """One unpadded row through the model without a cache -> logits [L, V]."""
  return np.asarray(model.apply(variables, {'inputs': jnp.asarray([tokens])})[0])


@pytest.mark.parametrize('overrides', [
    dict(position='rope'),  # GQA: 4 heads share 2 kv heads
    dict(position='learned'),
    dict(position='sinusoidal', num_kv_heads=1),
    dict(position='alibi'),
    dict(position='rope', window=3),
    dict(position='rope', block='parallel'),
    dict(position='rope', moe=dict(num_experts=4, top_k=2)),
], ids=['rope_gqa', 'learned', 'sinusoidal_mqa', 'alibi', 'window', 'parallel', 'moe'])
def test_cached_decoding_gives_the_full_forward_logits(overrides):
  model, variables = _decoder(**overrides)
  ids, segments = decoding.left_pad(PROMPTS, pad_id=0)
  B, P = ids.shape
  S = P + len(TEACHER)
  kv_segments = np.concatenate([segments, np.ones((B, len(TEACHER)), np.int32)], 1)
  kv_positions = np.maximum(np.arange(S)[None] - (P - segments.sum(1))[:, None], 0)
  batch = lambda start, tokens: {
      'inputs': jnp.asarray(tokens), 'segment_ids': kv_segments[:, start:start + tokens.shape[1]],
      'positions': kv_positions[:, start:start + tokens.shape[1]],
      'kv_segment_ids': kv_segments, 'kv_positions': kv_positions}
  logits, cache = model.apply(variables, batch(0, ids), mutable=['cache'])
  steps = [np.asarray(logits[:, -1])]
  for i, token in enumerate(TEACHER[:-1]):
    logits, cache = model.apply({**variables, **cache}, batch(P + i, np.full((B, 1), token)),
                                mutable=['cache'])
    steps.append(np.asarray(logits[:, -1]))
  for row, prompt in enumerate(PROMPTS):
    want = _full_logits(model, variables, prompt + TEACHER[:-1])[len(prompt) - 1:]
    np.testing.assert_allclose(np.stack([s[row] for s in steps]), want, atol=2e-5, rtol=2e-5)


def _greedy_without_cache(model, variables, prompt, steps):
  """Full forward passes over a fixed buffer (causal: the zeros after a position do not
  change its logits), one per new token."""
  forward = jax.jit(lambda ids: model.apply(variables, {'inputs': ids})[0])
  tokens = np.asarray([prompt + [0] * steps])
  for i in range(len(prompt), len(prompt) + steps):
    tokens[0, i] = int(np.argmax(forward(tokens)[i - 1]))
  return list(tokens[0, len(prompt):])


def test_greedy_generation_equals_greedy_decoding_without_a_cache_and_stops_at_eos():
  model, variables = _decoder(position='rope')
  ids, segments = decoding.left_pad(PROMPTS, pad_id=0)
  want = [_greedy_without_cache(model, variables, p, 6) for p in PROMPTS]
  run = lambda eos: np.asarray(jax.jit(generate.make(
      model, 6, {'temperature': 0.0}, eos, 0))(variables, ids, segments,
                                                          jax.random.PRNGKey(0)))
  np.testing.assert_array_equal(run(eos=3), want)  # token 3 never comes: all 6 steps
  # the first token row 0 emits after step 1 for the first time ends it: then padding;
  # row 1 goes on until it emits it (or to the end)
  first = next(k for k in range(1, 6) if want[0][k] not in want[0][:k])
  eos = want[0][first]
  got = run(eos=eos)
  assert list(got[0]) == want[0][:first + 1] + [0] * (5 - first)
  stop = want[1].index(eos) + 1 if eos in want[1] else 6
  assert list(got[1]) == want[1][:stop] + [0] * (6 - stop)


def test_t5_greedy_generation_equals_greedy_decoding_without_a_cache():
  config = helpers.tiny_config()
  presets.t5(config, version='1.1')
  config.model.update(vocab_size=64, d_model=32, num_encoder_layers=2, num_decoder_layers=2,
                      num_heads=4, head_dim=8, mlp_dim=64, dtype='float32', dropout_rate=0.0)
  model = families.build(config.model)
  variables = {'params': model.init(jax.random.PRNGKey(1), families.example_batch(
      config.model, 1, 8))['params']}
  inputs = np.array([[10, 11, 12, 13, 3], [20, 21, 3, 0, 0]], np.int32)  # right-padded
  segments = (inputs > 0).astype(np.int32)
  got = np.asarray(jax.jit(generate.make(model, 5, {'temperature': 0.0}, 3,
                                        0))(variables, inputs, segments, jax.random.PRNGKey(0)))
  forward = jax.jit(lambda batch: model.apply(variables, batch)[0])
  for row in range(2):  # full forward passes over a fixed (causal) decoder buffer
    decoded = np.zeros((1, 6), np.int32)  # starts from id 0
    for i in range(5):
      batch = {'encoder_inputs': inputs[row:row + 1], 'encoder_segment_ids': segments[row:row + 1],
               'decoder_inputs': decoded}
      decoded[0, i + 1] = int(np.argmax(forward(batch)[i]))
    want = [int(t) for t in decoded[0, 1:]]
    if 3 in want:
      want = want[:want.index(3) + 1] + [0] * (4 - want.index(3))
    assert list(got[row]) == want


def test_top_k_and_top_p_keep_the_likeliest_tokens_as_numpy_does():
  logits = np.log(np.array([[0.5, 0.1, 0.25, 0.15], [0.05, 0.05, 0.6, 0.3]], np.float32))
  kept = lambda **kw: np.isfinite(np.asarray(generate.filter_logits(jnp.asarray(logits), 1.0,
                                                                   **kw)))
  np.testing.assert_array_equal(kept(top_k=2), [[1, 0, 1, 0], [0, 0, 1, 1]])
  # nucleus 0.7: row 0 needs 0.5 + 0.25 (0.75 >= 0.7); row 1 needs 0.6 + 0.3
  np.testing.assert_array_equal(kept(top_p=0.7), [[1, 0, 1, 0], [0, 0, 1, 1]])
  np.testing.assert_array_equal(kept(top_p=0.5), [[1, 0, 0, 0], [0, 0, 1, 0]])
  np.testing.assert_array_equal(kept(top_p=0.8), [[1, 0, 1, 1], [0, 0, 1, 1]])
  # temperature divides; draws with top_k=1 are the argmax whatever the key
  np.testing.assert_allclose(generate.filter_logits(jnp.asarray(logits), 2.0), logits / 2)
  for seed in range(3):
    draw = generate.sample(jnp.asarray(logits), jax.random.PRNGKey(seed), 1.5, top_k=1)
    np.testing.assert_array_equal(draw, [0, 2])


def test_ids_past_the_tokenizer_print_as_t5_sentinels_or_as_ids():
  class Letters(tokenizer_lib.Tokenizer):  # ids 0-9 are the letters a-j; no sentinel pieces
    vocab_size, sentinels = 10, ()
    decode = staticmethod(lambda ids: ''.join(chr(97 + i) for i in ids))
  data = lambda objective: ml_collections.ConfigDict({'objective': objective,
                                                      'num_sentinels': 10})
  assert run._text(Letters(), [0, 1, 19, 2, 18], data('span_corruption')) == (
      'ab<extra_id_0>c<extra_id_1>')
  assert run._text(Letters(), [0, 15, 1], data('causal_lm')) == 'a<id 15>b'


def test_cached_decoding_on_a_data_fsdp_tensor_mesh_gives_the_unsharded_logits():
  config = helpers.tiny_config(position='rope')
  config.mesh.update(data=2, fsdp=2, tensor=2)
  model, boxed = _decoder(position='rope')
  variables = nn.unbox(boxed)
  ids, segments = decoding.left_pad(PROMPTS, pad_id=0)

  def decode(variables):  # prefill, then two fed-back tokens: [3, B, V]
    logits_BV, cache, step = families.decoder.start_generation(model, variables, ids, segments, 4)
    steps = [logits_BV]
    for i, token in enumerate(TEACHER[:2]):
      logits_BV, cache = step(jnp.full((len(PROMPTS),), token), i, cache)
      steps.append(logits_BV)
    return jnp.stack(steps)

  want = jax.jit(decode)(variables)
  mesh, rules = sharding.make_mesh(config.mesh), sharding.rules(config)
  specs = nn.get_partition_spec(boxed)
  placed = jax.tree.map(lambda s, x: sharding.fit(s, x.shape),
                        sharding.logical_to_shardings(specs, mesh, rules), variables)
  assert placed['params']['layers']['attention']['query']['kernel'].spec[2] == 'tensor'
  with jax.set_mesh(mesh), nn.logical_axis_rules(generate.decode_rules(rules)):
    got = jax.jit(decode)(jax.device_put(variables, placed))
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
  # why decode_rules exists: with the training rules the steps come out wrong (if this
  # starts failing, the partitioner is fixed and decode_rules can go); a new function
  # object, as jit's trace cache does not see the rules
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    wrong = jax.jit(lambda v: decode(v))(jax.device_put(variables, placed))
  assert not np.allclose(wrong, want, atol=2e-5, rtol=2e-5)
