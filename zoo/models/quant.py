"""Quantized training's matmuls (model.quant): the dense, attention-projection and expert
matmuls run as real int8 or fp8 dot_generals (and ragged dots) through Qwix's
quantized-training ops, forward and backward; the parameters and checkpoints stay float.

int8: both operands int8 with absmax scales (per output channel for the weight, per row for
the activation), int32 accumulation, the gradients int8 too. fp8: e4m3 operands, e5m2
gradients (the range the gradients need). tile > 0: the contracted axis is scaled per tile
of that many elements (DeepSeek-V3's fine-grained scaling) instead of once per channel.

We call Qwix's ops with a configuration we build here, rather than its module interception,
because a DenseGeneral knows which operand is the weight: interception guesses that by
tracing the operand back to a parameter, which reshapes and scanned stacks defeat.

Glossary: M rows, K the contracted width of a matmul, N a matmul's output width, E experts.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp

# mode -> (forward operands' type, gradients' type)
MODES = {'int8': (jnp.int8, jnp.int8), 'fp8': (jnp.float8_e4m3fn, jnp.float8_e5m2)}


@dataclasses.dataclass(frozen=True)
class Recipe:
  """A matmul's precision, as model.quant spells it (the modules pass the frozen model
  config's `quant` itself; this is the default of a layer built alone): mode 'none',
  'int8' or 'fp8'; tile 0 = per channel."""
  mode: str = 'none'
  tile: int = 0


def _qt():
  """Qwix's quantized dot_general, imported on first use: importing Qwix imports flax.nnx
  and IPython, half a second at every start of a process that quantizes nothing."""
  from qwix._src.core import dot_general_qt  # pylint: disable=g-import-not-at-top
  return dot_general_qt


def _dot_qt(x, w, dimension_numbers, r):
  fwd, bwd = MODES[r.mode]
  qt = _qt()
  config = qt.DotGeneralQtConfig(lhs_qtype=fwd, rhs_qtype=fwd, tile_size=r.tile or None,
                                 dlhs_grad_qtype=bwd, drhs_grad_qtype=bwd)
  return qt.dot_general_qt(x, w, dimension_numbers, config).astype(x.dtype)


def matmul(x_MK, w_KN, r):
  """x @ w, quantized by recipe r (plain when r.mode is 'none')."""
  if r.mode == 'none':
    return x_MK @ w_KN
  return _dot_qt(x_MK, w_KN, (((1,), (0,)), ((), ())), r)


def expert_matmul(x_EMK, w_EKN, r):
  """Each expert's rows through its own weight: [E, M, K] x [E, K, N] -> [E, M, N]."""
  if r.mode == 'none':
    return jnp.einsum('emk,ekn->emn', x_EMK, w_EKN)
  return _dot_qt(x_EMK, w_EKN, (((2,), (1,)), ((0,), (0,))), r)


def _ragged(r):
  """jax.lax.ragged_dot (quantized by r), batched as a loop over a leading batch (a
  pipeline's vmap over its stages), forward and backward: TPU's ragged dot takes no batch
  dimension (each device's slice of the stage batch is one stage, so the loop runs once)."""
  if r.mode != 'none':
    from qwix._src.core import ragged_dot_qt  # pylint: disable=g-import-not-at-top
    fwd, bwd = MODES[r.mode]
    config = ragged_dot_qt.RaggedDotQtConfig(lhs_qtype=fwd, rhs_qtype=fwd,
                                             dlhs_grad_qtype=bwd, drhs_grad_qtype=bwd)
    dot = lambda x, w, sizes: ragged_dot_qt.ragged_dot_qt(x, w, sizes, config).astype(x.dtype)
  else:
    dot = jax.lax.ragged_dot
  forward = jax.custom_batching.sequential_vmap(dot)
  backward = jax.custom_batching.sequential_vmap(
      lambda x, w, sizes, dy: jax.vjp(lambda x, w: dot(x, w, sizes), x, w)[1](dy))

  @jax.custom_vjp
  def ragged(x_MK, w_EKN, group_sizes_E):
    return forward(x_MK, w_EKN, group_sizes_E)

  ragged.defvjp(lambda x, w, sizes: (forward(x, w, sizes), (x, w, sizes)),
                lambda residuals, dy: (*backward(*residuals, dy), None))
  return ragged


ragged_dot = functools.cache(_ragged)  # ragged_dot(r)(x [M, K], w [E, K, N], sizes [E])
