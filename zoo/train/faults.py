"""Faults a test injects into a training run (train.fault.*; docs/reliability.md tabulates
them): a hang, a loss spike, a SIGKILL while a checkpoint is written. The non-finite burst
is in the train step itself (step.py: _poisoned)."""

import os
import signal
import time

import jax

from zoo import storage


def before_step(fault, step, state, rollbacks):
  """train.fault's faults before step `step` (tests): a hang, or the parameters x 4 (a
  spike; not again once a rollback from it is recorded)."""
  while step == fault.hang_step:
    time.sleep(1)
  if step == fault.spike_step and all(r['spike_step'] != step for r in rollbacks):
    state = dict(state, params=jax.tree.map(lambda p: p * 4, state['params']))
  return state


def kill_while_saving(directory, step):
  """train.fault.kill_in_save (tests): SIGKILL this process while the checkpoint of `step`
  is being written (its temporary directory holds files, the step is not yet complete)."""
  pattern = storage.join(directory, f'{step}.orbax-checkpoint-tmp*', '*')
  done = storage.join(directory, str(step))  # a save that won the race: the test sees it
  while not storage.glob(pattern) and not storage.exists(done):
    time.sleep(0.001)
  print(f'fault: SIGKILL while writing the checkpoint of step {step}', flush=True)
  os.kill(os.getpid(), signal.SIGKILL)
