"""Generation against decoding without a cache: the cached logits equal the full forward
pass's (left-padded prompts, every position scheme, windows, parallel blocks, experts, T5),
greedy generation equals greedy decoding by full forward passes (with the repetition and
frequency penalties too), rows stop at EOS, T5 projects its encoder output into the cache
once, and top-k / top-p / min-p filtering and the penalties match numpy."""

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


def _decoder(moe=None, window=0, attention=None, mla=None, delta=None, **overrides):
  config = helpers.tiny_config(**overrides)
  config.model.attention.window = window
  config.model.attention.update(attention or {})
  config.model.delta.update(delta or {})
  config.model.mla.update(mla or {})
  if moe:
    config.model.moe.update(moe)
  model = families.build(config.model)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), families.example_batch(config.model, 1, 16))
  return model, {'params': params['params']}


@pytest.mark.parametrize('overrides', [
    dict(position='rope'),  # GQA: 4 heads share 2 kv heads
    dict(position='learned'),
    dict(position='sinusoidal', num_kv_heads=1),
    dict(position='alibi'),
    dict(position='rope', window=3),
    dict(position='rope', block='parallel'),
    dict(position='rope', moe=dict(num_experts=4, top_k=2)),
    # Gemma: local layers (a ring of 3) and global ones, a pattern and its tail, soft-caps,
    # sandwich norms, QK-norm
    dict(position='rope', window=3, num_layers=4, sandwich_norm=True, qk_norm=True,
         final_softcap=5.0, rope_local_theta=100.0,
         attention=dict(pattern='LLG', softcap=3.0, query_scale=6.0)),
    # DeepSeek's latent attention: the cache holds the latent and the rotary key
    dict(position='rope', mla=dict(kv_lora_rank=16, q_lora_rank=12, qk_nope_head_dim=8,
                                   qk_rope_head_dim=4, v_head_dim=6)),
    # DeepSeek-V3.2's sparse attention: the indexer's keys cached beside the latent, 3 kept
    dict(position='rope', mla=dict(kv_lora_rank=16, q_lora_rank=12, qk_nope_head_dim=8,
                                   qk_rope_head_dim=4, v_head_dim=6, index_heads=2,
                                   index_head_dim=8, index_top_k=3, index_block=4)),
    # gpt-oss and Llama 4 in one stack: sinks (in a local layer's ring and the global ones'
    # caches), biased projections, the clamped SwiGLU; a chunked layer's ring over each
    # row's own chunks (the second prompt is left-padded), a NoPE layer with temperature
    # tuning, the QK L2 norm
    dict(position='rope', window=3, num_layers=4, activation='clamped_swiglu',
         swiglu_limit=0.5, attention=dict(pattern='LGCN', chunk=3, sinks=True, use_bias=True,
                                          nope_scale=0.5, nope_floor=2, qk_l2_norm=True)),
    # Qwen3-Next: Gated DeltaNet layers (their state and convolution inputs in the cache, the
    # prefill in chunks of 4, the padded prompt's state reset at its first real token) and
    # gated attention with half of each head rotated; a pattern and its tail, experts beside
    # a gated shared expert
    dict(position='rope', num_layers=4, qk_norm=True, rope_fraction=0.5,
         attention=dict(pattern='DDG', output_gate=True),
         delta=dict(key_heads=2, value_heads=4, key_dim=8, value_dim=8, chunk=4),
         moe=dict(num_experts=4, top_k=2, num_shared_experts=1, shared_gate=True)),
], ids=['rope_gqa', 'learned', 'sinusoidal_mqa', 'alibi', 'window', 'parallel', 'moe',
        'gemma_pattern', 'mla', 'dsa', 'gpt_oss_llama4', 'qwen3_next'])
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
  decode = jax.jit(lambda variables, batch: model.apply(variables, batch, mutable=['cache']))
  logits, cache = decode(variables, batch(0, ids))
  steps = [np.asarray(logits[:, -1])]
  for i, token in enumerate(TEACHER[:-1]):  # one compile for the steps
    logits, cache = decode({**variables, **cache}, batch(P + i, np.full((B, 1), token)))
    steps.append(np.asarray(logits[:, -1]))
  forward = jax.jit(model.apply)
  for row, prompt in enumerate(PROMPTS):
    tokens = prompt + TEACHER[:-1]
    want = np.asarray(forward(variables, {'inputs': jnp.asarray([tokens])})[0])[len(prompt) - 1:]
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


def test_a_bfloat16_decoder_generates_a_batch_on_a_cpu_as_each_row_alone():
  """XLA:CPU fails a batched decode step's bfloat16 attention scores at run time
  (zoo/platform.py cpu_dot_operands): two rows generate together, each as it does alone."""
  model, variables = _decoder(position='rope', dtype='bfloat16')
  fn = jax.jit(generate.make(model, 6, {'temperature': 0.0}, eos_id=-1, pad_id=0))
  ids, segments = decoding.left_pad(PROMPTS, pad_id=0)
  both = np.asarray(fn(variables, ids, segments, jax.random.PRNGKey(0)))
  for row, prompt in enumerate(PROMPTS):
    alone = np.asarray(fn(variables, np.array([prompt], np.int32),
                          np.ones((1, len(prompt)), np.int32), jax.random.PRNGKey(0)))
    np.testing.assert_array_equal(both[row], alone[0])


T5_INPUTS = np.array([[10, 11, 12, 13, 3], [20, 21, 3, 0, 0]], np.int32)  # right-padded


def _t5(kind='t5'):
  """A tiny T5 v1.1, or T5Gemma: local layers (the decoder's a ring of 2 slots, the
  encoder's two-sided window of 1) and global ones, soft-caps, sandwich norms, two tables."""
  config = helpers.tiny_config()
  if kind == 't5':
    presets.t5(config, version='1.1')
  else:
    presets.t5gemma(config)
    config.model.attention.update(pattern='LG', window=2, softcap=3.0, query_scale=6.0)
    config.model.final_softcap = 5.0
  config.model.update(vocab_size=64, d_model=32, num_encoder_layers=2, num_decoder_layers=2,
                      num_heads=4, head_dim=8, mlp_dim=64, dtype='float32', dropout_rate=0.0)
  model = families.build(config.model)
  variables = {'params': jax.jit(model.init)(jax.random.PRNGKey(1), families.example_batch(
      config.model, 1, 8))['params']}
  return model, variables


def _t5_greedy_without_cache(model, variables, steps, penalties=None):
  """Full forward passes over a fixed (causal) decoder buffer, from id 0; penalties count
  the decoded tokens only (the prompt is the encoder's input)."""
  segments = (T5_INPUTS > 0).astype(np.int32)
  forward = jax.jit(lambda batch: model.apply(variables, batch)[0])
  rows = []
  for row in range(len(T5_INPUTS)):
    decoded = np.zeros((1, steps + 1), np.int32)
    for i in range(steps):
      batch = {'encoder_inputs': T5_INPUTS[row:row + 1],
               'encoder_segment_ids': segments[row:row + 1], 'decoder_inputs': decoded}
      logits = np.asarray(forward(batch)[i], np.float64)
      if penalties:
        logits = _penalized(logits, np.bincount(decoded[0, 1:i + 1], minlength=logits.size),
                            **penalties)
      decoded[0, i + 1] = int(np.argmax(logits))
    rows.append([int(t) for t in decoded[0, 1:]])
  return rows


def _until_eos(tokens, eos):
  """The tokens up to the first EOS (kept), then padding, as generation returns them."""
  if eos not in tokens:
    return tokens
  end = tokens.index(eos) + 1
  return tokens[:end] + [0] * (len(tokens) - end)


@pytest.mark.parametrize('kind', ['t5', 't5gemma'])
def test_t5_greedy_generation_equals_greedy_decoding_without_a_cache(kind):
  model, variables = _t5(kind)
  segments = (T5_INPUTS > 0).astype(np.int32)
  got = np.asarray(jax.jit(generate.make(model, 5, {'temperature': 0.0}, 3, 0))(
      variables, T5_INPUTS, segments, jax.random.PRNGKey(0)))
  for row, want in enumerate(_t5_greedy_without_cache(model, variables, 5)):
    assert list(got[row]) == _until_eos(want, 3)


def test_t5_decoding_projects_the_encoder_output_once_into_the_cache():
  model, variables = _t5()
  segments = (T5_INPUTS > 0).astype(np.int32)
  _, cache, step = families.encoder_decoder.start_generation(model, variables, T5_INPUTS,
                                                             segments, 4)
  cross = cache['decoder']['layers']['cross_attention']
  assert cross['input_key'].shape == (2, 2, 5, 2, 8)  # [layers, B, S, G, K]: 2 kv heads
  token = jnp.array([5, 6])
  want, _ = step(token, 0, cache)  # the first new token goes to slot 1, after the start
  # the step reads the cached keys and values: an encoder output of zeros changes nothing
  batch = {'encoder_inputs': T5_INPUTS, 'encoder_segment_ids': segments,
           'decoder_inputs': token[:, None], 'decoder_segment_ids': jnp.ones((2, 1), jnp.int32),
           'decoder_positions': jnp.ones((2, 1), jnp.int32),
           'decoder_kv_segment_ids': jnp.ones((2, 5), jnp.int32),
           'decoder_kv_positions': jnp.broadcast_to(jnp.arange(5), (2, 5))}
  zeros = jnp.zeros((2, 5, 32))
  got, _ = model.apply({**variables, 'cache': cache}, zeros, batch,
                       method=type(model).decode, mutable=['cache'])
  np.testing.assert_allclose(got[:, -1], want, atol=1e-6)
  # without the cached entries the same call projects zeros and differs
  fresh = jax.tree.map(lambda x: x, cache)  # new dicts, the same arrays
  del fresh['decoder']['layers']['cross_attention']
  projected, _ = model.apply({**variables, 'cache': fresh}, zeros, batch,
                             method=type(model).decode, mutable=['cache'])
  assert not np.allclose(projected[:, -1], want, atol=1e-3)


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


def test_min_p_keeps_the_tokens_within_its_share_of_the_likeliest_as_numpy_does():
  probs = np.array([[0.5, 0.1, 0.25, 0.15], [0.05, 0.05, 0.6, 0.3]])
  logits = jnp.asarray(np.log(probs), jnp.float32)
  for min_p in (0.0, 0.1, 0.35, 0.6, 0.99):
    kept = np.isfinite(np.asarray(generate.filter_logits(logits, 1.0, min_p=min_p)))
    np.testing.assert_array_equal(kept, probs >= min_p * probs.max(-1, keepdims=True))
  # after the temperature: at 2.0 the probabilities flatten, so 0.5 of the top keeps more
  kept = np.isfinite(np.asarray(generate.filter_logits(logits, 2.0, min_p=0.5)))
  flat = probs ** 0.5
  np.testing.assert_array_equal(kept, flat >= 0.5 * flat.max(-1, keepdims=True))


def _penalized(logits, counts, repetition=1.0, frequency=0.0):
  """CTRL's repetition penalty and the frequency penalty, in float64 numpy."""
  seen = counts > 0
  logits = np.where(seen & (logits > 0), logits / repetition, logits)
  logits = np.where(seen & (logits < 0), logits * repetition, logits)
  return logits - frequency * counts


def test_penalize_divides_positive_multiplies_negative_and_subtracts_counts_by_hand():
  logits = jnp.array([[2.0, -1.0, 0.5, -0.2, 0.0]])
  counts = jnp.array([[1, 2, 0, 0, 3]])
  got = generate.penalize(logits, counts, repetition=2.0, frequency=0.5)
  np.testing.assert_allclose(got, [[2.0 / 2 - 0.5, -1.0 * 2 - 1.0, 0.5, -0.2, -1.5]])
  np.testing.assert_allclose(generate.penalize(logits, counts), logits)  # neutral values


def _greedy_penalized_without_cache(model, variables, prompt, steps, penalties):
  """Greedy full forward passes; the prompt and the new tokens count as seen."""
  forward = jax.jit(lambda ids: model.apply(variables, {'inputs': ids})[0])
  tokens = np.asarray([prompt + [0] * steps])
  for i in range(len(prompt), len(prompt) + steps):
    logits = np.asarray(forward(tokens)[i - 1], np.float64)
    counts = np.bincount(tokens[0, :i], minlength=logits.size)
    tokens[0, i] = int(np.argmax(_penalized(logits, counts, **penalties)))
  return list(tokens[0, len(prompt):])


def test_penalized_greedy_generation_equals_penalized_decoding_without_a_cache():
  model, variables = _decoder(position='rope')
  ids, segments = decoding.left_pad(PROMPTS, pad_id=0)
  penalties = {'repetition': 1.5, 'frequency': 0.2}
  want = [_greedy_penalized_without_cache(model, variables, p, 8, penalties) for p in PROMPTS]
  got = np.asarray(jax.jit(generate.make(model, 8, {'temperature': 0.0}, -1, 0,
                                         penalties=penalties))(
      variables, ids, segments, jax.random.PRNGKey(0)))
  np.testing.assert_array_equal(got, want)
  assert want != [_greedy_without_cache(model, variables, p, 8) for p in PROMPTS]
  # T5: only the decoded tokens count (its prompt is the encoder's input)
  t5, t5_variables = _t5()
  got = np.asarray(jax.jit(generate.make(t5, 6, {'temperature': 0.0}, -1, 0,
                                         penalties=penalties))(
      t5_variables, T5_INPUTS, (T5_INPUTS > 0).astype(np.int32), jax.random.PRNGKey(0)))
  want = _t5_greedy_without_cache(t5, t5_variables, 6, penalties)
  np.testing.assert_array_equal(got, want)
  assert want != _t5_greedy_without_cache(t5, t5_variables, 6)


def test_beam_search_penalizes_each_beam_by_the_tokens_it_has_seen():
  model, variables = _decoder(position='rope')
  ids, segments = decoding.left_pad(PROMPTS, pad_id=0)
  search = lambda penalties: np.asarray(jax.jit(generate.make(
      model, 8, {}, -1, 0, num_beams=3, penalties=penalties))(
          variables, ids, segments, jax.random.PRNGKey(0)))
  repeats = lambda rows: [len(r) - len(set(r)) for r in rows]
  assert max(repeats(search(None))) > 0  # left alone, the beams repeat tokens
  harsh = search({'repetition': 1e4, 'frequency': 1e3})
  assert repeats(harsh) == [0, 0]  # every beam's tokens differ from each other ...
  for prompt, row in zip(PROMPTS, harsh):  # ... and from its prompt's
    assert not set(prompt) & set(row)


def test_a_completion_is_cut_before_the_earliest_stop_string():
  assert run.cut_at_stop('abc\n\nxyz', ('yz', '\n\n')) == ('abc', '\n\n')
  assert run.cut_at_stop('abc', ('d',)) == ('abc', None)
  assert run.cut_at_stop('abc', ()) == ('abc', None)
  assert run.cut_at_stop('stop at once', ('stop',)) == ('', 'stop')


def test_ids_past_the_tokenizer_print_as_t5_sentinels_or_as_ids():
  class Letters(tokenizer_lib.Tokenizer):  # ids 0-9 are the letters a-j; no sentinel pieces
    vocab_size, sentinels = 10, ()
    decode = staticmethod(lambda ids: ''.join(chr(97 + i) for i in ids))
  data = lambda objective: ml_collections.ConfigDict({'objective': objective,
                                                      'num_sentinels': 10})
  assert run.text(Letters(), [0, 1, 19, 2, 18], data('span_corruption')) == (
      'ab<extra_id_0>c<extra_id_1>')
  assert run.text(Letters(), [0, 15, 1], data('causal_lm')) == 'a<id 15>b'


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


def _unrolled(model):
  """The same model with its layer scan unrolled whole (the CPU setting)."""
  m = ml_collections.ConfigDict(model.config.as_configdict())
  m.scan_unroll = max(m[f] for f in families.get(m).LAYER_FIELDS)
  return families.build(m)


@pytest.mark.parametrize('kind,beams', [('rope', 1), ('moe', 1), ('rope', 2), ('t5', 1)])
def test_a_whole_unrolled_scan_decodes_unscanned_to_the_scanned_tokens(kind, beams):
  if kind == 't5':
    model, variables = _t5()
    ids, segments = T5_INPUTS, (T5_INPUTS > 0).astype(np.int32)
  else:
    moe = dict(num_experts=4, top_k=2) if kind == 'moe' else None
    model, variables = _decoder(position='rope', moe=moe)
    ids, segments = decoding.left_pad(PROMPTS, pad_id=0)
  unrolled = _unrolled(model)
  assert generate.decoding_model(model)[0] is model  # scan_unroll 1: decodes scanned
  unscanned, layout = generate.decoding_model(unrolled)
  assert not unscanned.config.scan_layers
  # the variables laid out per layer are what the unscanned model initialises
  shapes = lambda tree: jax.tree.map(lambda a: a.shape, tree)
  init = jax.eval_shape(unscanned.init, jax.random.PRNGKey(0),
                        families.example_batch(unscanned.config, 1, 8))
  assert shapes(layout(variables)['params']) == shapes(init['params'])
  run = lambda m: np.asarray(jax.jit(generate.make(m, 5, {'temperature': 0.0}, -1, 0,
                                                   num_beams=beams))(
      variables, ids, segments, jax.random.PRNGKey(0)))
  np.testing.assert_array_equal(run(unrolled), run(model))


def test_a_local_layers_cache_holds_its_window_and_a_global_layers_every_slot():
  model, variables = _decoder(position='rope', window=3, num_layers=4,
                              attention=dict(pattern='LLG'))
  ids, segments = decoding.left_pad(PROMPTS, pad_id=0)
  _, cache, _ = families.get(model.config).start_generation(
      model, variables, jnp.asarray(ids), jnp.asarray(segments), max_new_tokens=5)
  S = ids.shape[1] + 5
  slots = lambda block: cache['layers'][block]['attention']['cached_key'].shape[-1]
  assert [slots(f'block_{j}') for j in range(3)] == [3, 3, S]
  assert cache['layers_tail_0']['attention']['cached_key'].shape[-1] == 3  # layer 4: local
