"""Global batches from independent input streams.

A global batch of B rows is `num_streams` streams side by side: stream s fills rows
[s*B/n, (s+1)*B/n). Each process reads only the streams whose rows its devices hold, so no
process reads the whole batch (unless the batch is replicated over processes), and the data
depends on num_streams and the seed, not on the mesh or the number of processes.
"""

import numpy as np

from zoo import phases as phases_lib
from zoo.data import pipeline
from zoo.errors import ConfigError


def local_streams(row_blocks, batch_size, num_streams):
  """The streams behind this process's row blocks [(start, stop), ...] of the batch."""
  rows = batch_size // num_streams
  streams = set()
  for start, stop in row_blocks:
    if start % rows or stop % rows:
      raise ConfigError(f'data.num_streams={num_streams}: a process holds rows {start}:{stop} '
                        f'of the batch, which are not whole streams of {rows} rows; use a '
                        'multiple of the process count')
    streams.update(range(start // rows, stop // rows))
  streams = sorted(streams)
  if streams != list(range(streams[0], streams[-1] + 1)):
    raise ConfigError(f'this process holds the non-contiguous streams {streams}; order the '
                      'mesh so that each process holds one block of the batch')
  return streams


def _key(stream, num_streams):
  return f'{stream}-of-{num_streams}'


def _concat(parts):
  """Rows side by side; a mixture's per-source token counts (one vector per part) summed."""
  return {k: sum(p[k] for p in parts) if k == pipeline.SOURCE_TOKENS
          else np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _from_json(state):
  """A grain iterator state as JSON gave it back, with the tuples grain compares against
  (grain 0.2.18's concat-then-split takes a list [-1, -1] for a remainder:
  docs/contracts.md, Known problems)."""
  if isinstance(state, dict):
    return {k: {n: tuple(v) for n, v in s.items()} if k == 'remainder_slices' else
            _from_json(s) for k, s in state.items()}
  return state


def _stack(rows):
  return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


class TrainBatches:
  """Endless local batches: this process's streams, concatenated row-wise, in the run's
  phases (zoo/phases.py). batch(step) holds step's phase's rows: its batch /
  num_streams from each stream. A batch change takes the streams' next rows; a length
  change starts each stream anew at the document after the last one its rows held (a
  document split by the boundary gives up its tail), so no row is lost or repeated.

  rows(stream, phase, start) opens a stream's rows (pipeline.make_rows) for a phase from
  document `start`; specs[phase]: the batch spec of one stream's rows in that phase.
  skips: {step: count}: before the batch of step + 1, `count` batches are drawn and
  dropped (a spike's rollback, train.data_skips: zoo/train/spikes.py).
  Its state is one entry per stream, so a checkpoint written by any number of processes
  restores onto any other, as long as num_streams is the same.
  """

  def __init__(self, rows, specs, phases, streams, num_streams, num_sources=0, skips=None):
    self.rows, self.specs, self.phases = rows, specs, phases
    self.num_streams, self.num_sources = num_streams, num_sources
    self.skips = dict(skips or {})
    self.phase = 0
    self._at = {s: {'start': 0, 'next_document': 0} for s in streams}
    self._iters = {s: iter(rows(s, 0, 0)) for s in streams}

  def batch(self, step):
    """The local batch of step `step` (steps count from 1, in order)."""
    phase = phases_lib.at(self.phases, step)
    if self.phases[phase].seq_len != self.phases[self.phase].seq_len:
      for s, at in self._at.items():
        at['start'] = at['next_document']
        self._iters[s] = iter(self.rows(s, phase, at['start']))
    self.phase = phase
    for _ in range(self.skips.get(step - 1, 0)):
      self._draw(phase)
    return self._draw(phase)

  def _draw(self, phase):
    count = self.phases[phase].batch_size // self.num_streams
    parts = []
    for s, it in self._iters.items():
      part = pipeline.conform(_stack([next(it) for _ in range(count)]), self.specs[phase],
                              self.num_sources)
      if pipeline.NEXT_DOCUMENT in part:
        self._at[s]['next_document'] = part.pop(pipeline.NEXT_DOCUMENT)
      parts.append(part)
    return _concat(parts)

  def get_state(self):
    return {_key(s, self.num_streams): {'phase': self.phase, **self._at[s],
                                        'rows': it.get_state()}
            for s, it in self._iters.items()}

  def set_state(self, state):
    """Moves each stream to its saved position; returns the streams the state lacked."""
    missing = []
    for s in self._iters:
      saved = state.get(_key(s, self.num_streams))
      if saved is None:
        missing.append(s)
        continue
      if 'rows' not in saved:  # written before phases: the rows' state alone
        saved = {'phase': 0, 'start': 0, 'next_document': 0, 'rows': saved}
      self.phase = saved['phase']
      self._at[s] = {'start': saved['start'], 'next_document': saved['next_document']}
      self._iters[s] = iter(self.rows(s, self.phase, saved['start']))
      self._iters[s].set_state(_from_json(saved['rows']))
    for s in missing:  # from their first document, at the phase's length
      self._iters[s] = iter(self.rows(s, self.phase, 0))
    return missing


def eval_batches(datasets, limit=0):
  """One pass over this process's eval streams, as a list of local batches.

  Streams run side by side; one that has ended contributes all-padding rows (weight 0)
  until every stream has ended, or `limit` batches (0 = no limit).
  """
  iters = [iter(ds) for ds in datasets.values()]
  batches = []
  while not limit or len(batches) < limit:
    parts = [next(it, None) for it in iters]
    if all(p is None for p in parts):
      break
    template = next(p for p in parts if p is not None)
    batches.append(_concat([p if p is not None else padding(template) for p in parts]))
  return batches


def padding(batch):
  """A batch shaped like `batch` holding only padding (segment 0, loss weight 0)."""
  return {k: np.zeros_like(v) for k, v in batch.items()}
