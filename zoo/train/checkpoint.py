"""Checkpoints in WORKDIR/checkpoints (orbax): train state plus the data iterator's state.

Every process writes the state of its input streams (zoo/data/streams.py) to its own file
through grain's handler; a restore reads all the files, so each stream resumes where it
stopped whichever process reads it now (a different process count included).

Restores always go into an abstract target built from the current mesh, so a checkpoint
moves between meshes. An unreadable newest step is moved aside (never deleted) and the
previous good one is used.
"""

import contextlib
import json
import os
import re
import time

import grain
import jax
import orbax.checkpoint as ocp
from absl import logging
from jax.experimental import multihost_utils

from zoo import storage


class WriteError(RuntimeError):
  """A checkpoint could not be written; the message names the step, the cause, the path
  and the last good checkpoint."""


class Checkpointer:

  def __init__(self, directory, keep):
    self.directory = storage.absolute(directory)
    self.keep = keep
    self.manager = self._open()
    self.pending = None  # the step of the async save in flight
    self.failed = False  # a write failed (and was reported)

  def _open(self):
    options = ocp.CheckpointManagerOptions(max_to_keep=self.keep, create=True)
    return ocp.CheckpointManager(storage.native(self.directory), options=options,
                                 item_names=('state', 'data'))

  def save(self, step, state, data_iter):
    """Starts an async save; the previous one is finished first. A failed write (this one
    or the previous) raises WriteError."""
    start = time.time()
    self.finish()
    self.pending = step
    need = sum(a.nbytes for a in jax.tree.leaves(state)) * _ROOM + (8 << 20)
    free = storage.free_bytes(self.directory)
    if free is not None and free < need:  # fail cleanly before the writes start
      self.failed = True
      raise WriteError(self._failure(f'{free / 2**20:,.0f} MiB free, about '
                                     f'{need / 2**20:,.0f} MiB needed'))
    data = grain.checkpoint.CheckpointSave(_IteratorSnapshot(data_iter.get_state()))
    self._guard(lambda: self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=data), force=True))
    logging.info('checkpoint %d started in %.2fs', step, time.time() - start)

  def finish(self):
    """Waits for the save in flight; WriteError if it failed."""
    self._guard(self.manager.wait_until_finished)
    self.pending = None

  def _guard(self, write):
    try:
      write()
    except Exception as e:  # pylint: disable=broad-except
      self.failed = True
      raise WriteError(self._failure(_cause(e))) from None

  def _failure(self, cause):
    good = [s for s in self.manager.all_steps() if s != self.pending]
    last = f'step {max(good)} ({self.directory}/{max(good)})' if good else 'none yet'
    return (f'the checkpoint of step {self.pending} cannot be written to {self.directory} '
            f'({cause}); the last good checkpoint is {last}; free space (or fix the path) and '
            'run the same command to resume from it')

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
        aside = storage.join(self.directory, f'unreadable-{step}-{int(time.time())}')
        logging.warning('checkpoint %d is unreadable (%s: %s); moved to %s, trying the '
                        'previous one', step, type(e).__name__, str(e)[:200], aside)
        print(f'warning: checkpoint {step} is unreadable ({type(e).__name__}); moved aside '
              f'to {aside}, falling back to the previous one', flush=True)
        self._move({step: aside}, f'zoo_checkpoint_aside_{step}')
    return None

  def _move(self, targets, tag):
    """{step: new path}: each step's directory renamed (process 0; the others wait for it),
    out of the manager's sight."""
    self.manager.close()
    if jax.process_index() == 0:
      for step, target in targets.items():
        storage.rename(storage.join(self.directory, str(step)), target)
    multihost_utils.sync_global_devices(tag)
    self.manager = self._open()

  def set_aside_after(self, step, why):
    """Moves the checkpoints of steps after `step` to checkpoints/WHY-STEP (kept, never
    deleted; the manager no longer sees them) -> the steps moved."""
    self.finish()
    newer = [s for s in self.manager.all_steps() if s > step]
    if newer:
      self._move({s: storage.join(self.directory, f'{why}-{s}') for s in newer},
                 f'zoo_checkpoint_set_aside_{why}')
    return newer

  def _restore_streams(self, step, data_iter):
    files = storage.glob(storage.join(self.directory, str(step), 'data', 'process_*.json'))
    if not files:
      raise FileNotFoundError(f'no data iterator state in checkpoint {step}')
    state = {}
    for path in files:
      state.update(json.loads(storage.read_text(path)))
    missing = data_iter.set_state(state)
    if missing:
      print(f'warning: checkpoint {step} has no position for input streams {missing} of '
            f'{data_iter.num_streams} (it was written with another data.num_streams); they '
            'start over from their seed. Fix data.num_streams to resume the data exactly.',
            flush=True)

  def close(self):
    """Finishes the save in flight (WriteError if it failed) and closes the manager."""
    try:
      if not self.failed:
        self.finish()
    finally:
      try:
        self.manager.close()
      except Exception:  # pylint: disable=broad-except
        pass  # the failed write is already being reported


_ROOM = 1.1  # a checkpoint takes about the state's bytes plus metadata (and 8 MiB)


def _cause(error):
  """A short cause: the OS error an exception chain holds (tensorstore names its errno)."""
  while error is not None:
    if isinstance(error, OSError) and error.strerror:
      return f'{error.strerror}: {error.filename}'
    code = re.search(r"os_error_code='(\d+)'", str(error))
    if code:
      return os.strerror(int(code.group(1)))
    error = error.__cause__ or error.__context__
  return 'the log above says why'


class _IteratorSnapshot:
  """The iterator's position at save time, frozen: the async save writes it later."""

  def __init__(self, state):
    self._state = json.dumps(state).encode()

  def get_state(self):
    return self._state


def save_params(path, params, collections=None):
  """Params alone (an imported model), for train.init_params; with the model's state
  collections (DeepSeek-V3's routing biases: {'moe_bias': ...}) the tree is {'params':
  params, **collections}."""
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(storage.native(path), {'params': params, **collections} if collections
                    else params)
  checkpointer.wait_until_finished()


def saved_steps(workdir):
  """The steps WORKDIR/checkpoints holds, newest first, read without opening (or creating)
  anything."""
  runs = storage.join(workdir, 'checkpoints')
  if not storage.isdir(runs):
    return []
  return sorted((int(n) for n in storage.listdir(runs) if n.isdigit()), reverse=True)


def _params_source(path):
  """train.init_params -> (orbax directory, the key of the params in its tree or None): a
  params checkpoint (zoo.convert.hf), or a run's workdir (its newest checkpoint)."""
  if not storage.isdir(path):
    raise FileNotFoundError(f'train.init_params={path!r} is not a directory; run '
                            'python -m zoo.convert.hf first, train the run it names, or clear '
                            'train.init_params')
  runs = storage.join(path, 'checkpoints')
  if not storage.isdir(runs):  # params alone, or {'params', collections} (save_params)
    return path, 'params' if 'params' in _metadata(path) else None
  steps = saved_steps(path)
  if not steps:
    raise FileNotFoundError(f'train.init_params={path!r} is a run without checkpoints; train '
                            'it first')
  return storage.join(runs, str(steps[0]), 'state'), 'params'


def _flat(tree):
  return {'/'.join(str(getattr(k, 'key', k)) for k in keys): leaf
          for keys, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def init_plan(path, abstract_params):
  """Which of the model's parameters train.init_params holds -> (source directory, params
  key, names it holds, names it lacks (initialised), names the model lacks); a parameter
  of another shape is a ValueError naming it and both shapes."""
  directory, key = _params_source(path)
  saved = _saved_shapes(directory, key)
  wanted = param_shapes(abstract_params)
  for name in sorted(saved.keys() & wanted.keys()):
    if saved[name] != wanted[name]:
      raise ValueError(f'train.init_params={path!r}: parameter {name} is {saved[name]} '
                       f'there but {wanted[name]} in this model; make the model config match '
                       'the checkpoint')
  return (directory, key, sorted(saved.keys() & wanted.keys()),
          sorted(wanted.keys() - saved.keys()), sorted(saved.keys() - wanted.keys()))


def saved_param_shapes(directory):
  """{parameter name: shape} in a train-state checkpoint (checkpoints/STEP/state), from its
  metadata alone; raises if the checkpoint cannot be read."""
  return _saved_shapes(directory, 'params')


def _metadata(directory):
  """The tree an orbax checkpoint's metadata holds."""
  with _quiet():
    return ocp.StandardCheckpointer().metadata(storage.native(directory)).item_metadata.tree


def _saved_shapes(directory, key):
  """{name: shape} of the tree (or its `key` subtree) an orbax checkpoint's metadata holds."""
  tree = _metadata(directory)
  return param_shapes(tree[key] if key else tree)


def restore_collection(path, name, abstract):
  """train.init_params' state collection `name` (a run's, or an import's: DeepSeek-V3's
  moe_bias) laid out as `abstract`; None when it holds none (or of other shapes)."""
  directory, key = _params_source(path)
  tree = _metadata(directory)
  if not key or name not in tree or param_shapes(tree[name]) != param_shapes(abstract):
    return None
  target = {name: abstract}
  args = ocp.args.PyTreeRestore(
      item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
      partial_restore=True)
  with _quiet():
    return ocp.PyTreeCheckpointer().restore(storage.native(directory), args=args)[name]


def param_shapes(params):
  """{'/'-joined name: shape} of a parameter tree (arrays, abstract arrays or metadata)."""
  return {name: tuple(leaf.shape) for name, leaf in _flat(params).items()}


def restore_params(path, abstract_params, fresh_params=None):
  """train.init_params -> params laid out as `abstract_params` (shapes and shardings) say;
  the ones it lacks are taken from `fresh_params` (a ValueError without them)."""
  directory, key, held, lacked, _ = init_plan(path, abstract_params)
  if lacked and fresh_params is None:
    raise ValueError(f'train.init_params={path!r} lacks {", ".join(lacked)}; fine-tune first '
                     '(a new head is trained, not read)')
  flat_abstract = _flat(abstract_params)
  target = _unflat({name: flat_abstract[name] for name in held})
  target = {key: target} if key else target
  args = ocp.args.PyTreeRestore(
      item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
      partial_restore=True)  # the held parameters only: not the optimizer state, no heads
  with _quiet():
    restored = ocp.PyTreeCheckpointer().restore(storage.native(directory), args=args)
  restored = _flat(restored[key] if key else restored)
  fresh = _flat(fresh_params) if lacked else {}
  leaves = [restored[name] if name in restored else fresh[name] for name in flat_abstract]
  return jax.tree.unflatten(jax.tree.structure(abstract_params), leaves)


@contextlib.contextmanager
def _quiet():
  """orbax warns that a run's checkpoint item (its 'state') has no metadata file of its
  own when read alone; it needs none."""
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)
  try:
    yield
  finally:
    logging.set_verbosity(verbosity)


def _unflat(flat):
  tree = {}
  for name, leaf in flat.items():
    *parents, last = name.split('/')
    node = tree
    for part in parents:
      node = node.setdefault(part, {})
    node[last] = leaf
  return tree


# Orbax writes a replicated array in slices, one per replica, each cut by a compiled slice
# op (one compile per array shape and slice: 3.4 s of a smoke model's first save on 8 CPU
# devices, for 0.5 MB of state). Only arrays whose slices are this large are split.
REPLICA_PARALLEL_MIN_SLICE_BYTES = 16 << 20
with _quiet():  # orbax warns that a handler replaces its default
  ocp.type_handlers.register_type_handler(
      jax.Array, ocp.type_handlers.ArrayHandler(
          min_slice_bytes_for_replica_parallel=REPLICA_PARALLEL_MIN_SLICE_BYTES),
      override=True)
