"""Checkpoints in WORKDIR/checkpoints (orbax): train state plus the data iterator's state.

Every process writes the state of its input streams (zoo/data/streams.py) to its own file
through grain's handler; a restore reads all the files, so each stream resumes where it
stopped whichever process reads it now (a different process count included).

Restores always go into an abstract target built from the current mesh, so a checkpoint
moves between meshes. An unreadable newest step is moved aside (never deleted) and the
previous good one is used.
"""

import glob
import json
import os
import time

import grain
import jax
import orbax.checkpoint as ocp
from absl import logging
from jax.experimental import multihost_utils


class Checkpointer:

  def __init__(self, directory, keep):
    self.directory = os.path.abspath(directory)
    self.keep = keep
    self.manager = self._open()

  def _open(self):
    options = ocp.CheckpointManagerOptions(max_to_keep=self.keep, create=True)
    return ocp.CheckpointManager(self.directory, options=options, item_names=('state', 'data'))

  def save(self, step, state, data_iter):
    """Starts an async save; the previous one is finished first."""
    start = time.time()
    self.manager.wait_until_finished()
    data = grain.checkpoint.CheckpointSave(_IteratorSnapshot(data_iter.get_state()))
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=data), force=True)
    logging.info('checkpoint %d started in %.2fs', step, time.time() - start)

  def restore(self, abstract_state, data_iter=None):
    """Newest readable checkpoint -> (step, state), or None if there is none.

    `data_iter`, if given, is moved to where that step left the stream.
    """
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state)))
        if data_iter is not None:
          self._restore_streams(step, data_iter)
        return step, restored['state']
      except Exception as e:  # pylint: disable=broad-except
        aside = os.path.join(self.directory, f'unreadable-{step}-{int(time.time())}')
        logging.warning('checkpoint %d is unreadable (%s: %s); moved to %s, trying the '
                        'previous one', step, type(e).__name__, str(e)[:200], aside)
        print(f'warning: checkpoint {step} is unreadable ({type(e).__name__}); moved aside '
              f'to {aside}, falling back to the previous one', flush=True)
        self.manager.close()
        if jax.process_index() == 0:
          os.rename(os.path.join(self.directory, str(step)), aside)
        multihost_utils.sync_global_devices(f'zoo_checkpoint_aside_{step}')
        self.manager = self._open()
    return None

  def _restore_streams(self, step, data_iter):
    files = glob.glob(os.path.join(self.directory, str(step), 'data', 'process_*.json'))
    if not files:
      raise FileNotFoundError(f'no data iterator state in checkpoint {step}')
    state = {}
    for path in files:
      with open(path, encoding='utf-8') as f:
        state.update(json.load(f))
    missing = data_iter.set_state(state)
    if missing:
      print(f'warning: checkpoint {step} has no position for input streams {missing} of '
            f'{data_iter.num_streams} (it was written with another data.num_streams); they '
            'start over from their seed. Fix data.num_streams to resume the data exactly.',
            flush=True)

  def close(self):
    self.manager.wait_until_finished()
    self.manager.close()


class _IteratorSnapshot:
  """The iterator's position at save time, frozen: the async save writes it later."""

  def __init__(self, state):
    self._state = json.dumps(state).encode()

  def get_state(self):
    return self._state


def save_params(path, params):
  """Params alone (an imported model), for train.init_params."""
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(os.path.abspath(path), params)
  checkpointer.wait_until_finished()


def restore_params(path, abstract_params):
  """train.init_params -> params laid out as `abstract_params` (shapes and shardings) say."""
  if not os.path.isdir(path):
    raise FileNotFoundError(f'train.init_params={path!r} is not a directory; run '
                            'python -m zoo.convert.hf first or clear train.init_params')
  return ocp.StandardCheckpointer().restore(os.path.abspath(path), abstract_params)
