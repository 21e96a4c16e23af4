"""Loss spikes: found against a running window, remedied by rolling back and skipping data.

PaLM (Chowdhery et al. 2022, section 5.1) fixed its ~20 spikes by restarting from a
checkpoint about 100 steps before the spike and skipping the 200-500 batches around it; it
gives the remedy, not a detection rule. The zoo's rule (train.spike):

  a step is a spike when a signal (its loss, optionally its gradient norm) is above the mean
  of the last `window` good steps' values by `sigmas` standard deviations and by `min_rise`
  of that mean.

Defaults and why: a window of 50 steps is long enough for a stable mean and standard
deviation, short enough to follow the falling loss; 6 standard deviations is an excursion a
stationary loss (Gaussian batch noise) makes about once in 10^9 steps, so a detection is
not noise; the 5% rise keeps a tiny standard deviation late in training (large batches)
from turning a harmless wobble into a rollback. Steps with a NaN/Inf loss are the nonfinite
rule's (train.max_nonfinite_steps) and never enter the window; a spike does not either.
Detection starts once the window is full, and starts over after a restart. Steps that spike
one after another are one spike (reported once, at its first step); one that lasts a whole
window is a new level, and its values become the window.

train.spike.action: 'log' (the default) writes a `spike` row and a line and trains on;
'rollback' restores the newest checkpoint at least `rollback_steps` older than the spike
(the fresh initialisation when there is none), moves the newer checkpoints aside (never
deleted), skips the next `skip_batches` batches of every input stream, and goes on; more
than `max_rollbacks` spikes within `rollback_window` steps stop the run (exit code 1).

Skips are deterministic: "after step R, skip M batches" is recorded in
WORKDIR/rollbacks.jsonl before the restore, so every process and every rerun draws and
drops the same batches (zoo/data/streams.py), and train.data_skips gives the same by hand.
"""

import collections
import json

import jax
import numpy as np

from zoo import config as config_lib
from zoo import storage

RECORD = 'rollbacks.jsonl'


class Rollback(Exception):
  """A spike to roll back: raised where its step's metrics are read."""

  def __init__(self, spike):
    super().__init__(spike.describe())
    self.spike = spike


class Spike(collections.namedtuple('Spike', 'step signal value mean std')):

  def describe(self):
    return (f'{self.signal} {self.value:.4f} at step {self.step} is {self.value - self.mean:.4f} '
            f'above the mean of the window ({self.mean:.4f}, standard deviation {self.std:.4f})')

  def row(self):
    return {'spike_signal': self.signal, 'spike_value': round(float(self.value), 6),
            'window_mean': round(float(self.mean), 6), 'window_std': round(float(self.std), 6)}


class Detector:
  """The rule above over each signal's window of (step, value) pairs. Steps that spike one
  after another are one spike, reported at its first step; a spike that lasts a whole
  window is the new level: its values become the window."""

  def __init__(self, spike):
    self.s = spike
    self.signals = [name for name in spike.signals.split(',') if name]
    self.windows = {name: collections.deque(maxlen=spike.window) for name in self.signals}
    self.ongoing = []  # (step, values) of the spike in progress

  def check(self, step, metrics):
    """-> the Spike `step`'s metrics start, or None (a step that does not spike joins the
    windows; one that continues a spike is not reported again)."""
    if self.s.action == 'off':
      return None
    if not all(np.isfinite(float(metrics[name])) for name in config_lib.SPIKE_SIGNALS):
      return None  # a skipped update: the nonfinite rule's
    values = {name: float(metrics[name]) for name in self.signals}
    spike = next(filter(None, (self._spike(step, name, v) for name, v in values.items())), None)
    if spike is None:
      self.ongoing = []
      for name, value in values.items():
        self.windows[name].append((step, value))
      return None
    self.ongoing.append((step, values))
    if len(self.ongoing) == self.s.window:  # lasted a window: the new level
      for name, window in self.windows.items():
        window.clear()
        window.extend((s, v[name]) for s, v in self.ongoing)
      self.ongoing = []
    return spike if len(self.ongoing) == 1 else None

  def _spike(self, step, name, value):
    window = self.windows[name]
    if len(window) < window.maxlen:
      return None
    past = np.array([v for _, v in window], np.float64)
    mean, std = past.mean(), past.std()
    if value > mean + self.s.sigmas * std and value > mean * (1 + self.s.min_rise):
      return Spike(step, name, value, mean, std)
    return None

  def rewind(self, step):
    """Forgets the values of steps after `step` (a rollback to it)."""
    self.ongoing = []
    for name, window in self.windows.items():
      kept = [(s, v) for s, v in window if s <= step]
      window.clear()
      window.extend(kept)


def read(workdir):
  """The rollbacks a run's workdir has recorded, oldest first."""
  path = storage.join(workdir, RECORD)
  if not storage.exists(path):
    return []
  return [json.loads(line) for line in storage.read_text(path).splitlines() if line]


def record(workdir, records, entry):
  """Appends `entry` (process 0 writes; the others keep it in memory) -> the records."""
  records = [*records, entry]
  if jax.process_index() == 0:
    text = ''.join(json.dumps(r) + '\n' for r in records)
    storage.write_bytes(storage.join(workdir, RECORD), text.encode())
  return records


def skips(data_skips, records):
  """{after step: batches to skip there}: train.data_skips (parsed: the run's) and the
  recorded rollbacks."""
  total = collections.Counter()
  for step, count in data_skips:
    total[step] += count
  for r in records:
    total[r['restored_step']] += r['skipped_batches'][1] - r['skipped_batches'][0] + 1
  return dict(total)


def skipped_range(step, count, current):
  """The batches (counted from 1, as drawn) a skip of `count` after `step` drops, given the
  skips `current` already makes -> (first, last)."""
  first = step + sum(c for s, c in current.items() if s <= step) + 1
  return first, first + count - 1


def too_many(spike_step, records, s):
  """One line when this spike would be more than train.spike.max_rollbacks within
  rollback_window steps, else None."""
  recent = [r['spike_step'] for r in records if r['spike_step'] > spike_step - s.rollback_window]
  if len(recent) < s.max_rollbacks:
    return None
  steps = ', '.join(str(v) for v in [*recent, spike_step])
  return (f'{len(recent) + 1} loss spikes within train.spike.rollback_window='
          f'{s.rollback_window} steps (at steps {steps}), more than train.spike.max_rollbacks='
          f'{s.max_rollbacks}; the run is unstable: lower optim.learning_rate (or raise '
          'optim.warmup_steps), then run the same command to resume')
