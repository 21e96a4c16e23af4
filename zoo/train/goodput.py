"""Where a run's wall time goes: each second is charged to one kind of work, reported per
logged window (time_KIND in the train rows) and for the whole run (the final 'end' row,
whose `goodput` is the share of wall time spent in train steps).

  setup       before the loop: mesh, data preparation, state init or restore
  compile     compiling the train step (its seconds also go into the run header)
  data        waiting for the next batch and placing it on the devices
  step        train steps: dispatching them and waiting for their results
  eval        held-out evaluation (its first call compiles the eval step)
  checkpoint  saving checkpoints
  other       what none of these covers (logging, the profiler)
"""

import contextlib
import time

KINDS = ('setup', 'compile', 'data', 'step', 'eval', 'checkpoint')


class Goodput:
  """Charges wall time to KINDS: `with goodput.charge('data'): ...`."""

  def __init__(self, clock=time.perf_counter):
    self.clock = clock
    self.start = clock()
    self.total = dict.fromkeys(KINDS, 0.0)
    self.window = dict.fromkeys(KINDS, 0.0)

  @contextlib.contextmanager
  def charge(self, kind):
    begin = self.clock()
    try:
      yield
    finally:
      seconds = self.clock() - begin
      self.total[kind] += seconds
      self.window[kind] += seconds

  def window_row(self):
    """{time_KIND: seconds} since the last call (KINDS that took time), then a new window."""
    row = {f'time_{k}': round(v, 4) for k, v in self.window.items() if v}
    self.window = dict.fromkeys(KINDS, 0.0)
    return row

  def final_row(self):
    """The whole run: wall seconds, seconds per kind (other included) and goodput."""
    wall = self.clock() - self.start
    row = {'wall_seconds': round(wall, 3),
           **{f'time_{k}': round(v, 3) for k, v in self.total.items()},
           'time_other': round(max(wall - sum(self.total.values()), 0.0), 3),
           'goodput': round(self.total['step'] / wall, 4) if wall > 0 else 0.0}
    return row
