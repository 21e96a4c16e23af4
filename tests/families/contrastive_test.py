"""Contrastive losses (zoo/families/contrastive.py) against float64 numpy, and SigLIP's ring
over the data axis equal to one device in value and gradients, with no all-gather."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from zoo.families import contrastive


def _embeddings(rows, width=6, seed=0):
  rng = np.random.default_rng(seed)
  unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
  return unit(rng.normal(size=(rows, width))), unit(rng.normal(size=(rows, width)))


def _sigmoid_reference(image, text, t, b):
  logits = np.exp(t) * image @ text.T + b
  signs = 2 * np.eye(len(image)) - 1
  return np.sum(np.log1p(np.exp(-signs * logits))) / len(image)


def _softmax_reference(image, text, t):
  logits = np.exp(t) * image @ text.T
  log_rows = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  log_cols = logits - np.log(np.exp(logits).sum(0, keepdims=True))
  return -0.5 * (np.mean(np.diag(log_rows)) + np.mean(np.diag(log_cols)))


def test_both_losses_equal_float64_numpy():
  image, text = _embeddings(5)
  t, b = np.log(10.0), -10.0  # SigLIP's initial temperature and bias
  got = contrastive.sigmoid_loss(jnp.asarray(image, jnp.float32),
                                 jnp.asarray(text, jnp.float32), t, b)
  np.testing.assert_allclose(got, _sigmoid_reference(image, text, t, b), rtol=1e-5)
  got = contrastive.softmax_loss(jnp.asarray(image, jnp.float32),
                                 jnp.asarray(text, jnp.float32), 2.0)
  np.testing.assert_allclose(got, _softmax_reference(image, text, 2.0), rtol=1e-5)


@pytest.mark.parametrize('devices', [4, 8])
def test_the_ring_over_the_data_axis_equals_one_device_without_gathering(devices):
  mesh = jax.make_mesh((devices,), ('data',), devices=jax.devices()[:devices])
  image, text = _embeddings(2 * devices, seed=1)
  rows = NamedSharding(mesh, PartitionSpec('data'))
  args = (jax.device_put(jnp.asarray(image, jnp.float32), rows),
          jax.device_put(jnp.asarray(text, jnp.float32), rows),
          jnp.float32(np.log(10.0)), jnp.float32(-3.0))
  ring = jax.jit(jax.value_and_grad(contrastive.sigmoid_loss_ring(mesh), argnums=(0, 1, 2, 3)))
  one = jax.jit(jax.value_and_grad(contrastive.sigmoid_loss, argnums=(0, 1, 2, 3)))
  (value, grads), (want, want_grads) = ring(*args), one(*map(np.asarray, args))
  np.testing.assert_allclose(value, want, rtol=1e-6)
  np.testing.assert_allclose(value, _sigmoid_reference(image, text, np.log(10.0), -3.0),
                             rtol=1e-5)
  for got, expected in zip(grads, want_grads):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
  text_hlo = ring.lower(*args).compile().as_text()
  assert 'collective-permute' in text_hlo and 'all-gather' not in text_hlo


def test_padding_rows_take_part_in_no_pair_in_either_loss():
  image, text = _embeddings(6, seed=2)
  real = np.asarray([0, 1, 1, 0, 1, 1], np.float32)
  keep = real > 0
  args = jnp.asarray(image, jnp.float32), jnp.asarray(text, jnp.float32)
  np.testing.assert_allclose(
      contrastive.sigmoid_loss(*args, 1.0, -2.0, jnp.asarray(real)),
      _sigmoid_reference(image[keep], text[keep], 1.0, -2.0), rtol=1e-5)
  np.testing.assert_allclose(contrastive.softmax_loss(*args, 1.5, jnp.asarray(real)),
                             _softmax_reference(image[keep], text[keep], 1.5), rtol=1e-5)


def test_under_a_mesh_the_loss_goes_round_the_batch_axes_ring_with_its_padding():
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()).reshape(2, 2, 2),
                           ('data', 'fsdp', 'tensor'))
  image, text = _embeddings(8, seed=3)
  real = np.asarray([0, 1, 1, 1, 1, 0, 1, 1], np.float32)
  rows = NamedSharding(mesh, PartitionSpec(('data', 'fsdp')))
  args = [jax.device_put(jnp.asarray(x, jnp.float32), rows) for x in (image, text, real)]
  loss = jax.jit(lambda i, t, r: contrastive.sigmoid_loss_on_mesh(i, t, 0.5, -1.0, r))
  with jax.set_mesh(mesh):
    value = loss(*args)
    compiled = loss.lower(*args).compile().as_text()
  keep = real > 0
  np.testing.assert_allclose(value, _sigmoid_reference(image[keep], text[keep], 0.5, -1.0),
                             rtol=1e-5)
  assert 'collective-permute' in compiled  # round data x fsdp, 4 devices of 2 rows
