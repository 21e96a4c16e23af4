"""train.grpo.reward: loaded before anything compiles; a reward that raises or is not a
finite number stops the run naming the prompt's line, or skips its group, as the config
says; a reference of another vocabulary is refused before anything compiles."""

import math

import numpy as np
import pytest

from tests import helpers
from zoo.errors import ConfigError
from zoo.post import rewards
from zoo.train import run_config
from zoo.train import teacher as teacher_lib

WHERE = ['prompts/train.jsonl:3', 'prompts/train.jsonl:7']


def test_a_reward_that_cannot_be_loaded_names_the_field():
  with pytest.raises(ConfigError, match=r"train\.grpo\.reward='no_such_module:f': cannot "
                                         'import no_such_module'):
    rewards.load('no_such_module:f')
  with pytest.raises(ConfigError, match='has no function'):
    rewards.load('zoo.data.arithmetic:nope')
  assert rewards.load('zoo.data.arithmetic:reward')('3', {'answer': 3}) == 1.0


def _flaky(text, example):
  if text == 'boom':
    raise KeyError('answer')
  return {'nan': math.nan, 'yes': True}.get(text, float(len(text)))


@pytest.mark.parametrize('bad, why', [('boom', "raised KeyError: 'answer'"),
                                      ('nan', 'returned nan'),
                                      ('yes', 'returned True, not a number')])
def test_a_bad_reward_stops_naming_the_prompts_line(bad, why):
  texts = ['a', 'bb', 'ccc', bad]
  with pytest.raises(rewards.RewardError, match=rf'{why} on the prompt at '
                                                 r'prompts/train\.jsonl:7'):
    rewards.score(_flaky, 'm:f', texts, [{}] * 4, WHERE, 'error', 2)


def test_skip_leaves_the_bad_group_out():
  got, good = rewards.score(_flaky, 'm:f', ['a', 'bb', 'ccc', 'nan'], [{}] * 4, WHERE, 'skip',
                            2)
  np.testing.assert_array_equal(good, [True, False])
  np.testing.assert_array_equal(got[0], [1.0, 2.0])


def test_a_reference_of_another_vocabulary_is_refused(tmp_path):
  other = helpers.tiny_config(vocab_size=128)
  run_config.write(other, str(tmp_path))
  config = helpers.tiny_config()
  with config.unlocked():
    config.train.objective, config.train.reference = 'dpo', str(tmp_path)
    config.data.task.kind, config.data.task.path = 'preference', 'unused'
  with pytest.raises(ConfigError, match=r'train\.reference=.*model\.vocab_size=128 is not the '
                                         "student's 64; the two must share a vocabulary"):
    teacher_lib.config_for(config)
