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
