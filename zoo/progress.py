"""Lines for people while something long runs: a compile that takes minutes (a TPU slice's
step, a big model on a CPU) says so every `every` seconds with the time so far, instead of
falling silent between its "compiling" and "compiled" lines."""

import contextlib
import threading
import time


@contextlib.contextmanager
def heartbeat(what, every=30.0, out=print):
  """Inside the block: '  still compiling ...: 60 s' every `every` seconds."""
  done, start = threading.Event(), time.monotonic()

  def beat():
    while not done.wait(every):
      out(f'  still {what}: {time.monotonic() - start:.0f} s', flush=True)
  thread = threading.Thread(target=beat, daemon=True)
  thread.start()
  try:
    yield
  finally:
    done.set()
    thread.join()
