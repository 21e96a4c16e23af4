"""The loop's periodic work: after each train step it runs, in order, the actions due.

An action says when it is due (its cadence) and what it is charged to (goodput's kinds);
one that `flushes` has the step's metrics row written first, so an eval row follows its
step's row and a killed save cannot lose the row of the step it saved. One that is not
`timed` pauses the watchdog (zoo/train/watchdog.py): its time is neither a step's nor a
hang's. New periodic work (a metric, an export) is one more action, not one more branch of
the loop.
"""

import contextlib
import time

from zoo import progress
from zoo.train import evaluate as evaluate_lib
from zoo.train import faults
from zoo.train import state as state_lib


class Evaluate:
  """Every train.eval_every steps and at the last: the eval row, written and printed."""
  charge, flush, timed = 'eval', True, False

  def __init__(self, every, last, evaluate, writer, log):
    self.every, self.last, self.evaluate = every, last, evaluate
    self.writer, self.log = writer, log

  def due(self, step):
    return step % self.every == 0 or step == self.last

  def __call__(self, step, state, data_iter):
    start = time.time()
    row = self.evaluate(state_lib.model_variables(state))
    self.writer.write({'step': step, **row})
    progress.say(f'step {step} {evaluate_lib.describe(row)}')
    self.log.pause(time.time() - start)  # not in the first step's time


class Stop:
  """SIGINT or SIGTERM, agreed by every process (zoo/train/stop.py): `signum` once one came;
  the saves after it keep the step, and the loop ends."""
  charge, flush, timed = 'step', False, True  # a pod's agreement hangs like a step

  def __init__(self, signals):
    self.signals, self.signum = signals, signals.agreed()  # one during setup: no step runs

  def due(self, step):
    return True

  def __call__(self, step, state, data_iter):
    self.signum = self.signals.agreed()


class Save:
  """A checkpoint tier's save (with the data position): every `every` steps, and for the
  persistent tier (`stop` given) at the last step and after a signal."""
  charge, flush, timed = 'checkpoint', True, False

  def __init__(self, tier, every, last=None, stop=None, kill_in_save=0):
    self.tier, self.every, self.last, self.stop = tier, every, last, stop
    self.kill_in_save = kill_in_save  # train.fault.kill_in_save: the tests' SIGKILL

  def due(self, step):
    return step % self.every == 0 or (self.stop is not None and (
        step == self.last or bool(self.stop.signum)))

  def __call__(self, step, state, data_iter):
    self.tier.save(step, state, data_iter)
    if step == self.kill_in_save:
      faults.kill_while_saving(self.tier.directory, step)


def run_due(actions, step, state, data_iter, log, goodput, watchdog):
  """Each action due after `step`, in order (the watchdog paused while an untimed one
  runs)."""
  for action in actions:
    if not action.due(step):
      continue
    if action.flush:
      with goodput.charge('step'):
        log.flush()
    with goodput.charge(action.charge), (
        contextlib.nullcontext() if action.timed else watchdog.paused()):
      action(step, state, data_iter)
