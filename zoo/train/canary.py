"""The partitioning canary: a sharded step checked against one device before training.

On simulated CPU devices (sharding experiments and tests without a pod) a mesh's result can
be silently wrong: jax 0.10.2's XLA:CPU SPMD partitioner swaps two row blocks of a sharded
matmul at small row counts on a data x fsdp x tensor mesh (docs/contracts.md, Known
problems). So before the first step on a CPU mesh with two or more of data, fsdp, tensor and
expert split, the run computes one train step's loss and gradient norm (in float32, the
update dropped: learning rate 0) at its own shapes, with its own state and first batch, on
the mesh and on one device. Equal within RTOL: train. Otherwise the run tries WORKAROUND
(the residual stream's embed dimension unsplit, exact for the pattern above), trains with it
and says so in one line, or refuses in one line naming the jax version.

train.canary: 'fix' (the above; default), 'refuse' (no workaround), 'off'.
"""

import dataclasses

import jax
import numpy as np

from zoo import run as run_lib
from zoo import sharding
from zoo.train import runtime

RTOL = 1e-5  # a float32 step on a mesh equals one device's to ~1e-6
WORKAROUND = (('activation_embed', None),)  # before the config's rules: it wins
CHECKED_AXES = ('data', 'fsdp', 'tensor', 'expert')  # context and stage change the program


class Mismatch(RuntimeError):
  """The mesh's step differs from one device's and no workaround makes it equal."""


def wanted(canary, mesh):
  """Whether this run (train.canary=`canary`) checks: a CPU mesh of one process with two or
  more axes split, all of them CHECKED_AXES."""
  split = {axis for axis, size in mesh.shape.items() if size > 1}
  return (canary != 'off' and mesh.devices.flat[0].platform == 'cpu'
          and jax.process_count() == 1 and len(split) >= 2 and split <= set(CHECKED_AXES))


def check(config, place, state, batch):
  """-> (the placement to train with: `place`, or it with WORKAROUND, a line for people or
  None when nothing changed); Mismatch when no placement matches one device."""
  f32 = config.copy_and_resolve_references()
  f32.model.dtype = 'float32'
  f32.train.teacher.workdir = ''  # the student's own step: a teacher's forward adds no split
  parts = runtime.model_state(run_lib.resolve(f32), place.mesh)
  one = _one_device(f32, parts, place, state, batch)
  got = _on_mesh(f32, parts, place, state, batch)
  if _close(got, one):
    return place, None
  mesh = sharding.describe(place.mesh.shape)
  seen = (f'canary: on {mesh} the first step gives loss {got[0]:.6f}, grad_norm {got[1]:.6f} '
          f'but one device {one[0]:.6f}, {one[1]:.6f}')
  if config.train.canary == 'fix':
    fixed = dataclasses.replace(place, rules=WORKAROUND + place.rules)
    if _close(_on_mesh(f32, parts, fixed, state, batch), one):
      return fixed, (f'{seen} (jax {jax.__version__} XLA:CPU, docs/contracts.md Known '
                     "problems); training with ('activation_embed', None), which matches it")
  raise Mismatch(f'{seen}; jax {jax.__version__} partitions this mesh wrongly on CPU '
                 '(docs/contracts.md Known problems) and no workaround matches; use another mesh '
                 "or rows per device, or train.canary='off' to train anyway")


def _close(got, want):
  return all(abs(g - w) <= RTOL * max(abs(w), 1.0) for g, w in zip(got, want))


def _metrics(jitted, state, batch):
  _, metrics = jitted(state, batch)
  return float(metrics['loss']), float(metrics['grad_norm'])


def _on_mesh(config, parts, place, state, batch):
  return _metrics(parts.jit_train_step(place, config), state, batch)


def _one_device(config, parts, place, state, batch):
  device = jax.devices()[0]
  one = config.copy_and_resolve_references()
  for axis in sharding.MESH_AXES:
    if axis in one.mesh:
      one.mesh[axis] = 1
  mesh = sharding.make_mesh(one.mesh, [device])
  host = jax.tree.map(np.asarray, jax.device_get((state, batch)))
  step = runtime.Jitted(jax.jit(parts.train_step(config)), mesh, place.rules)
  return _metrics(step, *jax.device_put(host, device))
