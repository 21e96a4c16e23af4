"""Ctrl-C and SIGTERM stop a run the same way: the first finishes the current step, saves a
checkpoint and ends the run (the launcher exits 128 + the signal: 130, 143); a second exits
at once, without saving (what was already saved stays).

Python runs a signal handler only when the main thread is back in bytecode, which a long
compile or a blocking device read delays; so the signals are read from a wakeup pipe by a
thread of their own, which can count the second one even then. On a pod every process
takes part in `agreed()` each step, so they all stop after the same step and save together
(one small all-gather a step, multi-process runs only).
"""

import os
import signal
import sys
import threading

import jax
import numpy as np
from jax.experimental import multihost_utils

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
  """The run stopped on a signal; `step` is the newest checkpoint's, `exit_code` 128 + it."""

  def __init__(self, message, signum, step):
    super().__init__(message)
    self.message, self.exit_code, self.step = message, 128 + signum, step


class Signals:
  """A context in which SIGINT and SIGTERM ask the run to stop (see the module docstring)."""

  def __init__(self):
    self.signum = None
    self._previous = {}
    self._previous_fd = -1
    self._write_fd = None

  def __enter__(self):
    if threading.current_thread() is not threading.main_thread():
      return self  # signals reach the main thread's handlers only: the caller's stay
    read_fd, self._write_fd = os.pipe()
    os.set_blocking(self._write_fd, False)
    self._previous = {s: signal.signal(s, lambda *_: None) for s in SIGNALS}
    self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
    threading.Thread(target=self._watch, args=(read_fd,), daemon=True,
                     name='zoo-stop-signals').start()
    return self

  def __exit__(self, *_):
    if self._write_fd is None:
      return
    signal.set_wakeup_fd(self._previous_fd)
    for s, handler in self._previous.items():
      if handler is not None:  # None: a handler not set from Python, left as it is
        signal.signal(s, handler)
    os.close(self._write_fd)  # the watcher reads end-of-file and ends
    self._write_fd = None

  def _watch(self, read_fd):
    with os.fdopen(read_fd, 'rb', buffering=0) as pipe:
      while byte := pipe.read(1):
        signum = byte[0]
        if signum not in SIGNALS:
          continue
        name = signal.Signals(signum).name
        if self.signum is None:
          self.signum = signum
          print(f'{name}: finishing the current step, then saving a checkpoint (again to '
                'exit at once, without saving)', flush=True)
        else:
          print(f'{name} again: exiting without saving; the newest checkpoint is kept',
                file=sys.stderr, flush=True)
          os._exit(128 + signum)  # pylint: disable=protected-access

  def agreed(self):
    """The signal that stops the run, or 0: on a pod, any process's (all take part)."""
    local = self.signum or 0
    if jax.process_count() == 1:
      return local
    return int(np.max(multihost_utils.process_allgather(np.int32(local))))
