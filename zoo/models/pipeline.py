"""Pipeline parallelism over a `stage` mesh axis: a layer stack split into stages and the
batch into microbatches that flow through them, fill-drain (GPipe) or circular.

The stack's parameters stay stacked [layers, ...] (the checkpoint is the same at any stage
count) and split over `stage` along the layer axis (the rule `layers` -> `stage`). The
layers form S x R groups of consecutive layers (R repeats, model.pipeline_repeats): group
r S + s runs on stage s, so a microbatch goes round the stages R times. R = 1 is fill-drain:
stage s holds layers s L/S .. (s+1) L/S - 1, where the stacked parameters already lie. With
R > 1 (circular, as in Megatron's interleaved schedule) each stage holds R groups, so the
step first moves the parameters to them (collectives over `stage`, and the gradients
back in the backward pass); in exchange the pipe fills and drains once for R rounds.

Each of the R M + S - 1 iterations runs every stage's group on the microbatch it holds (a
vmap over the stage axis: each device computes only its own stage), then passes each
stage's output to the next stage (a roll along the stage axis, one collective permute)
while the first stage takes the next microbatch: a new one in the first round, else the one
the last stage handed back a round earlier (kept in a buffer of M microbatches; M >= S, so
it is back in time). Per-row inputs (masks, positions, the encoder output) travel with
their microbatch the same way, so no stage indexes rows by a per-stage index (a gather XLA's
SPMD partitioner mis-partitions on TPU meshes once the stage's round is per-stage too). A
stage computes nothing useful while the pipe fills and drains: the bubble,
(S - 1) / (R M + S - 1) of the iterations.

With a remat policy each layer is rematerialised here (not by the stack's nn.remat), its
parameters picked inside the checkpoint, so the backward pass picks them again from the
stage's parameters rather than keep the round's group for every iteration (with
model.remat='none' a circular pipeline does keep them).

A layer may also return sums that add over microbatches (a MoE layer's routing statistics):
each stage adds its layers' sums into its round's slot while it works on a microbatch, so
the stack returns, per layer, the whole batch's sums (the balance loss over the whole
batch, as without stages).

Microbatch j holds rows j, j + M, j + 2M, ... (as gradient accumulation deals them), so
every data shard keeps its rows in every microbatch. The [M, b, L, D] buffers and each
microbatch picked from them are pinned to that layout: left to itself XLA's partitioner
all-gathered the whole input buffer over the batch axes every iteration to take one
microbatch from it (llama3_70b at 16 layers, stage 4 x fsdp 16 x tensor 4: 23.37 GiB per
chip, 13.67 pinned).

Glossary: S stages, R repeats, G layers per group, M microbatches, b rows per microbatch,
B batch, L length, D d_model.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp


def bubble(stages, microbatches, repeats=1):
  """The fraction of the iterations a stage spends idle while the pipe fills and drains."""
  return (stages - 1) / (repeats * microbatches + stages - 1)


def _deal(x_B, m):
  """[B, ...] -> [M, B/M, ...]: microbatch j holds rows j, j + M, ..."""
  return x_B.reshape(x_B.shape[0] // m, m, *x_B.shape[1:]).swapaxes(0, 1)


def _undeal(x_M):
  return x_M.swapaxes(0, 1).reshape(-1, *x_M.shape[2:])


def _rows_axes(ndim):
  """A [b, L, ...] microbatch array's axes: rows over the batch axes, the sequence over
  `context` (every per-row array the stacks pass holds a sequence in dim 1)."""
  return (('batch', 'length') + (None,) * ndim)[:ndim]


def _stage_constraint(x_S):
  """Dim 0 over `stage`, then rows and sequence (_rows_axes), the rest as they fall."""
  return nn.with_logical_constraint(x_S, ('stage',) + _rows_axes(x_S.ndim - 1))


def _buffer_constraint(x_M):
  """A [M, b, ...] microbatch buffer: laid out like the batch it deals (left to itself,
  XLA replicated the scan's buffers: every device held every row)."""
  return nn.with_logical_constraint(x_M, (None,) + _rows_axes(x_M.ndim - 1))


def _rows_constraint(x_b):
  """One microbatch [b, ...] picked from a buffer: its rows stay where they lie."""
  return nn.with_logical_constraint(x_b, _rows_axes(x_b.ndim))


def _regroup(p, S, R, G):
  """A stacked parameter [layers, ...] -> [S, R, G, ...]: stage s, its round r: layers
  (r S + s) G .. (r S + s + 1) G - 1; S pinned to `stage` (the rest as they fall). Left to
  itself, where the stage axis's blocks of layers fall across both R and S (S = 4, R = 2:
  block 2 r + s // 2), the partitioner split S over half the stage axis, and every
  iteration's picked layer held two stages' weights (t5_v1_1_xl on v5p-64, fsdp 4 x
  tensor 2 x stage 4, 2 rounds, remat none: 24.89 GiB per chip, 19.23 pinned)."""
  spec = jax.sharding.PartitionSpec
  return jax.lax.with_sharding_constraint(
      p.reshape(R, S, G, *p.shape[1:]).swapaxes(0, 1),
      spec('stage', None, None, *[spec.UNCONSTRAINED] * (p.ndim - 1)))


def _stage_fn(layer_fn, rows_of, rng, checkpoint, S, R, G):
  """-> stage_fn(stage's parameters, x [b, L, D], its rows' values, stage, round r, t) ->
  (x, sums [G, ...]): the stage's G layers of round r on one microbatch."""
  def one_layer(params_s, x_bLD, rows_b, r, i, key):
    # the layer's parameters are taken inside the checkpoint: the backward pass takes them
    # again from the stage's (loop-invariant) parameters instead of keeping each
    # iteration's round's group
    return layer_fn(jax.tree.map(lambda p: p[r if R > 1 else 0, i], params_s), x_bLD, rows_b,
                    key)
  if checkpoint is not None:
    one_layer = checkpoint(one_layer)

  def stage_fn(params_s, x_bLD, values_b, stage, r, t):
    rows_b = rows_of(values_b)

    def layer(x, i):
      key = None if rng is None else jax.random.fold_in(
          jax.random.fold_in(rng, t), (r * S + stage) * G + i)
      return one_layer(params_s, x, rows_b, r, i, key)
    return jax.lax.scan(layer, x_bLD, jnp.arange(G))  # (x, sums [G, ...])
  return stage_fn


def run(layer_fn, params, x_BLD, rows, stages, microbatches, rng=None, repeats=1,
        checkpoint=None):
  """The stack on the pipeline -> (x [B, L, D] after every layer, sums [layers, ...]).

  layer_fn(layer params, x [b, L, D], rows of the microbatch, rng or None) -> (x, sums):
  sums a tree of arrays that add over microbatches (a MoE layer's statistics; {} for
  none), returned per layer added over the batch's microbatches;
  params: the stacked [layers, ...] tree; rows: a tree of [B, ...] arrays (one row each);
  checkpoint: a remat wrapper for each layer (the remat policy), or None.
  """
  S, M, R = stages, microbatches, repeats
  G = jax.tree.leaves(params)[0].shape[0] // (S * R)
  stage_params = jax.tree.map(lambda p: _regroup(p, S, R, G), params)
  x_MbLD = _buffer_constraint(_deal(x_BLD, M))
  # the rows' arrays are dealt into microbatches; scalars (a mask's q_start) stay whole
  leaves, treedef = jax.tree.flatten(rows)
  split = [i for i, leaf in enumerate(leaves) if jnp.ndim(leaf)]
  rows_M = [_buffer_constraint(_deal(leaves[i], M)) for i in split]

  def rows_of(values):
    whole = list(leaves)
    for i, value in zip(split, values):
      whole[i] = value
    return treedef.unflatten(whole)

  stage_fn = _stage_fn(layer_fn, rows_of, rng, checkpoint, S, R, G)

  def iteration(carry, t):
    state_SbLD, rows_S, back_MbLD, out_MbLD, sums_SRG = carry
    k_S = jnp.clip(t - jnp.arange(S), 0, R * M - 1)  # each stage's round k // M, microbatch
    micro_S, round_S = k_S % M, k_S // M              # k % M (clipped while idle)
    first = micro_S[0]  # what stage 0 takes: a new microbatch, or one back from a round
    feed = _rows_constraint(x_MbLD[first])
    if R > 1:
      feed = _rows_constraint(jnp.where(round_S[0] > 0, back_MbLD[first], feed))
    state_SbLD = state_SbLD.at[0].set(feed)
    rows_S = [_stage_constraint(r_S.at[0].set(_rows_constraint(r_M[first])))
              for r_S, r_M in zip(rows_S, rows_M)]
    # spmd_axis_name: the layers' sharding constraints keep the stage dim on `stage`
    new_SbLD, sums_SG = jax.vmap(stage_fn, in_axes=(0, 0, 0, 0, 0, None),
                                 spmd_axis_name='stage')(
        stage_params, state_SbLD, rows_S, jnp.arange(S), round_S, t)
    new_SbLD = _stage_constraint(new_SbLD)
    # a stage's sums count while it works on a microbatch (not while the pipe fills or
    # drains), into its round's slot
    working_S = (t - jnp.arange(S) >= 0) & (t - jnp.arange(S) < R * M)
    into_SR = (jax.nn.one_hot(round_S, R) * working_S[:, None]).astype(jnp.float32)
    sums_SRG = jax.tree.map(
        lambda acc, new: acc + jnp.einsum('sr,sg...->srg...', into_SR, new.astype(acc.dtype)),
        sums_SRG, sums_SG)
    done = t - (S - 1)  # the work item the last stage just finished (< 0 while filling)
    i, last = micro_S[S - 1], new_SbLD[S - 1]
    # one slot written in place (a select of whole buffers would copy them every iteration)
    keep = lambda buffer, cond: buffer.at[i].set(_rows_constraint(
        jnp.where(cond, _rows_constraint(last), _rows_constraint(buffer[i]))))
    out_MbLD = _buffer_constraint(keep(out_MbLD, done >= (R - 1) * M))
    if R > 1:
      back_MbLD = _buffer_constraint(keep(back_MbLD, (done >= 0) & (done < (R - 1) * M)))
    # each stage's output and its microbatch's rows to the next stage (collective permutes)
    roll = lambda a: _stage_constraint(jnp.roll(a, 1, axis=0))
    return (roll(new_SbLD), [roll(r) for r in rows_S], back_MbLD, out_MbLD, sums_SRG), None

  state = _stage_constraint(jnp.zeros((S, *x_MbLD.shape[1:]), x_BLD.dtype))
  # while the pipe fills, idle stages see microbatch 0's rows (real masks, finite outputs)
  rows = [_stage_constraint(jnp.broadcast_to(r[0], (S, *r.shape[1:]))) for r in rows_M]
  empty = _buffer_constraint(jnp.zeros_like(x_MbLD))
  back = empty if R > 1 else jnp.zeros((), x_BLD.dtype)
  # the sums' shapes: one layer on one microbatch, traced (not run) for them
  one_sums = jax.eval_shape(
      lambda: layer_fn(jax.tree.map(lambda p: p[0], params), x_MbLD[0],
                       rows_of([r[0] for r in rows_M]), rng)[1])
  sums = jax.tree.map(lambda a: _stage_constraint(jnp.zeros((S, R, G, *a.shape), jnp.float32)),
                      one_sums)
  (_, _, _, out_MbLD, sums_SRG), _ = jax.lax.scan(
      iteration, (state, rows, back, empty, sums), jnp.arange(R * M + S - 1))
  # [S, R, G] -> layer (r S + s) G + i
  sums = jax.tree.map(lambda a: a.swapaxes(0, 1).reshape(-1, *a.shape[3:]), sums_SRG)
  return _undeal(out_MbLD), sums
