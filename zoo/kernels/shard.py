"""Running an attention kernel on the mesh: each device's batch rows and heads (and, for
ring attention, its chunk of the sequence).

Under shard_map the batch is split over the batch mesh axes (data, fsdp, expert), the
heads over `tensor` and, with `sequence`, the queries' and keys' lengths over `context`.
With fewer kv heads than tensor shards the keys and values stay replicated and each shard
picks the one kv head its query heads share.

Glossary: B batch, L query length, S key length, H heads, G kv heads, K head dim.
"""

import jax
from jax.sharding import PartitionSpec as P

from zoo import sharding


def _pick_kv_group(local, heads_per_group):
  """`local` for a shard whose query heads share one of the replicated kv heads."""
  def run(q_BLHK, k_BSGK, v_BSGK, *rest):
    group = jax.lax.axis_index('tensor') * q_BLHK.shape[2] // heads_per_group
    pick = lambda x: jax.lax.dynamic_slice_in_dim(x, group, 1, axis=2)
    return local(q_BLHK, pick(k_BSGK), pick(v_BSGK), *rest)
  return run


def over_mesh(local, q_BLHK, k_BSGK, v_BSGK, rows=(), head_params=(), sequence=False):
  """local(q, k, v, *rows, *head_params) -> [B, L, H, K], per shard when a mesh is set.

  rows: [B, L] or [B, S] arrays split like the batch (and like the sequence with
  `sequence`); head_params: arrays whose last axis is the query heads (split like them)."""
  args = (q_BLHK, k_BSGK, v_BSGK, *rows, *head_params)
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or mesh.size == 1:
    return local(*args)
  batch = tuple(a for a in sharding.BATCH_AXES if a in mesh.shape)
  rows_per_shard = 1
  for a in batch:
    rows_per_shard *= mesh.shape[a]
  if q_BLHK.shape[0] % rows_per_shard:  # e.g. init's one-row example batch: no split
    batch = ()
  tensor = mesh.shape.get('tensor', 1)
  heads, kv_heads = q_BLHK.shape[2], k_BSGK.shape[2]
  kv_replicated = kv_heads % tensor != 0
  if kv_replicated:
    local = _pick_kv_group(local, heads // kv_heads)
  head_axis = 'tensor' if tensor > 1 else None
  length = 'context' if sequence else None
  q_spec = P(batch or None, length, head_axis, None)
  kv_spec = P(batch or None, length, None if kv_replicated else head_axis, None)
  row_spec = P(batch or None, length)
  param_specs = tuple(P(*([None] * (p.ndim - 1)), head_axis) for p in head_params)
  in_specs = (q_spec, kv_spec, kv_spec) + (row_spec,) * len(rows) + param_specs
  return jax.shard_map(local, mesh=mesh, in_specs=in_specs,
                       out_specs=q_spec, check_vma=False)(*args)
