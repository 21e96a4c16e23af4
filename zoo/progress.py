"""Lines for people. `say` tells the run's story once: on a pod every process would print
the same header, step and eval lines, so process 0 alone prints them; what happens to one
process (a signal, its local checkpoint tier, a warning, an error) is printed by that
process. While something long runs, a compile that takes minutes (a TPU slice's step, a big
model on a CPU) says so every `every` seconds with the time so far, instead of falling
silent between its "compiling" and "compiled" lines."""

import contextlib
import threading
import time

import jax


def say(*lines):
  """Prints the lines (flushed) on process 0 only."""
  if jax.process_index() == 0:
    print(*lines, flush=True)


@contextlib.contextmanager
def heartbeat(what, every=30.0, out=say):
  """Inside the block: '  still compiling ...: 60 s' every `every` seconds."""
  done, start = threading.Event(), time.monotonic()

  def beat():
    while not done.wait(every):
      out(f'  still {what}: {time.monotonic() - start:.0f} s')
  thread = threading.Thread(target=beat, daemon=True)
  thread.start()
  try:
    yield
  finally:
    done.set()
    thread.join()
