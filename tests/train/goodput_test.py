"""Goodput's accounting on a hand-driven clock, and the profiler's two outcomes: a trace on
disk, or a warning and training going on."""

import glob
import os

import jax
import jax.numpy as jnp
import pytest

from zoo.train import goodput as goodput_lib
from zoo.train import profile as profile_lib


class Clock:
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_seconds_are_charged_per_window_and_summed_for_the_run():
  clock = Clock()
  goodput = goodput_lib.Goodput(clock)
  for kind, seconds in (('setup', 4.0), ('compile', 3.0), ('data', 0.5), ('step', 2.0)):
    with goodput.charge(kind):
      clock.now += seconds
  clock.now += 0.25  # uncharged: logging
  assert goodput.window_row() == {'time_setup': 4.0, 'time_compile': 3.0, 'time_data': 0.5,
                                  'time_step': 2.0}
  with goodput.charge('step'):
    clock.now += 6.0
  with goodput.charge('eval'):
    clock.now += 1.0
  assert goodput.window_row() == {'time_step': 6.0, 'time_eval': 1.0}
  assert goodput.window_row() == {}
  with pytest.raises(KeyError):  # an error inside still charges, then propagates
    with goodput.charge('checkpoint'):
      clock.now += 1.25
      raise KeyError('boom')
  end = goodput.final_row()
  # wall 4 + 3 + 0.5 + 2 + 0.25 + 6 + 1 + 1.25 = 18; steps 8 of it
  assert end == {'wall_seconds': 18.0, 'time_setup': 4.0, 'time_compile': 3.0,
                 'time_data': 0.5, 'time_step': 8.0, 'time_eval': 1.0,
                 'time_checkpoint': 1.25, 'time_other': 0.25, 'goodput': 0.4444}


def test_the_profiler_writes_a_trace_of_the_chosen_steps(tmp_path):
  profiler = profile_lib.Profiler((2, 2), str(tmp_path), start_step=0)
  x = jnp.ones((64, 64))
  for step in (1, 2, 3, 4):
    profiler.start(step)
    x = jnp.tanh(x @ x)
    profiler.stop(step, x)
  traces = glob.glob(os.path.join(tmp_path, 'profile', 'process_0', 'plugins', 'profile', '*',
                                  '*.xplane.pb'))
  assert len(traces) == 1 and os.path.getsize(traces[0]) > 0


def test_a_failing_profiler_warns_and_training_goes_on(tmp_path, monkeypatch, capsys):
  def broken(*_):
    raise RuntimeError('no profiler here')
  monkeypatch.setattr(jax.profiler, 'start_trace', broken)
  profiler = profile_lib.Profiler((1, 1), str(tmp_path), start_step=0)
  profiler.start(1)
  profiler.stop(1, jnp.ones(3))
  profiler.close()
  assert 'warning: could not start the profiler (no profiler here); training goes on' in \
      capsys.readouterr().out


def test_a_resumed_run_past_the_profiled_steps_says_so(tmp_path, capsys):
  profiler = profile_lib.Profiler((2, 3), str(tmp_path), start_step=2)
  for step in (3, 4):
    profiler.start(step)
    profiler.stop(step, None)
  assert 'starts at or before the resumed step 2; no trace' in capsys.readouterr().out
  assert not os.path.exists(tmp_path / 'profile')
