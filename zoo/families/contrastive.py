"""Image-text contrastive losses over paired embeddings (each tower's pooled state, L2
normalised): SigLIP's sigmoid loss (Zhai et al. 2023), chunk by chunk around a mesh axis
as the paper computes it, and CLIP's softmax loss (Radford et al. 2021).

The sigmoid loss needs no batch-wide normaliser, so a device never holds every embedding:
each device scores its images against its own texts (the positives on the diagonal), then
passes its texts to the next device and scores the ones it receives (all negatives), n - 1
times round a ring of n devices; the sums meet in one psum.

Glossary: B batch (image-text pairs; a device's share inside the ring), D d_model (the
embeddings' width).
"""

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec


def _chunk_sum(image_BD, text_BD, log_temperature, bias, positives):
  """-log sigmoid(z (e^t <x, y> + b)) summed over the [B, B] pairs of one chunk; z = +1
  on the diagonal when the chunk holds the images' own texts, -1 elsewhere."""
  logits_BB = jnp.exp(log_temperature) * (image_BD @ text_BD.T) + bias
  signs_BB = (2.0 * jnp.eye(logits_BB.shape[0]) - 1.0) if positives else -jnp.ones_like(
      logits_BB)
  return -jnp.sum(jax.nn.log_sigmoid(signs_BB * logits_BB))


def sigmoid_loss(image_BD, text_BD, log_temperature, bias):
  """SigLIP's loss on one device: the [B, B] pairs' sum divided by B (the paper's
  Algorithm 1); t is the log of the learned temperature, b the learned bias."""
  return _chunk_sum(image_BD, text_BD, log_temperature, bias, True) / image_BD.shape[0]


def _ring_loss(image_BD, text_BD, log_temperature, bias, axis):
  """Inside shard_map over `axis`: this device's images against every device's texts, the
  texts passed one device along per round; -> the global sum / the global batch."""
  devices = jax.lax.axis_size(axis)
  total = _chunk_sum(image_BD, text_BD, log_temperature, bias, True)
  ring = [(i, (i - 1) % devices) for i in range(devices)]
  for _ in range(devices - 1):
    text_BD = jax.lax.ppermute(text_BD, axis, ring)
    total += _chunk_sum(image_BD, text_BD, log_temperature, bias, False)
  return jax.lax.psum(total, axis) / (image_BD.shape[0] * devices)


def sigmoid_loss_ring(mesh, axis='data'):
  """-> loss(image_BD, text_BD, log_temperature, bias): sigmoid_loss over a batch split
  along `axis` of `mesh` (rows in device order), computed as the module docstring says."""
  rows, scalar = PartitionSpec(axis), PartitionSpec()
  return jax.shard_map(functools.partial(_ring_loss, axis=axis), mesh=mesh,
                       in_specs=(rows, rows, scalar, scalar), out_specs=scalar)


def softmax_loss(image_BD, text_BD, log_temperature):
  """CLIP's loss: the cross-entropy of each image over the batch's texts and of each text
  over its images, the matching pair the label, averaged over both directions."""
  logits_BB = jnp.exp(log_temperature) * (image_BD @ text_BD.T)
  diagonal_B = jnp.diagonal(logits_BB)
  per_image = jax.nn.logsumexp(logits_BB, axis=1) - diagonal_B
  per_text = jax.nn.logsumexp(logits_BB, axis=0) - diagonal_B
  return 0.5 * (jnp.mean(per_image) + jnp.mean(per_text))
