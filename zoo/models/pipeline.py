"""Pipeline parallelism over a `stage` mesh axis: a layer stack split into contiguous stages
and the batch into microbatches that flow through them (GPipe's fill-drain schedule).

The stack's parameters stay stacked [layers, ...] (the checkpoint is the same at any stage
count) and split over `stage` along the layer axis (the rule `layers` -> `stage`), so stage
s holds layers s*L/S .. (s+1)*L/S - 1. Each of the M + S - 1 iterations runs every stage's
layers on the microbatch it holds (a vmap over the stage axis: each device computes only
its own stage), then passes each stage's output to the next stage (a roll along the
stage axis, one collective permute) while the first stage takes the next microbatch and
the last stage's output is kept. Per-row inputs (masks, positions, a dense position bias,
the encoder output) are taken for the microbatch each stage holds. A stage computes
nothing useful while the pipe fills and drains: the bubble, (S - 1) / (M + S - 1) of the
iterations.

Microbatch j holds rows j, j + M, j + 2M, ... (as gradient accumulation deals them), so
every data shard keeps its rows in every microbatch.

Glossary: S stages, M microbatches, b rows per microbatch, B batch.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp


def num_stages():
  """The size of the current mesh's `stage` axis (1 outside one)."""
  mesh = jax.sharding.get_abstract_mesh()
  return 1 if mesh.empty else mesh.shape.get('stage', 1)


def bubble(stages, microbatches):
  """The fraction of fill-drain iterations a stage spends idle."""
  return (stages - 1) / (microbatches + stages - 1)


def _deal(x_B, m):
  """[B, ...] -> [M, B/M, ...]: microbatch j holds rows j, j + M, ..."""
  return x_B.reshape(x_B.shape[0] // m, m, *x_B.shape[1:]).swapaxes(0, 1)


def _undeal(x_M):
  return x_M.swapaxes(0, 1).reshape(-1, *x_M.shape[2:])


def _stage_constraint(x_S):
  """Dim 0 over `stage`, dim 1 (rows) over the batch axes, the rest as they fall."""
  axes = ('stage', 'batch') + (None,) * (x_S.ndim - 2)
  return nn.with_logical_constraint(x_S, axes)


def run(layer_fn, params, x_BLD, rows, stages, microbatches, rng=None):
  """The stack on the pipeline -> x [B, L, D] after every layer.

  layer_fn(layer params, x [b, L, D], rows of the microbatch, rng or None) -> x;
  params: the stacked [layers, ...] tree; rows: a tree of [B, ...] arrays (one row each).
  """
  S, M = stages, microbatches
  per_stage = jax.tree.leaves(params)[0].shape[0] // S
  stage_params = jax.tree.map(lambda p: p.reshape(S, per_stage, *p.shape[1:]), params)
  x_MbLD = _deal(x_BLD, M)
  # the rows' arrays are dealt into microbatches; scalars (a mask's q_start) stay whole
  leaves, treedef = jax.tree.flatten(rows)
  split = [i for i, leaf in enumerate(leaves) if jnp.ndim(leaf)]
  rows_M = [_deal(leaves[i], M) for i in split]

  def rows_of(values):
    whole = list(leaves)
    for i, value in zip(split, values):
      whole[i] = value
    return treedef.unflatten(whole)

  def stage_fn(params_s, x_bLD, values_b, stage, t):
    rows_b = rows_of(values_b)

    def layer(x, inputs):
      p, i = inputs
      key = None if rng is None else jax.random.fold_in(
          jax.random.fold_in(rng, t), stage * per_stage + i)
      return layer_fn(p, x, rows_b, key), None
    return jax.lax.scan(layer, x_bLD, (params_s, jnp.arange(per_stage)))[0]

  def iteration(carry, t):
    state_SbLD, out_MbLD = carry
    state_SbLD = state_SbLD.at[0].set(x_MbLD[jnp.minimum(t, M - 1)])
    micro_S = jnp.clip(t - jnp.arange(S), 0, M - 1)  # the microbatch each stage holds
    rows_S = [_stage_constraint(r[micro_S]) for r in rows_M]
    # spmd_axis_name: the layers' sharding constraints keep the stage dim on `stage`
    new_SbLD = _stage_constraint(jax.vmap(stage_fn, in_axes=(0, 0, 0, 0, None),
                                          spmd_axis_name='stage')(
        stage_params, state_SbLD, rows_S, jnp.arange(S), t))
    done = t - (S - 1)  # the microbatch the last stage just finished (< 0 while filling)
    out_MbLD = jnp.where(done >= 0, out_MbLD.at[jnp.maximum(done, 0)].set(new_SbLD[S - 1]),
                         out_MbLD)
    return (_stage_constraint(jnp.roll(new_SbLD, 1, axis=0)), out_MbLD), None

  state = _stage_constraint(jnp.zeros((S, *x_MbLD.shape[1:]), x_BLD.dtype))
  (_, out_MbLD), _ = jax.lax.scan(iteration, (state, jnp.zeros_like(x_MbLD)),
                                  jnp.arange(M + S - 1))
  return _undeal(out_MbLD)
