"""Step times, and a hung run that ends instead of waiting forever.

Each metrics row says how long its steps took: the median and the max and, on a pod, the
process of the slowest median (a straggler). When no train step completes within
train.hang.factor x the median of the recent step times (never less than
train.hang.min_seconds; factor x min_seconds until MIN_STEPS steps are timed), every
thread's stack and the recent step times go to WORKDIR/hang-process_K.txt, one line goes to
stderr, and the process exits EXIT_HANG, so that a scheduler restarts it and the rerun
resumes from the newest checkpoint (exactly, as after any stop).

What it watches is the train loop's steps; compiles, evals and checkpoint saves are
`paused()` (they take their own time, and a save has its own error path). A hung collective
inside a step, a stalled input pipeline or a lost peer process all show as a step that does
not complete.
"""

import collections
import contextlib
import faulthandler
import os
import statistics
import sys
import tempfile
import threading
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

from zoo import storage

EXIT_HANG = 75  # EX_TEMPFAIL: a temporary failure, to be retried
MIN_STEPS = 5  # step times measured before the multiple of their median applies
RECENT = 20  # the step times the median is taken over


class Watchdog:
  """beat(step) when a step completes; the thread watches the time since the last one."""

  def __init__(self, hang_config, workdir):
    self.factor, self.min_seconds = hang_config.factor, hang_config.min_seconds
    self.workdir = workdir
    self.times = collections.deque(maxlen=RECENT)
    self.window = []  # the step times since the last window_row()
    self.last, self.step, self.pauses = time.monotonic(), 0, 0
    self._stop = threading.Event()
    self._thread = None

  def beat(self, step):
    """Step `step` has completed (the first beat starts the watching thread)."""
    if self.factor and self._thread is None and not self._stop.is_set():
      self._thread = threading.Thread(target=self._watch, name='zoo-watchdog', daemon=True)
      self._thread.start()
    now = time.monotonic()
    if self.step:
      self.times.append(now - self.last)
      self.window.append(now - self.last)
    self.last, self.step = now, step

  def median_seconds(self):
    """The median of the recent step times, or None before a step has been timed."""
    return statistics.median(self.times) if self.times else None

  def window_row(self):
    """The step times since the last call: median and max (seconds) and, on a pod, the
    process of the slowest median and that median (every process calls it together)."""
    times, self.window = self.window or [0.0], []
    row = {'step_seconds_median': round(statistics.median(times), 4),
           'step_seconds_max': round(max(times), 4)}
    if jax.process_count() > 1:
      medians = multihost_utils.process_allgather(
          np.asarray([statistics.median(times)])).reshape(-1)
      slowest = int(np.argmax(medians))
      row.update(step_seconds_slowest_process=slowest,
                 step_seconds_slowest_median=round(float(medians[slowest]), 4))
    return row

  @contextlib.contextmanager
  def paused(self):
    self.pauses += 1
    try:
      yield
    finally:
      self.pauses -= 1
      self.last = time.monotonic()

  def limit(self):
    """Seconds a step may take now before the run counts as hung."""
    if len(self.times) < MIN_STEPS:
      return self.factor * self.min_seconds
    return max(self.min_seconds, self.factor * statistics.median(self.times))

  def close(self):
    self._stop.set()

  def _watch(self):
    while not self._stop.wait(min(1.0, self.min_seconds / 4)):
      waited = time.monotonic() - self.last
      if not self.pauses and waited > self.limit():
        self._report(waited)
        os._exit(EXIT_HANG)  # pylint: disable=protected-access

  def _report(self, waited):
    name = f'hang-process_{jax.process_index()}.txt'
    with tempfile.TemporaryFile('w+') as f:
      recent = ', '.join(f'{t:.3f}' for t in self.times) or 'none yet'
      f.write(f'no train step completed in {waited:.1f} s after step {self.step} (limit '
              f'{self.limit():.1f} s); the recent step times (s): {recent}\n\n')
      f.flush()
      faulthandler.dump_traceback(f, all_threads=True)
      f.seek(0)
      path = storage.join(self.workdir, name)
      storage.write_bytes(path, f.read().encode())
    print(f'hang: no train step completed in {waited:.0f} s after step {self.step} (limit '
          f'{self.limit():.0f} s: train.hang.factor x the recent median, at least '
          f'train.hang.min_seconds); every thread\'s stack is in {path}; exiting '
          f'{EXIT_HANG} so that a restart resumes from the newest checkpoint',
          file=sys.stderr, flush=True)
