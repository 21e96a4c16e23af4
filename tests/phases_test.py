"""Phases: the steps, batches, lengths and tokens a train.phases or train.batch_ramp gives,
and one-line errors for what cannot run."""

import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo import phases
from zoo.errors import ConfigError


def _config(*overrides):
  config = helpers.tiny_config()  # 4 x 16 tokens a step
  config.train.steps = 100
  for override in overrides:
    config_lib.apply_override(config, override)
  return helpers.validate(config)


def _shapes(config):
  return [(p.first, p.last, p.batch_size, p.seq_len, p.tokens_before)
          for p in phases.resolve(config)]


def test_phases_end_at_a_step_or_where_their_tokens_are_reached():
  # 3 steps of 2 x 8 (48 tokens), then 4 x 8 until 500 tokens: 15 steps more (528), then
  # the run's own 4 x 16 to step 100
  config = _config('train.phases=3:2:8,500tokens:4:8')
  assert _shapes(config) == [(1, 3, 2, 8, 0), (4, 18, 4, 8, 48), (19, 100, 4, 16, 528)]
  resolved = phases.resolve(config)
  assert phases.total_tokens(resolved) == 528 + 82 * 64
  for step in (0, 2, 3, 10, 18, 19, 100):
    want = sum(p.tokens_per_step for p in resolved for s in range(p.first, p.last + 1)
               if s <= step)
    assert phases.tokens_before(resolved, step) == want
    assert float(phases.tokens_before(resolved, jnp.int32(step))) == want
  assert [phases.at(resolved, s) for s in (1, 3, 4, 18, 19, 100)] == [0, 0, 1, 1, 2, 2]


def test_a_batch_ramp_grows_by_its_increment_in_equal_slices():
  config = _config('train.batch_size=8', 'train.batch_ramp=2:2:9')
  assert _shapes(config)[:3] == [(1, 3, 2, 16, 0), (4, 6, 4, 16, 96), (7, 9, 6, 16, 288)]
  assert _shapes(config)[3][:3] == (10, 100, 8)
  ramp = phases.resolve(_config('train.batch_size=8', 'train.batch_ramp=2:2:1.5Ktokens'))
  assert [p.batch_size for p in ramp] == [2, 4, 6, 8]
  assert [p.tokens_before for p in ramp[1:]] == [512, 1024, 1504]  # 500, 1000, 1500 reached


@pytest.mark.parametrize('overrides,message', [
    (['train.phases=4:2:8,2:4:8'], r'train.phases: a phase ends at step 2, not after the '
                                   r'previous phase \(step 4\)'),
    (['train.phases=100:2:8'], 'leave the run its own last phase'),
    (['train.phases=3:2'], "train.phases: '3:2' is not UNTIL:BATCH:SEQ_LEN"),
    (['train.phases=3:0:8'], 'with positive integers'),
    (['train.phases=3steps:2:8'], "'3steps' is not a step"),
    (['data.num_streams=2', 'train.phases=3:3:8'],
     r'train.phases: phase 1 \(3 x 8, steps 1..3\): train.batch_size=3 does not split into '
     'data.num_streams=2'),
    (['train.phases=3:2:128'], r'phase 1 \(2 x 128, steps 1..3\): data.seq_len=128 exceeds '
                               'model.max_length=64'),
    (['train.batch_ramp=2:3:9'], 'INCREMENT=3 divide their difference'),
    (['train.phases=3:2:8', 'train.batch_ramp=2:2:9'], 'both set'),
    (['data.task.kind=classification', 'data.task.path=task', 'train.phases=3:2:8'],
     r'phase 1 \(2 x 8, steps 1..3\): a fine-tuning task trains at data.seq_len=16 throughout '
     r".*set --config.train.phases=''$"),
], ids=['decreasing', 'past_the_end', 'fields', 'zero', 'unit', 'streams', 'max_length',
        'increment', 'both', 'task_length'])
def test_phases_that_cannot_run_are_one_line_naming_the_field(overrides, message):
  with pytest.raises(ConfigError, match=message):
    _config(*overrides, 'model.position=learned')


def test_each_phase_is_its_own_shape_for_the_checks_and_the_step():
  config = _config('train.phases=3:2:8')
  first = phases.config_for(config, phases.resolve(config)[0])
  assert (first.train.batch_size, first.data.seq_len, first.train.phases) == (2, 8, '')
  assert (config.train.batch_size, config.data.seq_len) == (4, 16)  # the run's own, unchanged
  t5 = helpers.smoke('t5_small', 'train.steps=10', 'train.phases=5:4:256')
  short = phases.config_for(t5, phases.resolve(t5)[0])
  assert (short.data.seq_len, short.data.target_seq_len) == (256, 58)  # raw 284 -> 256 + 58
  assert np.isclose(phases.resolve(t5)[1].tokens_before, 5 * 4 * 256)
