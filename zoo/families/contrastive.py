"""Image-text contrastive losses over paired embeddings (each tower's pooled state, L2
normalised): SigLIP's sigmoid loss (Zhai et al. 2023), chunk by chunk around the mesh's
batch axes as the paper computes it, and CLIP's softmax loss (Radford et al. 2021).

The sigmoid loss needs no batch-wide normaliser, so a device never holds every embedding:
each device scores its images against its own texts (the positives on the diagonal), then
passes its texts to the next device and scores the ones it receives (all negatives), n - 1
times round a ring of n devices; the sums meet in one psum. CLIP's normaliser is over the
whole batch, so under a mesh the compiler gathers every embedding for it.

Rows marked not real (an eval batch's padding) take part in no pair.

Glossary: B batch (image-text pairs; a device's share inside the ring), D d_model (the
embeddings' width).
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from zoo import sharding


def _real(x_BD, real_B):
  return (jnp.ones(x_BD.shape[0], jnp.float32) if real_B is None else
          real_B.astype(jnp.float32))


def _chunk_sum(image_BD, text_BD, log_temperature, bias, positives, image_real_B,
               text_real_B):
  """-log sigmoid(z (e^t <x, y> + b)) summed over the real [B, B] pairs of one chunk; z =
  +1 on the diagonal when the chunk holds the images' own texts, -1 elsewhere."""
  logits_BB = jnp.exp(log_temperature) * (image_BD @ text_BD.T) + bias
  signs_BB = (2.0 * jnp.eye(logits_BB.shape[0]) - 1.0) if positives else -jnp.ones_like(
      logits_BB)
  pairs_BB = image_real_B[:, None] * text_real_B[None, :]
  return -jnp.sum(jax.nn.log_sigmoid(signs_BB * logits_BB) * pairs_BB)


def sigmoid_loss(image_BD, text_BD, log_temperature, bias, real_B=None):
  """SigLIP's loss on one device: the pairs' sum divided by the (real) rows (the paper's
  Algorithm 1); t is the log of the learned temperature, b the learned bias."""
  real_B = _real(image_BD, real_B)
  return (_chunk_sum(image_BD, text_BD, log_temperature, bias, True, real_B, real_B) /
          jnp.maximum(jnp.sum(real_B), 1.0))


def _ring_loss(image_BD, text_BD, log_temperature, bias, real_B=None, *, axes, devices):
  """Inside shard_map over `axes`: this device's images against every device's texts, the
  texts passed one device along per round; -> the global sum / the global real rows."""
  real_B = _real(image_BD, real_B)
  total = _chunk_sum(image_BD, text_BD, log_temperature, bias, True, real_B, real_B)
  ring = [(i, (i - 1) % devices) for i in range(devices)]
  text_real_B = real_B
  for _ in range(devices - 1):
    text_BD, text_real_B = jax.lax.ppermute((text_BD, text_real_B), axes, ring)
    total += _chunk_sum(image_BD, text_BD, log_temperature, bias, False, real_B, text_real_B)
  return jax.lax.psum(total, axes) / jnp.maximum(jax.lax.psum(jnp.sum(real_B), axes), 1.0)


def sigmoid_loss_ring(mesh, axes=('data',)):
  """-> loss(image_BD, text_BD, log_temperature, bias, real_B=None): sigmoid_loss over a
  batch split along mesh `axes` (rows in device order), computed as the module docstring
  says."""
  axes = (axes,) if isinstance(axes, str) else tuple(axes)
  rows, scalar = PartitionSpec(axes), PartitionSpec()
  local = functools.partial(_ring_loss, axes=axes, devices=math.prod(mesh.shape[a] for a in axes))

  def loss(image_BD, text_BD, log_temperature, bias, real_B=None):
    args = (image_BD, text_BD, log_temperature, bias) + (() if real_B is None else (real_B,))
    return jax.shard_map(local, mesh=mesh, in_specs=(rows, rows, scalar, scalar, rows)[
        :len(args)], out_specs=scalar)(*args)
  return loss


def sigmoid_loss_on_mesh(image_BD, text_BD, log_temperature, bias, real_B=None):
  """sigmoid_loss, round the ring of the batch axes (data, fsdp, expert) of the mesh being
  traced under when they split the rows; on one device, or rows they do not divide, whole."""
  mesh = jax.sharding.get_abstract_mesh()
  axes = () if mesh.empty else tuple(a for a in sharding.BATCH_AXES if mesh.shape.get(a, 1) > 1)
  if not axes or image_BD.shape[0] % math.prod(mesh.shape[a] for a in axes):
    return sigmoid_loss(image_BD, text_BD, log_temperature, bias, real_B)
  return sigmoid_loss_ring(mesh, axes)(image_BD, text_BD, log_temperature, bias, real_B)


def softmax_loss(image_BD, text_BD, log_temperature, real_B=None):
  """CLIP's loss: the cross-entropy of each image over the batch's texts and of each text
  over its images, the matching pair the label, averaged over both directions (real rows
  only)."""
  real_B = _real(image_BD, real_B)
  logits_BB = jnp.exp(log_temperature) * (image_BD @ text_BD.T)
  diagonal_B = jnp.diagonal(logits_BB)
  ignored_B = jnp.where(real_B > 0, 0.0, -jnp.inf)
  per_image = jax.nn.logsumexp(logits_BB + ignored_B[None, :], axis=1) - diagonal_B
  per_text = jax.nn.logsumexp(logits_BB + ignored_B[:, None], axis=0) - diagonal_B
  mean = lambda x_B: jnp.sum(jnp.where(real_B > 0, x_B, 0.0)) / jnp.maximum(jnp.sum(real_B), 1)
  return 0.5 * (mean(per_image) + mean(per_text))
