"""Global batches from independent input streams.

A global batch of B rows is `num_streams` streams side by side: stream s fills rows
[s*B/n, (s+1)*B/n). Each process reads only the streams whose rows its devices hold, so no
process reads the whole batch (unless the batch is replicated over processes), and the data
depends on num_streams and the seed, not on the mesh or the number of processes.
"""

import numpy as np

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


class TrainBatches:
  """Endless local batches: this process's streams, concatenated row-wise.

  Its state is one entry per stream, so a checkpoint written by any number of processes
  restores onto any other, as long as num_streams is the same.
  """

  def __init__(self, datasets, num_streams):
    self.num_streams = num_streams
    self._iters = {s: iter(ds) for s, ds in datasets.items()}

  def __iter__(self):
    return self

  def __next__(self):
    return _concat([next(it) for it in self._iters.values()])

  def get_state(self):
    return {_key(s, self.num_streams): it.get_state() for s, it in self._iters.items()}

  def set_state(self, state):
    """Moves each stream to its saved position; returns the streams the state lacked."""
    missing = []
    for s, it in self._iters.items():
      if _key(s, self.num_streams) in state:
        it.set_state(state[_key(s, self.num_streams)])
      else:
        missing.append(s)
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
