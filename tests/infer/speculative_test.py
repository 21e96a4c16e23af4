"""Speculative decoding: greedy output is plain greedy's token for token (the target as its
own draft, a perturbed copy, a smaller model; full caches and a local layer's rolling ring),
and sampled tokens follow the target's distribution, computed exactly by enumeration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo import families
from zoo.errors import ConfigError
from zoo.families import decoding
from zoo.infer import draft as draft_lib
from zoo.infer import generate
from zoo.infer import speculative
from zoo.train import run_config

PROMPT = [[2, 10, 11, 12, 13]]
NEW = 24


def _decoder(seed=0, window=0, **overrides):
  config = helpers.tiny_config(position='rope', **overrides)
  config.model.attention.window = window
  model = families.build(config.model)
  params = jax.jit(model.init)(jax.random.PRNGKey(seed),
                               families.example_batch(config.model, 1, 16))
  return model, {'params': params['params']}


@pytest.mark.parametrize('window', [0, 4])  # 4: the local layers' cache is a ring
def test_speculative_greedy_is_plain_greedy_for_any_draft(window):
  target, variables = _decoder(window=window)
  noisy = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.PRNGKey(1), x.shape),
                       variables)
  small = _decoder(seed=3, window=window, num_layers=1)
  ids, segments = decoding.left_pad(PROMPT, pad_id=0)
  rng = jax.random.PRNGKey(0)
  plain = np.asarray(jax.jit(generate.make(target, NEW, {'temperature': 0.0}, -1, 0))(
      variables, ids, segments, rng))
  for k in (1, 3):
    for name, (draft, draft_variables) in {'itself': (target, variables),
                                           'perturbed': (target, noisy),
                                           'smaller': small}.items():
      fn = jax.jit(speculative.make(target, draft, NEW, k, {'temperature': 0.0}, -1, 0))
      tokens, stats = fn(variables, draft_variables, ids, segments, rng)
      np.testing.assert_array_equal(tokens, plain, err_msg=f'{name}, k={k}')
      rounds, accepted = int(stats['rounds']), int(stats['accepted'])
      assert NEW <= 1 + rounds + accepted <= NEW + k  # the first token, then a + 1 a round
      if name == 'itself':  # every proposal kept
        assert accepted == rounds * k
      if name == 'perturbed' and k == 3:  # some kept, some not: rollbacks happened
        assert 0 < accepted < rounds * k


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


def test_sampled_tokens_follow_the_targets_distribution():
  # a 16-token vocabulary: the exact marginals of the 2nd and 3rd new tokens, by enumerating
  # every first one (and pair), against 4000 speculative samples with a different draft
  vocab, temperature, k, runs = 16, 0.8, 2, 4000
  target, variables = _decoder(vocab_size=vocab)
  draft, draft_variables = _decoder(seed=5, vocab_size=vocab, num_layers=1)
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
  assert 0.1 < accepted.mean() < 1.9  # the draft is right sometimes, not always
  for position, want in ((1, want2), (2, want3)):
    got = np.bincount(tokens[:, position], minlength=vocab) / runs
    # total variation: ~0.03 from sampling alone; the draft's own distribution is ~0.4 away
    assert 0.5 * np.abs(got - want).sum() < 0.06, (position, got, want)


@pytest.mark.parametrize('overrides, message', [
    (['generate.draft_tokens=0'], r'generate.draft_tokens=0 must be positive'),
    (['generate.num_beams=2'], r'generate.num_beams=2 with generate.draft_workdir: .* set '
     r'generate.num_beams=1'),
    (['generate.repetition_penalty=1.2'], r'generate.repetition_penalty=1.2 with generate'),
])
def test_a_speculative_setup_it_cannot_run_names_the_field(overrides, message):
  with pytest.raises(ConfigError, match=message):
    config_lib.load(helpers.config_file('gpt_shakespeare'),
                    ['generate.draft_workdir=/draft', *overrides])


def test_a_draft_of_another_vocabulary_or_tokenizer_is_refused_before_compiling(tmp_path):
  def run(name, tokenizer, *overrides):
    workdir = tmp_path / name
    workdir.mkdir()
    (tmp_path / f'{name}.model').write_bytes(tokenizer)
    config = config_lib.load(helpers.config_file('gpt_shakespeare'), [
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
