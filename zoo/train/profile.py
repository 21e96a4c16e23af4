"""train.profile_steps=(FIRST, COUNT): a trace of train steps FIRST..FIRST+COUNT-1 written by
every process into WORKDIR/profile/process_K/ (TensorBoard's profile plugin or xprof read
it: `xprof --logdir=WORKDIR/profile`). A profile that fails warns and training goes on.
"""

import os
import shutil
import tempfile

import jax

from zoo import storage


def directory(workdir, process_index):
  return storage.join(workdir, 'profile', f'process_{process_index}')


class Profiler:
  """start(step) before step `step` is dispatched; stop(step, outputs) once it has been."""

  def __init__(self, profile_steps, workdir, start_step):
    first, count = profile_steps
    self.first, self.last = first, first + count - 1
    self.target = directory(workdir, jax.process_index())
    self.local, self.active = None, False
    if count and first <= start_step:
      print(f'warning: train.profile_steps={tuple(profile_steps)} starts at or before the '
            f'resumed step {start_step}; no trace this run', flush=True)
      self.first = None
    if not count:
      self.first = None

  def start(self, step):
    if step != self.first:
      return
    self.local = (tempfile.mkdtemp(prefix='zoo-profile-') if storage.is_remote(self.target)
                  else self.target)
    try:
      os.makedirs(self.local, exist_ok=True)
      jax.profiler.start_trace(self.local)
      self.active = True
    except Exception as e:  # pylint: disable=broad-except
      _warn(f'could not start the profiler ({e})')

  def stop(self, step, outputs):
    if not self.active or step != self.last:
      return
    self.active = False
    try:
      jax.block_until_ready(outputs)
      jax.profiler.stop_trace()
      if self.local != self.target:  # a bucket: upload the trace files, then drop the copy
        for path in storage.walk_files(self.local):
          target = storage.join(self.target, os.path.relpath(path, self.local))
          storage.makedirs(os.path.dirname(target))
          storage.upload(path, target)
        shutil.rmtree(self.local, ignore_errors=True)
      print(f'profile of steps {self.first}..{self.last} in {self.target}', flush=True)
    except Exception as e:  # pylint: disable=broad-except
      _warn(f'could not write the profile ({e})')

  def close(self):
    """Ends a trace the run stopped inside (an error, SIGTERM); keeps what it wrote."""
    if self.active:
      self.stop(self.last, None)


def _warn(message):
  print(f'warning: {message}; training goes on without a trace', flush=True)
