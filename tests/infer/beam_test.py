"""Beam search: exact against brute force where the beams cover every sequence, a hand case
greedy gets wrong, and on a model the reported score is the full forward pass's log
probability of the returned tokens (so the cache follows its beams); by transformers' rules,
transformers' own beams (tests/fixtures/hf/llama/beams.json)."""

import itertools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import families
from zoo.convert import hf
from zoo.families import decoding
from zoo.infer import beam
from zoo.infer import generate

EOS, PAD = 3, 0


def _markov(first_BV, table_VV, num_beams, steps, alpha):
  """Beam search where the next token's log probabilities depend on the last token only."""
  first = jnp.repeat(jnp.asarray(first_BV), num_beams, axis=0)
  step = lambda token_X, i, cache: (jnp.asarray(table_VV)[token_X], cache)
  return beam.search(step, first, jnp.zeros(()), lambda cache, rows: cache, num_beams, steps,
                     EOS, PAD, alpha)


def _brute_force(first_V, table_VV, steps, alpha):
  """The best sequence that ends at EOS within `steps` tokens, by score."""
  log_softmax = lambda x: x - np.log(np.sum(np.exp(x)))
  best = (-np.inf, None)
  for length in range(1, steps + 1):
    for body in itertools.product(range(len(first_V)), repeat=length - 1):
      if EOS in body:
        continue
      tokens = [*body, EOS]
      logp, logits = 0.0, first_V
      for token in tokens:
        logp += log_softmax(logits)[token]
        logits = table_VV[token]
      best = max(best, (logp / beam.length_penalty(length, alpha), tokens))
  return best


@pytest.mark.parametrize('alpha', [0.0, 1.0])
def test_beams_covering_every_sequence_find_the_brute_force_best(alpha):
  rng = np.random.default_rng(0)
  first, table = rng.normal(size=(2, 5)) * 2, rng.normal(size=(5, 5)) * 2
  tokens, scores = _markov(first, table, num_beams=25, steps=3, alpha=alpha)
  for row in range(2):
    want_score, want_tokens = _brute_force(first[row], table, 3, alpha)
    np.testing.assert_allclose(scores[row], want_score, rtol=1e-5)
    assert list(tokens[row]) == want_tokens + [PAD] * (3 - len(want_tokens))


def test_two_beams_find_the_sequence_greedy_misses():
  # token 1 is likelier first (0.6 vs 0.4), but after it EOS has 0.3; after token 2, 0.9:
  # 1 EOS scores 0.18, 2 EOS 0.36
  probs = np.full((4, 4), 1e-9)
  probs[1, [EOS, 1]] = 0.3, 0.7 - 3e-9
  probs[2, [EOS, 2]] = 0.9, 0.1 - 3e-9
  first = np.log(np.array([[1e-9, 0.6, 0.4 - 2e-9, 1e-9]]))
  one, one_score = _markov(first, np.log(probs), num_beams=1, steps=2, alpha=0.0)
  two, two_score = _markov(first, np.log(probs), num_beams=2, steps=2, alpha=0.0)
  assert list(one[0]) == [1, EOS] and list(two[0]) == [2, EOS]
  np.testing.assert_allclose(np.exp([one_score[0], two_score[0]]), [0.18, 0.36], rtol=1e-5)


def test_the_beam_score_is_the_full_forward_log_probability_of_its_tokens():
  """On a Gated DeltaNet layer and an attention layer ('DG'): the beams reorder the
  keys and values, and the recurrent state and convolution inputs, with the rows
  (generate.reorder_cache)."""
  config = helpers.tiny_config(position='rope')
  config.model.attention.pattern = 'DG'
  config.model.delta.update(key_heads=2, value_heads=4, key_dim=8, value_dim=8, chunk=4)
  model = families.build(config.model)
  variables = {'params': jax.jit(model.init)(jax.random.PRNGKey(0), families.example_batch(
      config.model, 1, 16))['params']}
  prompts = [[2, 10, 11, 12], [2, 20]]
  ids, segments = decoding.left_pad(prompts, PAD)
  W, N, alpha = 3, 5, 0.6
  start = families.decoder.start_generation(model, variables, jnp.repeat(ids, W, 0),
                                 jnp.repeat(segments, W, 0), N)
  tokens, scores = jax.jit(lambda: beam.search(
      start[2], start[0], start[1], generate.reorder_cache, W, N, eos_id=-1, pad_id=PAD,
      alpha=alpha))()
  forward = jax.jit(lambda ids: model.apply(variables, {'inputs': ids})[0])
  for row, prompt in enumerate(prompts):
    sequence = prompt + [int(t) for t in tokens[row]]
    logits = forward(jnp.asarray([sequence]))
    log_probs = jax.nn.log_softmax(logits[len(prompt) - 1:-1])
    logp = float(jnp.sum(jnp.take_along_axis(log_probs, tokens[row][:, None], axis=-1)))
    np.testing.assert_allclose(scores[row], logp / beam.length_penalty(N, alpha), rtol=1e-5)
  # one beam is greedy decoding
  greedy = jax.jit(generate.make(model, N, {'temperature': 0.0}, -1, PAD))(
      variables, ids, segments, jax.random.PRNGKey(0))
  def one_beam_search(ids, segments):
    start = families.decoder.start_generation(model, variables, ids, segments, N)
    return beam.search(start[2], start[0], start[1], generate.reorder_cache, 1, N, -1, PAD)[0]
  one_beam = jax.jit(one_beam_search)(ids, segments)
  np.testing.assert_array_equal(one_beam, greedy)


def _llama_fixture_beams(rules):
  """The zoo's beam search on the llama fixture for each case of llama/beams.json ->
  [(case, zoo tokens up to EOS per prompt)]."""
  path = os.path.join(helpers.REPO, 'tests', 'fixtures', 'hf', 'llama')
  with open(os.path.join(path, 'beams.json'), encoding='utf-8') as f:
    ref = json.load(f)
  config, params = hf.load(path)
  model = families.build(config.model)
  prompts = np.asarray(ref['prompts'], np.int32)
  out, compiled = [], {}
  for case in ref['cases']:
    eos = case['eos_id']
    key = (case['num_beams'], case['min_new_tokens'])  # EOS and the penalty: traced, shared
    if key not in compiled:
      compiled[key] = jax.jit(lambda v, ids, segments, rng, eos_id, alpha, key=key: (
          generate.make(model, ref['max_new_tokens'], {'temperature': 0.0}, eos_id, 0, key[0],
                        alpha, beam_rules=rules, min_new_tokens=key[1])(v, ids, segments, rng)))
    rows = np.asarray(compiled[key]({'params': params}, prompts, np.ones_like(prompts),
                                    jax.random.PRNGKey(0), eos, case['length_penalty']))
    out.append((case, [list(r[:list(r).index(eos) + 1]) if eos in r else list(r)
                       for r in rows]))
  return out


def test_beam_rules_transformers_give_transformers_beams_token_for_token():
  """min_new_tokens too, for beams and greedy: EOS only past it, as in transformers."""
  for case, tokens in _llama_fixture_beams('transformers'):
    assert tokens == case['tokens'], case
    assert all(case['eos_id'] not in row[:case['min_new_tokens']] for row in tokens)
