"""The CPU form of ragged all-to-all keeps jax.lax.ragged_all_to_all's contract: checked
against a numpy model of it, values and gradients, on 4 simulated devices."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from zoo import collectives

X, N, M, D = 4, 12, 14, 3  # shards, operand rows, output rows, values per row


def _plan(seed):
  """Random sizes [source, destination] with gaps between the rows sent and received."""
  rng = np.random.default_rng(seed)
  sends = rng.integers(0, 3, size=(X, X))
  input_offsets = np.cumsum(sends, axis=1) - sends + np.arange(X)  # a row skipped per peer
  output_offsets = np.cumsum(sends, axis=0) - sends + np.arange(X)[:, None]
  assert (input_offsets + sends).max() <= N and (output_offsets + sends).max() <= M
  return sends, input_offsets, output_offsets


def _numpy_ragged_all_to_all(operands, outputs, sends, input_offsets, output_offsets):
  outputs = outputs.copy()
  for i in range(X):
    for j in range(X):
      rows = slice(input_offsets[i, j], input_offsets[i, j] + sends[i, j])
      outputs[j, output_offsets[i, j]:output_offsets[i, j] + sends[i, j]] = operands[i, rows]
  return outputs


def _sharded(sends, input_offsets, output_offsets):
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:X]), ('x',))

  def per_shard(operand, output, in_off, send, out_off, recv):
    return collectives.ragged_all_to_all(operand[0], output[0], in_off[0], send[0],
                                         out_off[0], recv[0], 'x')[None]

  fn = jax.jit(jax.shard_map(per_shard, mesh=mesh, in_specs=P('x'), out_specs=P('x')))
  put = lambda a: jax.device_put(jnp.asarray(a), NamedSharding(mesh, P('x')))
  plan = [put(a.astype(np.int32)) for a in (input_offsets, sends, output_offsets, sends.T)]
  return lambda operands, outputs: fn(put(operands), put(outputs), *plan)


def test_rows_land_where_the_offsets_say_and_other_rows_keep_their_values():
  sends, input_offsets, output_offsets = _plan(0)
  operands = np.arange(X * N * D, dtype=np.float32).reshape(X, N, D)
  outputs = -np.ones((X, M, D), np.float32)
  got = _sharded(sends, input_offsets, output_offsets)(operands, outputs)
  np.testing.assert_array_equal(
      got, _numpy_ragged_all_to_all(operands, outputs, sends, input_offsets, output_offsets))


def test_the_gradient_sends_each_row_back_where_it_came_from():
  sends, input_offsets, output_offsets = _plan(1)
  weights = np.random.default_rng(2).normal(size=(X, M, D)).astype(np.float32)
  apply = _sharded(sends, input_offsets, output_offsets)
  grad = jax.grad(lambda operands: jnp.sum(apply(operands, jnp.zeros((X, M, D))) * weights))(
      jnp.zeros((X, N, D)))
  expected = np.zeros((X, N, D), np.float32)
  for i in range(X):
    for j in range(X):
      for r in range(sends[i, j]):
        expected[i, input_offsets[i, j] + r] = weights[j, output_offsets[i, j] + r]
  np.testing.assert_array_equal(grad, expected)
