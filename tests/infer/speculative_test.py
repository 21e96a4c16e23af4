"""Speculative decoding: greedy output is plain greedy's token for token (the target as its
own draft, a perturbed copy, a smaller model; full caches and a local layer's rolling ring),
and sampled tokens follow the target's distribution, computed exactly by enumeration."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo import families
from zoo.errors import ConfigError
from zoo.families import decoder
from zoo.families import decoding
from zoo.infer import draft as draft_lib
from zoo.infer import generate
from zoo.infer import speculative
from zoo.models import head as head_lib
from zoo.train import run_config

PROMPT = [[2, 10, 11, 12, 13]]
NEW = 24


def _decoder(seed=0, window=0, mtp=0, sinks=False, chunk=0, **overrides):
  config = helpers.tiny_config(position='rope', **overrides)
  config.model.attention.window = window
  config.model.attention.sinks = sinks
  config.model.attention.chunk = chunk
  config.model.mtp.depth = mtp
  model = families.build(config.model)
  params = jax.jit(model.init)(jax.random.PRNGKey(seed),
                               families.example_batch(config.model, 1, 16))
  return model, {'params': params['params']}


# window 4: the local layers' cache is a ring, and attention has sinks (gpt-oss), whose
# logits start away from 0 so a sink rolled back wrongly would show; chunk 4: Llama 4's
# chunked layers keep a ring of a chunk
@pytest.mark.parametrize('window, chunk', [(0, 0), (4, 0), (0, 4)], ids=['full', 'window',
                                                                         'chunk'])
def test_speculative_greedy_is_plain_greedy_for_any_draft(window, chunk):
  target, variables = _decoder(window=window, sinks=bool(window), chunk=chunk)
  if window:
    variables = jax.tree_util.tree_map_with_path(
        lambda path, x: x + 1.5 if 'sinks' in jax.tree_util.keystr(path) else x, variables)
  noisy = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.PRNGKey(1), x.shape),
                       variables)
  small = _decoder(seed=3, window=window, sinks=bool(window), chunk=chunk, num_layers=1)
  ids, segments = decoding.left_pad(PROMPT, pad_id=0)
  rng = jax.random.PRNGKey(0)
  plain = np.asarray(jax.jit(generate.make(target, NEW, {'temperature': 0.0}, -1, 0))(
      variables, ids, segments, rng))
  drafts = {'itself': (target, variables), 'perturbed': (target, noisy), 'smaller': small}
  cases = ([('perturbed', 3)] if window or chunk else  # the ring: rollbacks of up to 3 slots
           [('itself', 3), ('perturbed', 3), ('smaller', 1)])
  for name, k in cases:
    draft, draft_variables = drafts[name]
    fn = jax.jit(speculative.make(target, draft, NEW, k, {'temperature': 0.0}, -1, 0))
    tokens, stats = fn(variables, draft_variables, ids, segments, rng)
    np.testing.assert_array_equal(tokens, plain, err_msg=f'{name}, k={k}')
    rounds, accepted = int(stats['rounds']), int(stats['accepted'])
    assert NEW <= 1 + rounds + accepted <= NEW + k  # the first token, then a + 1 a round
    if name == 'itself':  # every proposal kept
      assert accepted == rounds * k
    if name == 'perturbed' and k == 3:  # some kept, some not: rollbacks happened
      assert 0 < accepted < rounds * k


def test_speculative_greedy_through_sparse_attention_is_plain_greedy():
  # DeepSeek-V3.2's indexer keeps 3 keys a query: a rolled-back draft must leave the
  # indexer's cached keys as a cache never written
  mla = dict(config_lib.base().model.mla, kv_lora_rank=16, q_lora_rank=12,
             qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, index_heads=2,
             index_head_dim=8, index_top_k=3, index_block=4)
  target, variables = _decoder(mla=mla)
  noisy = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.PRNGKey(1), x.shape),
                       variables)
  ids, segments = decoding.left_pad(PROMPT, pad_id=0)
  rng = jax.random.PRNGKey(0)
  plain = np.asarray(jax.jit(generate.make(target, NEW, {'temperature': 0.0}, -1, 0))(
      variables, ids, segments, rng))
  fn = jax.jit(speculative.make(target, target, NEW, 3, {'temperature': 0.0}, -1, 0))
  tokens, stats = fn(variables, noisy, ids, segments, rng)
  np.testing.assert_array_equal(tokens, plain)
  assert 0 < int(stats['accepted']) < int(stats['rounds']) * 3  # rollbacks happened


def test_the_prediction_module_drafts_from_a_cache_equal_to_the_whole_text(window=4):
  # window 4: its block's cache and the target's are rings
  # greedy with the target's own MTP module as draft gives plain greedy's tokens; and the
  # drafter, taken through rounds that keep the draft or not, drafts each time the logits
  # the module gives run over the whole text (its cache never holds a rejected token)
  config = helpers.tiny_config(position='rope')
  config.model.attention.window = window
  config.model.mtp.depth = 1
  target = families.build(config.model)
  variables = {'params': nn.unbox(jax.jit(target.init)(
      jax.random.PRNGKey(0), families.example_batch(config.model, 1, 16))['params'])}
  ids, segments = decoding.left_pad(PROMPT, pad_id=0)
  rng = jax.random.PRNGKey(0)
  plain = np.asarray(jax.jit(generate.make(target, NEW, {'temperature': 0.0}, -1, 0))(
      variables, ids, segments, rng))[0]
  tokens, _ = jax.jit(speculative.make(target, 'mtp', NEW, 1, {'temperature': 0.0}, -1, 0))(
      variables, None, ids, segments, rng)
  np.testing.assert_array_equal(np.asarray(tokens)[0], plain)

  text = np.asarray(PROMPT[0] + list(plain))
  _, sown = target.apply(variables, {'inputs': jnp.asarray(text[None])}, mutable=['mtp'])
  want = np.asarray(head_lib.project(config.model, variables['params'],
                                     sown['mtp']['depth_1'][0]))[0]  # j: token j + 2's
  P, room = len(PROMPT[0]), NEW + 2
  draw = lambda logits, rng: jnp.argmax(logits).astype(jnp.int32)
  drafter = speculative.MTPDraft(target, draw)
  started = decoder.prefill(target, variables, ids, segments, room, 1, hidden=True)
  state = drafter.start(variables, ids, segments, jnp.int32(text[P]), rng, started)
  np.testing.assert_allclose(state[2], want[P - 1], atol=1e-5)
  feed, whole = started[2], jnp.asarray(text)

  @jax.jit
  def round_(state, cache, q, a):  # the target verifies [text[q], text[q + 1]], keeps a
    fed = jax.lax.dynamic_slice_in_dim(whole, q, 2)
    _, cache, hidden = feed(fed[None], q - P, cache)
    kept = q + a + 1
    return drafter.advance(state, kept, a, fed, whole[kept], hidden[0], rng), \
        speculative.rewind(cache, kept)

  cache, q = started[1], P  # q: the pending token's position
  for a in (0, 1, 1, 0, 0, 1, 0, 1, 1, 1):  # kept the draft or not, whatever it was
    state, cache = round_(state, cache, q, a)
    q += a + 1
    np.testing.assert_allclose(state[2], want[q - 1], atol=1e-5, err_msg=f'q {q}, a {a}')


def test_speculative_greedy_stops_at_eos_like_plain_greedy():
  target, variables = _decoder()
  ids, segments = decoding.left_pad(PROMPT, pad_id=0)
  rng = jax.random.PRNGKey(0)
  plain = list(np.asarray(jax.jit(generate.make(target, NEW, {'temperature': 0.0}, -1, 0))(
      variables, ids, segments, rng))[0])
  eos = plain[5]
  stop = plain.index(eos) + 1
  tokens, _ = jax.jit(speculative.make(target, target, NEW, 3, {'temperature': 0.0}, eos, 0))(
      variables, variables, ids, segments, rng)
  assert list(np.asarray(tokens)[0]) == plain[:stop] + [0] * (NEW - stop)


@pytest.mark.parametrize('own', [False, True])  # another model drafts; the MTP module does
def test_sampled_tokens_follow_the_targets_distribution(own):
  # a 16-token vocabulary: the exact marginals of the 2nd and 3rd new tokens, by enumerating
  # every first one (and pair), against 4000 speculative samples
  vocab, temperature, k, runs = 16, 0.8, 1 if own else 2, 4000
  target, variables = _decoder(vocab_size=vocab, mtp=int(own))
  draft, draft_variables = ('mtp', None) if own else _decoder(seed=5, vocab_size=vocab,
                                                               num_layers=1)
  prompt = [2, 10, 11]
  forward = jax.jit(lambda ids: jax.nn.softmax(
      target.apply(variables, {'inputs': ids})[:, -1] / temperature, axis=-1))
  p1 = np.asarray(forward(jnp.asarray([prompt])))[0]
  firsts = np.asarray([prompt + [t] for t in range(vocab)])
  p2_given_1 = np.asarray(forward(jnp.asarray(firsts)))
  pairs = np.asarray([prompt + [a, b] for a in range(vocab) for b in range(vocab)])
  p3_given_12 = np.asarray(forward(jnp.asarray(pairs))).reshape(vocab, vocab, vocab)
  joint12 = p1[:, None] * p2_given_1
  want2, want3 = joint12.sum(0), np.einsum('ab,abc->c', joint12, p3_given_12)

  ids, segments = decoding.left_pad([prompt], pad_id=0)
  fn = speculative.make(target, draft, 3, k, {'temperature': temperature}, -1, 0)
  sample = jax.jit(jax.vmap(lambda rng: fn(variables, draft_variables, ids, segments, rng)))
  tokens, stats = sample(jax.random.split(jax.random.PRNGKey(7), runs))
  tokens = np.asarray(tokens)[:, 0]
  accepted = np.asarray(stats['accepted'])
  assert 0.05 < accepted.mean() < k - 0.05  # the draft is right sometimes, not always
  for position, want in ((1, want2), (2, want3)):
    got = np.bincount(tokens[:, position], minlength=vocab) / runs
    # total variation: ~0.03 from sampling alone; the draft's own distribution is ~0.4 away
    assert 0.5 * np.abs(got - want).sum() < 0.06, (position, got, want)


@pytest.mark.parametrize('overrides, message', [
    (['generate.draft_tokens=0'], r'generate.draft_tokens=0 must be positive'),
    (['generate.num_beams=2'], r'generate.num_beams=2 with speculative decoding .* set '
     r'generate.num_beams=1 or turn the draft off'),
    (['generate.repetition_penalty=1.2'], r'generate.repetition_penalty=1.2 with speculative'),
])
def test_a_speculative_setup_it_cannot_run_names_the_field(overrides, message):
  with pytest.raises(ConfigError, match=message):
    helpers.load(helpers.config_file('gpt_shakespeare'),
                    ['generate.draft_workdir=/draft', *overrides])


def test_the_prediction_module_drafts_only_where_the_model_has_one_and_alone():
  for overrides in (['model.mtp.depth=0'], ['model.mtp.depth=2'],
                    ['model.mtp.depth=1', 'generate.draft_workdir=/draft']):
    with pytest.raises(ConfigError, match=r'generate.draft_mtp=True drafts with the model\'s '
                       r'one prediction module \(model.mtp.depth=1'):
      helpers.load(helpers.config_file('gpt_shakespeare'),
                      ['generate.draft_mtp=True', *overrides])


def test_a_draft_of_another_vocabulary_or_tokenizer_is_refused_before_compiling(tmp_path):
  def run(name, tokenizer, *overrides):
    workdir = tmp_path / name
    workdir.mkdir()
    (tmp_path / f'{name}.model').write_bytes(tokenizer)
    config = helpers.load(helpers.config_file('gpt_shakespeare'), [
        f'data.tokenizer.path={tmp_path / name}.model',
        f'generate.draft_workdir={tmp_path / "draft"}', *overrides])
    run_config.write(config, str(workdir))
    return config, str(workdir)
  config, target = run('target', b'pieces')
  with pytest.raises(ConfigError, match=r'draft_workdir=.*draft: no config.json there'):
    draft_lib.load_config(config, target)
  run('draft', b'other pieces')
  with pytest.raises(ConfigError, match=r'its tokenizer \(.*draft.model\) is not this run'):
    draft_lib.load_config(config, target)
  with pytest.raises(ConfigError, match=r'continues one prompt at a time \(2 --prompt given'):
    draft_lib.check(config, ['a', 'b'])
  (tmp_path / 'draft.model').write_bytes(b'pieces')
  assert draft_lib.load_config(config, target).model.vocab_size == 512
  wider, _ = run('wider', b'pieces', 'model.vocab_size=1024')
  run_config.write(wider, str(tmp_path / 'draft'))
  with pytest.raises(ConfigError, match=r'model.vocab_size=1024; the draft must be a decoder '
                     r"over this model's 512 ids"):
    draft_lib.load_config(config, target)
