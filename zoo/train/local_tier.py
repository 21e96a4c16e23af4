"""The fast checkpoint tier: each process's own shards of the train state and its input
streams' position, on its own disk (a local SSD, or /dev/shm for host memory), every
train.local_tier.every steps. The persistent tier (checkpoint.py: WORKDIR/checkpoints, a
bucket on pods) is written every train.checkpoint_every steps.

orbax's emergency checkpoint manager (orbax.checkpoint.experimental.emergency, 0.12.8) was
the first candidate and is not used: it is experimental, built for multi-slice TPU pods (a
lost slice's local checkpoint is restored by broadcast from another slice along a replica
axis, so one slice, or a CPU pod, has nothing to restore from), and it holds one state tree,
with no place for each process's input-stream files.

Layout: PATH/process_K/STEP/{arrays.npz, shards.json, data.json}, written under a temporary
name and renamed whole, so a step directory is complete or absent. Only this process's
shards are written (a replicated block once), and a restore puts each back on the device
that holds its block, so a local step restores only onto the layout that wrote it (the same
mesh, processes and devices); a process whose local steps do not fit, or were lost with its
host, makes every process restore from the persistent tier, which then refills this one.
"""

import json
import os
import shutil
import threading

import jax
import numpy as np
from jax.experimental import multihost_utils

from zoo import storage


class LocalTier:

  def __init__(self, path, keep):
    self.directory = os.path.join(storage.absolute(path), f'process_{jax.process_index()}')
    self.keep = keep
    os.makedirs(self.directory, exist_ok=True)
    for name in os.listdir(self.directory):  # writes a killed process left unfinished
      if name.startswith('.') and name.endswith('.tmp'):
        shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)
    self.writer = None  # the write in flight (a thread)
    self.error = None

  def steps(self):
    """This process's complete local steps, oldest first."""
    return sorted(int(n) for n in os.listdir(self.directory) if n.isdigit())

  def save(self, step, state, data_iter):
    """Copies this process's shards to host memory (the step's state is complete then), and
    writes them in a thread; the previous write is finished first."""
    self.finish()
    shards = [_unique_shards(leaf) for leaf in jax.tree.leaves(state)]
    host = jax.device_get([[data for _, data in leaf] for leaf in shards])
    indices = [[index for index, _ in leaf] for leaf in shards]
    record = {'layout': _layout(state), 'indices': indices}
    data = data_iter.get_state()
    self.writer = threading.Thread(target=self._write, args=(step, host, record, data),
                                   name='zoo-local-tier', daemon=True)
    self.writer.start()

  def _write(self, step, host, record, data):
    try:
      tmp = os.path.join(self.directory, f'.{step}.tmp')
      shutil.rmtree(tmp, ignore_errors=True)
      os.makedirs(tmp)
      np.savez(os.path.join(tmp, 'arrays.npz'),  # raw bits: bfloat16 is no numpy type
               **{f'{i}_{j}': _bits(a) for i, leaf in enumerate(host) for j, a in enumerate(leaf)})
      with open(os.path.join(tmp, 'shards.json'), 'w', encoding='utf-8') as f:
        json.dump(record, f)
      with open(os.path.join(tmp, 'data.json'), 'w', encoding='utf-8') as f:
        json.dump(data, f)
      os.replace(tmp, os.path.join(self.directory, str(step)))
      for old in self.steps()[:-self.keep]:
        shutil.rmtree(os.path.join(self.directory, str(old)), ignore_errors=True)
    except OSError as e:  # a full local disk costs the fast tier, not the run
      shutil.rmtree(os.path.join(self.directory, f'.{step}.tmp'), ignore_errors=True)
      self.error = f'{e.strerror}: {e.filename}'

  def finish(self):
    if self.writer is not None:
      self.writer.join()
      self.writer = None
    if self.error:
      print(f'warning: the local checkpoint tier cannot be written ({self.error}); the '
            'persistent tier goes on', flush=True)
      self.error = None

  def common_step(self, abstract_state):
    """The newest local step every process holds for this layout, or None (agreed)."""
    layout = _layout(abstract_state)
    mine = [s for s in self.steps() if _read_layout(self.directory, s) == layout]
    if jax.process_count() == 1:
      return mine[-1] if mine else None
    padded = np.full(self.keep, -1, np.int64)
    padded[:len(mine[-self.keep:])] = mine[-self.keep:]
    every = multihost_utils.process_allgather(padded)
    common = set.intersection(*(set(row.tolist()) for row in every)) - {-1}
    return max(common) if common else None

  def restore(self, step, abstract_state, data_iter):
    """-> the train state of local `step`, placed as `abstract_state` says; `data_iter` is
    moved to that step's position."""
    directory = os.path.join(self.directory, str(step))
    with open(os.path.join(directory, 'shards.json'), encoding='utf-8') as f:
      indices = json.load(f)['indices']
    arrays = np.load(os.path.join(directory, 'arrays.npz'))
    leaves, tree = jax.tree.flatten(abstract_state)
    restored = []
    for i, (leaf, keys) in enumerate(zip(leaves, indices)):
      blocks = {_key(k): arrays[f'{i}_{j}'].view(leaf.dtype) for j, k in enumerate(keys)}
      restored.append(jax.make_array_from_callback(
          leaf.shape, leaf.sharding,
          lambda index, blocks=blocks, shape=leaf.shape: blocks[_index(index, shape)]))
    with open(os.path.join(directory, 'data.json'), encoding='utf-8') as f:
      data_iter.set_state(json.load(f))
    return jax.tree.unflatten(tree, restored)

  def set_aside_after(self, step, why):
    """Renames this process's local steps after `step` to WHY-STEP (kept)."""
    self.finish()
    for s in self.steps():
      if s > step:
        os.rename(os.path.join(self.directory, str(s)), os.path.join(self.directory, f'{why}-{s}'))

  def close(self):
    self.finish()


def restore_newest(saved, local, abstract_state, data_iter):
  """The newest complete checkpoint of either tier -> (step, state), or None; the local
  tier wins a tie (it is faster to read)."""
  step = local.common_step(abstract_state) if local else None
  if step is not None and step >= max(saved.manager.all_steps(), default=-1):
    try:
      state, failed = local.restore(step, abstract_state, data_iter), ''
    except Exception as e:  # pylint: disable=broad-except
      state, failed = None, f'{type(e).__name__}: {str(e)[:200]}'
    if not _any_process(bool(failed)):
      print(f'restored step {step} from the local tier ({local.directory})', flush=True)
      return step, state
    why = failed or 'it failed on another process'
    print(f'warning: the local tier cannot restore step {step} ({why}); restoring from the '
          'persistent tier', flush=True)
  return saved.restore(abstract_state, data_iter)


def _any_process(flag):
  if jax.process_count() == 1:
    return flag
  return bool(multihost_utils.process_allgather(np.array(flag)).any())


def _bits(array):
  return np.asarray(array, order='C').view(f'u{array.dtype.itemsize}')


def _index(index, shape):
  """A shard's index (slices) -> a hashable [[start, stop], ...]."""
  return tuple(tuple(s.indices(n)[:2]) for s, n in zip(index, shape))


def _key(saved):
  return tuple(tuple(pair) for pair in saved)


def _unique_shards(array):
  """[(index, data)] of this process's blocks of `array`, a replicated block once."""
  seen = {}
  for shard in array.addressable_shards:
    seen.setdefault(_index(shard.index, array.shape), shard.data)
  return list(seen.items())


def _layout(state):
  """What a local step must match to be restored: every leaf's shape and dtype, and which
  of the global devices this process holds blocks on."""
  leaves = jax.tree.leaves(state)
  devices = sorted(d.id for d in leaves[0].sharding.addressable_devices) if leaves else []
  return {'process': jax.process_index(), 'processes': jax.process_count(),
          'devices': devices, 'mesh': _mesh(leaves),
          'specs': [str(getattr(leaf.sharding, 'spec', '')) for leaf in leaves],
          'leaves': [[list(leaf.shape), str(leaf.dtype)] for leaf in leaves]}


def _mesh(leaves):
  for leaf in leaves:
    mesh = getattr(leaf.sharding, 'mesh', None)
    if mesh is not None:
      return {str(k): int(v) for k, v in mesh.shape.items()}
  return {}


def _read_layout(directory, step):
  try:
    with open(os.path.join(directory, str(step), 'shards.json'), encoding='utf-8') as f:
      return json.load(f)['layout']
  except (OSError, ValueError, KeyError):
    return None
