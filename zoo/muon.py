"""Muon (Jordan et al. 2024) as Moonlight trained with it (Liu et al. 2025, "Muon is
Scalable for LLM Training"): Nesterov momentum, orthogonalized by a quintic Newton-Schulz
iteration, for the hidden weight matrices; AdamW for the rest (embeddings, norms, biases,
the vocabulary head and label heads), with the update scaled to AdamW's RMS so one learning
rate and weight decay serve both.

Which leaves are matrices, and which of their dims are rows, follows their logical axes:
'layers' (a scanned stack) and 'expert' (an expert stack) are batch dims, each layer's and
expert's matrix orthogonalized alone; a kernel ending in 'embed' ([heads, head_dim, embed],
[mlp, embed]) has the dims before it as rows, any other its first dim ([embed, heads,
head_dim] -> embed x heads*head_dim, as the papers treat a projection whole).

On a mesh, each matrix's shards move to its batch dim before the iteration where that dim
divides (an all-to-all: every device then orthogonalizes whole matrices, no gather of a
stack on one device); the axes that do not divide stay on the matrix, whose iteration XLA
then runs sharded with its collectives. optim.muon.gather=False leaves every axis on the
matrix. `placement` says which, plan mode prints it.

optax.contrib.muon orthogonalizes the same way, but offers no hook to place the iteration
on a mesh and bias-corrects its momentum as an average (Moonlight's is a plain sum), so the
zoo keeps its own; tests/muon_test.py checks the iteration against optax's.

MuonClip (Kimi K2, optim.muon.qk_clip): `qk_clip` rescales the query and key weights of
heads whose max logit passed the threshold, after the step (zoo/train/step.py).
"""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import optax

BATCH_AXES = ('layers', 'expert')
HEAD_MODULES = ('nsp', 'classifier')  # label heads (zoo/families, zoo/models/transformer.py)
NOT_MATRICES = ('embedding', 'scale', 'bias')  # leaf names: tables, norm gains, biases
NS_COEFFS = (3.4445, -4.7750, 2.0315)  # Jordan's quintic (a, b, c), as Moonlight used


class Matrix(NamedTuple):
  """One Muon leaf's dims: batch (each index its own matrix), rows, columns."""
  batch: tuple
  rows: tuple
  cols: tuple


def matrix_dims(path, logical_spec):
  """Matrix of a parameter (its path keys, its logical PartitionSpec), or None: AdamW's."""
  axes = tuple(logical_spec)
  names = [str(getattr(k, 'key', k)) for k in path]
  if (names[-1].endswith(NOT_MATRICES) or any(n in HEAD_MODULES for n in names) or
      'vocab' in axes):
    return None
  batch = tuple(i for i, a in enumerate(axes) if a in BATCH_AXES)
  own = [i for i in range(len(axes)) if i not in batch]
  if len(own) < 2:
    return None
  if axes[own[-1]] == 'embed':
    return Matrix(batch, tuple(own[:-1]), (own[-1],))
  return Matrix(batch, (own[0],), tuple(own[1:]))


def matrices(logical_specs):
  """Per parameter, in tree order: its Matrix, or None (AdamW's)."""
  flat = jax.tree_util.tree_flatten_with_path(logical_specs,
                                              is_leaf=lambda x: isinstance(x, P))[0]
  return [matrix_dims(path, spec) for path, spec in flat]


def stack_shape(shape, matrix):
  """[matrices, rows, cols] of a parameter of `shape`."""
  return tuple(math.prod(shape[d] for d in ds) for ds in matrix)


def placement(shape, matrix, spec, sizes, gather=True):
  """The PartitionSpec of the [batch, rows, cols] stack the iteration runs on, from the
  parameter's mesh PartitionSpec (`sizes`: the mesh axes' sizes): the batch dims' axes,
  then (gather=True) each axis of the rows and columns moved to the batch where the batch
  size still divides; the others stay where they are."""
  spec = tuple(spec) + (None,) * (len(shape) - len(spec))
  names = lambda dims: [a for d in dims for a in
                        (() if spec[d] is None else (spec[d],) if isinstance(spec[d], str)
                         else spec[d])]
  batch, rows, cols = names(matrix.batch), names(matrix.rows), names(matrix.cols)
  count = stack_shape(shape, matrix)[0]
  if gather:
    for axis in rows + cols:
      if count % (math.prod(sizes.get(a, 1) for a in batch) * sizes.get(axis, 1)) == 0:
        batch.append(axis)
    rows = [a for a in rows if a not in batch]
    cols = [a for a in cols if a not in batch]
  return P(*(tuple(a) if a else None for a in (batch, rows, cols)))


def _placed(stack, shape, matrix, sharding, gather):
  if sharding is None:
    return stack
  target = NamedSharding(sharding.mesh, placement(shape, matrix, sharding.spec,
                                                  sharding.mesh.shape, gather))
  return jax.lax.with_sharding_constraint(stack, target)


def _to_stack(x, matrix):
  order = matrix.batch + matrix.rows + matrix.cols
  return jnp.transpose(x, order).reshape(stack_shape(x.shape, matrix))


def _from_stack(stack, matrix, shape):
  order = matrix.batch + matrix.rows + matrix.cols
  inverse = sorted(range(len(order)), key=order.__getitem__)
  return stack.reshape([shape[d] for d in order]).transpose(inverse)


def orthogonalize(stack, steps, eps=1e-7):
  """Newton-Schulz on each [rows, cols] matrix of a [batch, rows, cols] stack (float32):
  X / ||X||_F, then X <- aX + (bA + cA^2)X with A = XX^T, on the wide side (X^T when rows
  exceed columns). Singular values land near 1, not exactly (the quintic trades accuracy
  for speed, as the papers intend)."""
  tall = stack.shape[1] > stack.shape[2]
  x = jnp.swapaxes(stack, 1, 2) if tall else stack
  x = x / (jnp.sqrt(jnp.sum(jnp.square(x), axis=(1, 2), keepdims=True)) + eps)
  a, b, c = NS_COEFFS
  for _ in range(steps):
    gram = jnp.einsum('nij,nkj->nik', x, x)
    poly = b * gram + c * jnp.einsum('nij,njk->nik', gram, gram)
    x = a * x + jnp.einsum('nij,njk->nik', poly, x)
  return jnp.swapaxes(x, 1, 2) if tall else x


def ns_flops(shape, matrix, steps):
  """FLOPs of one step's iteration on one parameter (all of its matrices)."""
  count, m, n = stack_shape(shape, matrix)
  small, large = min(m, n), max(m, n)
  return count * steps * (4 * small * small * large + 2 * small ** 3)


class MuonState(NamedTuple):
  momentum: Any  # like the parameters: each Muon leaf's momentum sum, float32


def scale_by_muon(m, matrix_leaves, sharding_leaves=None):
  """The orthogonalized step of each Muon leaf, before the learning rate: momentum
  buf = mu buf + g; Nesterov g + mu buf (or buf); Newton-Schulz; times update_rms x
  sqrt(max(rows, cols)) (Moonlight's scale: the RMS AdamW's steps have). matrix_leaves
  and sharding_leaves: per parameter, in tree order (matrices(), the parameters'
  NamedShardings); the parameters this transformation does not own arrive masked
  (optax.MaskedNode: multi_transform gives them to AdamW) and stay so."""
  is_masked = lambda x: isinstance(x, optax.MaskedNode)
  shardings = sharding_leaves or [None] * len(matrix_leaves)

  def init(params):
    return MuonState(jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params))

  def one(g, buf, mat, sharding):
    if is_masked(g):
      return g, buf
    buf = m.momentum * buf + g.astype(jnp.float32)
    step = g.astype(jnp.float32) + m.momentum * buf if m.nesterov else buf
    stack = _placed(_to_stack(step, mat), g.shape, mat, sharding, gather=False)
    stack = _placed(stack, g.shape, mat, sharding, m.gather)
    _, rows, cols = stack.shape
    out = orthogonalize(stack, m.ns_steps) * (m.update_rms * math.sqrt(max(rows, cols)))
    # the moves on the [batch, rows, cols] stack only: XLA reshards it with all-to-alls,
    # the parameter's own shape only through a full copy
    out = _placed(out, g.shape, mat, sharding, gather=False)
    return _from_stack(out, mat, g.shape).astype(g.dtype), buf

  def update(grads, state, params=None):
    del params
    grad_leaves, treedef = jax.tree.flatten(grads, is_leaf=is_masked)
    buf_leaves = jax.tree.leaves(state.momentum, is_leaf=is_masked)
    out = [one(*args) for args in zip(grad_leaves, buf_leaves, matrix_leaves, shardings)]
    return (jax.tree.unflatten(treedef, [o[0] for o in out]),
            MuonState(jax.tree.unflatten(treedef, [o[1] for o in out])))

  return optax.GradientTransformation(init, update)


# ------------------------------------------------------------------------------ QK-clip

def qk_clip(params, max_logits, threshold):
  """MuonClip's QK-clip (Kimi K2, sec. 2.1), after the step: each head h whose max logit S
  exceeded `threshold` gets gamma = threshold / S, its logits scaled by gamma through its
  query and key weights. Multi-head attention: key head g scaled by sqrt(gamma_g), gamma_g
  the smallest of its query heads' (K2's sqrt(gamma) on each side when each key has one
  query head), each query head by gamma_h / sqrt(gamma_g), biases alike. Latent attention:
  the query's and key_up's non-rotary parts by sqrt(gamma), the query's rotary part by
  gamma, the rotary key (shared by all heads) untouched. max_logits: the 'logits'
  collection (each attention module's max_logit [..., H], leading dims its stack's)."""
  params = jax.tree.map(lambda x: x, params)  # a copy whose dicts this may replace
  for path, found in jax.tree_util.tree_flatten_with_path(
      max_logits, is_leaf=lambda x: isinstance(x, tuple))[0]:
    keys = [k.key for k in path][:-1]  # the attention module's path
    gamma = jnp.minimum(1.0, threshold / jnp.maximum(found[0], 1e-30))
    owner = params
    for k in keys[:-1]:
      owner = owner[k]
    owner[keys[-1]] = _clipped_attention(owner[keys[-1]], gamma)
  return params


def _scaled(leaf, factor, head_axis, lead):
  """leaf times factor (leading dims `lead` of the leaf's, then its heads) broadcast along
  the leaf's head axis."""
  shape = [1] * leaf.ndim
  shape[:lead] = leaf.shape[:lead]
  shape[head_axis] = leaf.shape[head_axis]
  return (leaf * factor.reshape(shape)).astype(leaf.dtype)


def _clipped_attention(module, gamma):
  lead = gamma.ndim - 1
  module = dict(module)
  if 'key_up' in module:  # latent attention: [..., in, H, N + R] queries, [..., C, H, N] keys
    query = 'query_up' if 'query_up' in module else 'query'
    kernel = module[query]['kernel']
    nope = module['key_up'].shape[-1]
    root = jnp.sqrt(gamma)
    factor = jnp.concatenate([jnp.broadcast_to(root[..., None], (*gamma.shape, nope)),
                              jnp.broadcast_to(gamma[..., None], (*gamma.shape,
                                                                  kernel.shape[-1] - nope))], -1)
    module[query] = dict(module[query], kernel=(kernel * jnp.expand_dims(
        factor, tuple(range(lead, kernel.ndim - 2)))).astype(kernel.dtype))
    module['key_up'] = _scaled(module['key_up'], root, module['key_up'].ndim - 2, lead)
    return module
  heads, kv_heads = gamma.shape[-1], module['key']['kernel'].shape[-2]
  gamma_g = jnp.min(gamma.reshape(*gamma.shape[:-1], kv_heads, heads // kv_heads), -1)
  per_query = gamma / jnp.repeat(jnp.sqrt(gamma_g), heads // kv_heads, axis=-1)
  for name, factor in (('query', per_query), ('key', jnp.sqrt(gamma_g))):
    module[name] = {leaf: _scaled(value, factor, value.ndim - 2, lead)
                    for leaf, value in module[name].items()}
  return module
