"""The serving engine: a thread that plans a step (zoo/serve/scheduler.py), feeds its rows
through the compiled steps (zoo/serve/step.py), appends each sampled token to its sequence
and tells the sequence's listener; between steps it takes new requests and cancellations.

Listeners are called on the engine's thread with (seq, token or None, finished): a token
as it is sampled, `finished` once the sequence ends (seq.finish_reason says why: 'stop' at
one of its stop ids, which is not part of the output; 'length' at max_tokens; 'cancelled';
'error' when a step failed). A failed step ends every running sequence with 'error', and
the engine starts again on a fresh pool of pages; the waiting requests stay queued.
"""

import threading
import traceback

import jax
import numpy as np

from zoo.serve import pages as pages_lib
from zoo.serve import sampling
from zoo.serve import scheduler as scheduler_lib
from zoo.serve import step as step_lib


class Engine:
  """One model's engine. settings: the config's `serve` section."""

  def __init__(self, model, variables, place, settings, max_len, kv_heads, recurrent=False,
               kernel='xla'):
    self.settings, self.recurrent = settings, recurrent
    self.mesh = place.mesh
    self.shapes = step_lib.Shapes(settings.page_size, settings.num_pages,
                                  -(-max_len // settings.page_size), settings.max_seqs + 1,
                                  kernel)
    fn, self.model, layout = step_lib.make(model, self.shapes)
    self.variables = layout(variables)  # the decoding model's (self.model)
    self._new_pool = lambda: step_lib.empty_pool(self.model, self.shapes)
    pool = self._new_pool()
    self._pool_sharding = step_lib.pool_shardings(pool, place.mesh, kv_heads)
    self._step = step_lib.compiled(place, fn, jax.tree.map(lambda a: a.sharding,
                                                           self.variables),
                                   self._pool_sharding)
    self._reset(pool)
    self._inbox, self._lock = [], threading.Condition()
    self._listeners = {}
    self._thread, self._stopping = None, False
    self.restarts, self.cancelled = 0, 0  # since the start: /metrics, the tests

  # ------------------------------------------------------------------ from other threads

  def submit(self, seq, listener):
    """Queues seq; False when serve.max_queue requests already wait."""
    with self._lock:
      if self.queued >= self.settings.max_queue:  # the condition's lock is re-entrant
        return False
      self._inbox.append(('add', seq))
      self._listeners[id(seq)] = listener
      self._lock.notify()
    return True

  def cancel(self, seq):
    """Ends seq before its next step; its pages are free after it."""
    with self._lock:
      self._inbox.append(('cancel', seq))
      self._lock.notify()

  @property
  def waiting(self):
    """Sequences admitted to the scheduler's queue and not running (preempted ones too)."""
    return len(self.scheduler.waiting)

  @property
  def queued(self):
    """Requests not yet running: those waiting and those handed in since the last step."""
    with self._lock:
      return self.waiting + sum(op == 'add' for op, _ in self._inbox)

  @property
  def running(self):
    return len(self.scheduler.running)

  @property
  def alive(self):
    return self._thread is not None and self._thread.is_alive()

  def start(self):
    self._thread = threading.Thread(target=self._loop, name='zoo-serve-engine', daemon=True)
    self._thread.start()

  def stop(self):
    with self._lock:
      self._stopping = True
      self._lock.notify()
    if self._thread:
      self._thread.join()

  # ------------------------------------------------------------------ the engine's thread

  def _loop(self):
    while True:
      with self._lock:
        while not (self._stopping or self._inbox or self.scheduler.waiting or
                   self.scheduler.running):
          self._lock.wait()
        if self._stopping:
          return
        inbox, self._inbox = self._inbox, []
      self._take(inbox)
      try:
        self.step()
      except Exception:  # pylint: disable=broad-except
        self._recover(traceback.format_exc().strip().splitlines()[-1])

  def _take(self, inbox):
    for op, seq in inbox:
      if op == 'add':
        self.scheduler.add(seq)
      elif seq.finish_reason is None:
        self.cancelled += 1
        self._end(seq, 'cancelled')

  def step(self):
    """One step: the planned prefill rows, then the decode rows."""
    plan = self.scheduler.plan()
    if plan.prefill:
      self._run(plan.prefill, self.settings.prefill_rows, self.settings.prefill_chunk)
    if plan.decode:
      self._run(plan.decode, self.settings.max_seqs, 1)

  def _run(self, rows, num_rows, length):
    feed = self._feed(rows, num_rows, length)
    tokens, self.pool = self._step(self.variables, self.pool, feed)
    tokens = np.asarray(tokens)
    for r, row in enumerate(rows):
      self.scheduler.fed(row)
      if row.samples:
        self._sampled(row.seq, int(tokens[r]))

  def _sampled(self, seq, token):
    s = seq.sampling
    if token in s.stop_ids:
      self._end(seq, 'stop')
      return
    seq.output.append(token)
    self._listeners[id(seq)](seq, token, False)
    if len(seq.output) >= s.max_tokens:
      self._end(seq, 'length')

  def _end(self, seq, reason):
    self.scheduler.finish(seq, reason)
    listener = self._listeners.pop(id(seq), None)
    if listener:
      listener(seq, None, True)

  def _feed(self, rows, num_rows, length):
    width = step_lib.width_for(max(len(row.seq.pages) for row in rows), self.shapes.max_pages)
    feed = step_lib.empty_feed(num_rows, length, width)
    settings = []
    for r, row in enumerate(rows):
      seq, end = row.seq, row.start + row.count
      feed['ids'][r, :row.count] = seq.tokens[row.start:end]
      feed['valid'][r, :row.count] = 1
      feed['positions'][r, :row.count] = np.arange(row.start, end)
      feed['table'][r, :len(seq.pages)] = seq.pages
      feed['ends'][r], feed['last'][r], feed['slots'][r] = end, row.count - 1, seq.slot
      s = seq.sampling
      banned = s.stop_ids[0] if s.stop_ids and len(seq.output) < s.min_tokens else -1
      settings.append((s, len(seq.output), banned))
    feed.update(sampling.host_arrays(settings, num_rows))
    if any(row.seq.sampling.penalized for row in rows):
      feed['seen'] = np.full((num_rows, self.shapes.max_pages * self.shapes.page_size), -1,
                             np.int32)
      feed['outputs_from'] = np.zeros(num_rows, np.int32)
      for r, row in enumerate(rows):
        seen = row.seq.tokens[:row.start + row.count]
        feed['seen'][r, :len(seen)] = seen
        feed['outputs_from'][r] = len(row.seq.prompt)
    return feed

  def _reset(self, pool):
    self.pool = jax.device_put(pool, self._pool_sharding)  # as the step returns it
    waiting = getattr(self, 'scheduler', None)
    s = self.settings
    self.scheduler = scheduler_lib.Scheduler(
        pages_lib.PagePool(s.num_pages, s.page_size), s.max_seqs, s.prefill_rows,
        s.prefill_chunk, share_prefixes=not self.recurrent,
        static_pages=self.shapes.max_pages if s.batching == 'static' else 0)
    for seq in (waiting.waiting if waiting else ()):
      seq.pages, seq.cached, seq.hashed = [], 0, 0
      self.scheduler.add(seq)

  def _recover(self, error):
    """A step failed: its running sequences end with 'error'; a fresh pool, the queue kept."""
    print(f'serve: engine step failed ({error}); {self.running} running requests end with '
          f'an error, {self.waiting} queued stay; restarting the engine', flush=True)
    for seq in list(self.scheduler.running):
      seq.error = error
      self._end(seq, 'error')
    self.restarts += 1
    self._reset(self._new_pool())
