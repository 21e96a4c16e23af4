"""What the train step's backward pass keeps, traced: the residuals JAX saves from the
forward pass (jax.vjp's residuals of the family's loss, abstract shapes, nothing
compiled), per batch row, with the attention kernel of the platform planned for.

Traced with the layers unrolled at one and two units per stack (a unit: a layer, a MoE
group of moe.every layers, the layers of model.attention.pattern; after model.moe.first_dense
dense ones), so a unit's share is the difference and the full depth is extrapolated (as
zoo/plan/compiled.py counts the FLOPs):
- `kept`: bytes per row the whole step keeps with the config's remat policy (every layer's
  and the embedding's and loss's);
- `layers`: the part of `kept` the stacked layers keep (after the first dense ones);
- `layer`: bytes per row one layer keeps with no remat, the largest over the stacks and
  the unit's layers (a pattern's global layer, a group's MoE one; each added alone): what a
  layer's forward holds for its backward, so the working set of a rematerialised layer's
  backward as well;
- `layer_embed`: the part of `layer` in [..., D] values (d_model last) of the compute
  dtype: inside a layer the residual stream is whole on each tensor shard (the rules split
  its heads and F; float32 ones, a norm's, are fusions' work on the shard);
- `layer_float32`: the part of `layer` in float32 [rows, tokens, D] values where the
  compute dtype is narrower (a norm's statistics and products, a float32 projection):
  XLA:TPU's fusions recompute these at a rematerialised layer's backward.
A batch of one row is traced. Residuals computed from the parameters alone (their
compute-dtype copies) and the logits (the vocabulary last) are left out: the plan counts
fsdp's gathered weights and the loss's logits itself. (Left out by their shape instead, a
[L, F] activation would go with the [D, F] weight it matches wherever L = D.)
"""

import functools
import math

import flax.linen as nn
import jax
from jax.extend import core as jax_core
import ml_collections
import numpy as np

from zoo import families
from zoo import objectives
from zoo import kernels
from zoo import sharding
from zoo.data import task as task_lib


def _traced(config, layers, remat, on):
  """Bytes of one row's activations the backward keeps for `config` with `layers` per stack
  (a list, LAYER_FIELDS order) and the remat policy `remat` -> [all, those d_model wide in
  the compute dtype, the float32 [rows, tokens, D] ones where the compute dtype is
  narrower]."""
  variant = config.copy_and_resolve_references()
  with variant.unlocked():
    variant.model.update(scan_layers=False, remat=remat)
    variant.train.batch_size = 1
    if variant.data.task.kind in task_lib.HEADED and not variant.model.num_labels:
      variant.model.num_labels = 2  # a head the task has not sized yet: a row's few values
    for field, n in zip(families.get(variant.model).LAYER_FIELDS, layers):
      variant.model[field] = n
    m = variant.model
    try:
      kernels.resolve(m.attention.kernel, m.position in ('t5_bias', 'alibi'), np.dtype(m.dtype),
                      (variant.data.seq_len,) * 2, on=on, softcap=bool(m.attention.softcap))
    except ValueError:  # a kernel that cannot run there (plan mode's compile says so): XLA's
      m.attention.kernel = 'xla'
    if on == 'gpu' and jax.default_backend() != 'gpu' and m.attention.kernel != 'xla':
      # cuDNN's attention traces only beside a GPU: splash, a fused kernel keeping what
      # cuDNN's keeps (its output and log-sum-exp), stands in
      m.attention.kernel, on = 'auto', 'tpu'
  model = families.build(variant.model, variant.train.lora)
  loss = objectives.loss_fn(model, variant)
  batch = objectives.abstract_batch(variant)
  with kernels.target(on), nn.logical_axis_rules(sharding.rules(variant)):
    boxed = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                           families.example_batch(variant.model, 1, variant.data.seq_len))
    variables = nn.unbox(boxed)
    params = variables['params']
    # the other collections (MoE's router bias and statistics): small, held as zeros
    others = jax.tree.map(lambda v: np.zeros(v.shape, v.dtype),
                          {k: v for k, v in variables.items() if k != 'params'})
    rng = jax.random.PRNGKey(0)  # training: dropout's masks are kept too
    saved = _residuals(lambda p, b: loss({**others, 'params': p}, b, rng).total, params, batch)
  m = variant.model
  compute, narrower = np.dtype(m.dtype), np.dtype(m.dtype) != np.float32
  parts = np.zeros(3)
  for a in saved:
    if a.shape[-1:] != (m.vocab_size,):
      wide = a.shape[-1:] == (m.d_model,)
      stream = wide and a.ndim == 3  # [rows, tokens, D], not [rows, heads, L, L = D] scores
      parts += int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize * np.array(
          [1, wide and a.dtype == compute, stream and narrower and a.dtype == np.float32])
  return parts


def _residuals(f, params, *args):
  """The abstract values jax.vjp(f, params, *args) keeps for the backward pass, each once
  (what jax's saved_residuals lists, without its descriptions), but the arguments themselves
  and what is computed from the parameters alone (their compute-dtype copies, reshaped)."""
  closed, shapes = jax.make_jaxpr(lambda *a: jax.vjp(f, *a), return_shape=True)(params,
                                                                                 *args)
  count = len(jax.tree.leaves(shapes[1]))
  arguments = set(closed.jaxpr.invars)
  weights = set(closed.jaxpr.invars[:len(jax.tree.leaves(params))])
  for eqn in closed.jaxpr.eqns:  # in order: an equation of weights alone gives weights
    read = [v for v in eqn.invars if isinstance(v, jax_core.Var)]
    if read and all(v in weights for v in read):
      weights.update(eqn.outvars)
  kept = {id(v): v for v in closed.jaxpr.outvars[len(closed.jaxpr.outvars) - count:]
          if isinstance(v, jax_core.Var) and v not in arguments and v not in weights}
  return [v.aval for v in kept.values()]


@functools.lru_cache(maxsize=64)
def _measure(frozen, on):
  config = frozen.as_configdict()
  m = config.model
  fields = families.get(m).LAYER_FIELDS
  dense = m.moe.first_dense if m.moe.num_experts else 0
  # the repeating unit: a MoE group of moe.every layers, a layer pattern's (local and
  # global, ...) layers, or both
  unit = math.lcm(m.moe.every if m.moe.num_experts else 1, len(m.attention.pattern) or 1)
  base_layers = [dense + unit] * len(fields)
  policy = m.remat

  seen = {}

  def traced(remat, i=0, extra=0):
    """The traced bytes with `extra` layers on stack i (each traced once: with remat none
    the policy's traces are the working set's too)."""
    layers = list(base_layers)
    layers[i] += extra
    key = (remat, tuple(layers))
    if key not in seen:
      seen[key] = _traced(config, layers, remat, on)
    return seen[key]

  base = traced(policy)[0]
  per_layer = [(traced(policy, i, unit)[0] - base) / unit for i in range(len(fields))]
  kept = base + sum((m[field] - dense - unit) * share for field, share in zip(fields, per_layer))
  layered = sum((m[field] - dense) * share for field, share in zip(fields, per_layer))
  # the largest layer of the unit without remat: each of its layers added one at a time
  largest = np.zeros(3)
  for i in range(len(fields)):
    grown = [traced('none', i, j) for j in range(unit + 1)]
    largest = max([largest, *(b - a for a, b in zip(grown, grown[1:]))], key=lambda x: x[0])
  return {'kept': float(kept), 'layers': float(layered), 'layer': float(largest[0]),
          'layer_embed': float(largest[1]), 'layer_float32': float(largest[2])}


def measure(config, on, context=1):
  """{'kept', 'layers', 'layer', 'layer_embed', 'layer_float32'} bytes (the module
  docstring) for the run's config on platform `on` ('tpu', 'gpu', 'cpu'); on a ring of
  `context` devices, of a device's block of data.seq_len / context positions: the row's
  bytes at length x taken as a x + b x^2 (the scores of attention without a flash kernel
  are the square) from traces at data.seq_len and half of it, so that every context of a
  sweep costs two."""
  whole = _measure(_key(config, 1), on)
  if context == 1:
    return whole
  half = _measure(_key(config, 2), on)
  x = config.data.seq_len
  out = dict(whole)
  for name in out:
    b = 2 * (whole[name] - 2 * half[name]) / x**2
    a = (whole[name] - b * x**2) / x
    out[name] = max(a * x / context + b * (x / context)**2, 0.0)
  return out


def _key(config, shorter):
  """The config as the trace reads it (data.seq_len / shorter), frozen: one cache entry for
  all the sweep's rows."""
  traced = config.copy_and_resolve_references()
  with traced.unlocked():
    traced.data.seq_len //= shorter
    traced.model.update(pipeline_microbatches=0, pipeline_repeats=1)
    traced.mesh.update({a: 1 for a in sharding.MESH_AXES})
    traced.train.update(microbatches=1, phases='')
  return ml_collections.FrozenConfigDict(traced)
