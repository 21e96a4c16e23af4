import numpy as np

from tests import helpers
from zoo.families import loss as loss_lib


def _token_loss(logits, targets, weights, z_loss):
  config = helpers.tiny_config()
  config.train.z_loss = z_loss
  return loss_lib.token_loss(logits, targets, weights, config, None, np.sum(weights))


def test_cross_entropy_matches_float64_reference():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 5)).astype(np.float32) * 3
  targets = rng.integers(0, 5, (2, 3))
  weights = np.array([[1, 1, 0], [1, 0, 1]], np.float32)
  nll, z, weight = loss_lib.cross_entropy(logits, targets, weights, z_loss=1e-2)
  l64 = logits.astype(np.float64)
  log_z = np.log(np.exp(l64).sum(-1))
  want = log_z - np.take_along_axis(l64, targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(nll, np.sum(want * weights), rtol=1e-5)
  np.testing.assert_allclose(z, np.sum(1e-2 * log_z ** 2 * weights), rtol=1e-5)
  assert weight == 4


def test_token_loss_is_the_weighted_mean_and_logs_z_loss_only_when_it_counts():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
  targets = rng.integers(0, 5, (2, 3))
  weights = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
  plain = _token_loss(logits, targets, weights, 0.0)
  l64 = logits.astype(np.float64)
  log_z = np.log(np.exp(l64).sum(-1))
  nll = log_z - np.take_along_axis(l64, targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(plain.total, np.sum(nll * weights) / 3, rtol=1e-5)
  assert set(plain.metrics) == {'loss'} and plain.state == {}
  with_z = _token_loss(logits, targets, weights, 0.1)
  np.testing.assert_allclose(with_z.metrics['z_loss'], np.sum(0.1 * log_z ** 2 * weights) / 3,
                             rtol=1e-5)
  np.testing.assert_allclose(with_z.total, plain.total + with_z.metrics['z_loss'], rtol=1e-5)
  assert float(_token_loss(logits, targets, 0 * weights, 0.0).total) == 0.0
