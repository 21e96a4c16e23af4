"""Collectives that XLA:CPU lacks, with the same contract built from ones it has.

`ragged_all_to_all` is `jax.lax.ragged_all_to_all` on TPU and GPU (and when tracing for them
under `kernels.target`); XLA:CPU has no such op ("not supported by XLA:CPU ThunkEmitter"), so
on CPU the same call runs as a dense, padded all-to-all. The CPU form moves every shard's
whole operand to every peer: it exists so the expert-parallel code path, its offsets and its
gradients run and are tested on simulated devices, not for speed.

Glossary: X shards on the axis, M operand rows.
"""

import jax
import jax.numpy as jnp

from zoo import kernels


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets,
                      recv_sizes, axis_name):
  """Inside shard_map over `axis_name` (X shards): rows
  operand[input_offsets[j] : input_offsets[j] + send_sizes[j]] go to shard j, landing in its
  `output` at output_offsets[j]; recv_sizes[i] rows arrive from shard i. Rows of `output`
  nothing lands on keep their values. Offsets and sizes are int32 [X]."""
  if kernels.platform() != 'cpu':
    return jax.lax.ragged_all_to_all(operand, output, input_offsets, send_sizes,
                                     output_offsets, recv_sizes, axis_name=axis_name)
  n, m = operand.shape[0], output.shape[0]
  rows_M = jnp.arange(n, dtype=jnp.int32)
  # to each peer its rows, padded to the operand's length: [X, M, ...]
  picked_XM = jnp.clip(input_offsets[:, None] + rows_M[None], 0, n - 1)
  sent_XM = rows_M[None] < send_sizes[:, None]
  pad = (Ellipsis,) + (None,) * (operand.ndim - 1)
  outgoing = jnp.where(sent_XM[pad], operand[picked_XM], jnp.zeros((), operand.dtype))
  incoming = jax.lax.all_to_all(outgoing, axis_name, 0, 0, tiled=True)
  # where each peer asked its rows to land here
  landing_X = jax.lax.all_to_all(output_offsets, axis_name, 0, 0, tiled=True)
  target_XM = jnp.where(rows_M[None] < recv_sizes[:, None], landing_X[:, None] + rows_M[None], m)
  return output.at[target_XM].set(incoming, mode='drop')
