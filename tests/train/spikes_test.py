"""Loss spikes: the detection rule against hand-computed windows, the skip arithmetic, the
rollback cap and the settings that cannot work."""

import math

import pytest

from tests import helpers
from zoo import config as config_lib
from zoo.errors import ConfigError
from zoo.train import spikes


def _spike(**overrides):
  s = config_lib.base().train.spike
  s.update(action='rollback', window=4, sigmas=2.0, min_rise=0.05, **overrides)
  return s


def _fed(detector, values, signal='loss'):
  for step, value in enumerate(values, start=1):
    assert detector.check(step, {'loss': value, 'grad_norm': 1.0, signal: value}) is None


def test_a_value_over_the_window_mean_by_sigmas_standard_deviations_is_a_spike():
  detector = spikes.Detector(_spike())
  _fed(detector, [1.0, 2.0, 3.0, 4.0])  # mean 2.5, standard deviation sqrt(1.25)
  threshold = 2.5 + 2 * math.sqrt(1.25)  # 4.736
  spike = detector.check(5, {'loss': threshold + 0.01, 'grad_norm': 1.0})
  assert spike.step == 5 and spike.signal == 'loss'
  assert spike.mean == pytest.approx(2.5) and spike.std == pytest.approx(math.sqrt(1.25))
  assert detector.check(6, {'loss': threshold - 0.01, 'grad_norm': 1.0}) is None


def test_a_flat_window_needs_the_minimum_rise_and_spikes_stay_out_of_the_window():
  detector = spikes.Detector(_spike())
  _fed(detector, [10.0] * 4)  # standard deviation 0: any value above would be 2 sigmas
  assert detector.check(5, {'loss': 10.4, 'grad_norm': 1.0}) is None  # < 5% over
  # 10.4 joined the window: mean 10.1, std sqrt(0.03); 5% over is 10.605
  assert detector.check(6, {'loss': 10.6, 'grad_norm': 1.0}) is None
  # then mean 10.25, std sqrt(0.0675): 2 sigmas over is 10.77
  assert detector.check(7, {'loss': 11.0, 'grad_norm': 1.0}) is not None
  assert [v for _, v in detector.windows['loss']] == [10.0, 10.0, 10.4, 10.6]  # not 11


def test_nonfinite_steps_are_not_spikes_and_do_not_enter_the_window():
  detector = spikes.Detector(_spike())
  _fed(detector, [1.0, 2.0, 3.0])
  assert detector.check(4, {'loss': math.nan, 'grad_norm': 1.0}) is None
  assert detector.check(5, {'loss': 1e9, 'grad_norm': math.inf}) is None
  assert len(detector.windows['loss']) == 3  # not full: no detection yet


def test_the_gradient_norm_is_a_signal_when_named():
  detector = spikes.Detector(_spike(signals='loss,grad_norm'))
  _fed(detector, [1.0, 1.1, 0.9, 1.0], signal='grad_norm')
  spike = detector.check(5, {'loss': 1.0, 'grad_norm': 30.0})
  assert spike.signal == 'grad_norm' and spike.value == 30.0


def test_a_rollback_forgets_the_window_values_after_the_step_it_returns_to():
  detector = spikes.Detector(_spike())
  _fed(detector, [4.0, 3.0, 2.0, 1.0])
  detector.rewind(2)
  assert list(detector.windows['loss']) == [(1, 4.0), (2, 3.0)]


def test_skips_add_up_per_step_and_name_the_batches_as_drawn():
  records = [{'spike_step': 30, 'restored_step': 20, 'skipped_batches': [24, 27]}]
  current = spikes.skips(config_lib.data_skips('10:3, 40:2'), records)
  assert current == {10: 3, 40: 2, 20: 4}
  # after step 20 the batches drawn so far are 20 + 3 (the skip after 10) + 4 (the rollback)
  assert spikes.skipped_range(20, 5, current) == (28, 32)
  assert spikes.skipped_range(5, 5, current) == (6, 10)


def test_more_rollbacks_than_the_cap_within_the_window_stop_the_run_in_one_line():
  s = _spike(max_rollbacks=2, rollback_window=100)
  records = [{'spike_step': 50}, {'spike_step': 120}]
  assert spikes.too_many(140, records[:1], s) is None
  assert spikes.too_many(160, records, s) is None  # 50 is over 100 steps back
  records.append({'spike_step': 150})
  line = spikes.too_many(160, records, s)
  assert line.startswith('3 loss spikes within train.spike.rollback_window=100 steps '
                         '(at steps 120, 150, 160), more than train.spike.max_rollbacks=2')


@pytest.mark.parametrize('overrides,message', [
    ({'spike.window': 0}, 'train.spike.window=0 cannot hold a mean and a standard deviation'),
    ({'spike.action': 'rollback', 'spike.rollback_steps': 100, 'checkpoint_every': 20,
      'keep_checkpoints': 3},
     r'train.spike.rollback_steps=100 needs a checkpoint that old, but '
     r'train.keep_checkpoints=3 x train.checkpoint_every=20 keeps 40 steps back; set '
     r'train.keep_checkpoints=6 or lower train.spike.rollback_steps'),
    ({'spike.signals': 'loss,accuracy'}, "train.spike.signals='loss,accuracy'"),
    ({'spike.action': 'skip'}, "train.spike.action='skip'; use one of off, log, rollback"),
    ({'data_skips': '10-3'}, "train.data_skips='10-3': '10-3' is not 'STEP:COUNT'"),
], ids=['window', 'retention', 'signal', 'action', 'data_skips'])
def test_settings_that_cannot_work_are_one_line_naming_the_field(overrides, message):
  config = config_lib.base()
  for key, value in overrides.items():
    node = config.train
    *parents, last = key.split('.')
    for part in parents:
      node = node[part]
    node[last] = value
  with pytest.raises(ConfigError, match=message):
    helpers.validate(config)


def test_a_lasting_spike_is_reported_once_and_after_a_window_becomes_the_new_level():
  detector = spikes.Detector(_spike())
  _fed(detector, [1.0, 1.1, 0.9, 1.0])
  found = [detector.check(step, {'loss': 9.0 + step / 100, 'grad_norm': 1.0})
           for step in range(5, 10)]  # five steps at the new level, window 4
  assert [s.step if s else None for s in found] == [5, None, None, None, None]
  # steps 5..8 filled a window: they are the level now, step 9 joined it
  assert [s for s, _ in detector.windows['loss']] == [6, 7, 8, 9]
  assert detector.check(10, {'loss': 1.0, 'grad_norm': 1.0}) is None  # a drop is no spike
  assert detector.check(11, {'loss': 30.0, 'grad_norm': 1.0}).step == 11  # a new spike
