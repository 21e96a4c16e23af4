"""Multi-token prediction: each module reads the sequence shifted within its document (by
hand and by perturbation), its loss equals a float64 numpy cross-entropy of the shifted
targets, and the loss weight follows its schedule."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tests import helpers
from zoo import families
from zoo.families import decoder
from zoo.families import loss as loss_lib
from zoo.models import head as head_lib
from zoo.models import mtp


def _model(depth=2):
  config = helpers.tiny_config(position='rope')
  config.model.mtp.depth = depth
  config.data.seq_len = 12
  model = families.build(config.model)
  variables = jax.jit(model.init)(jax.random.PRNGKey(0),
                                  families.example_batch(config.model, 1, 12))
  return config, model, {'params': nn.unbox(variables['params'])}


def _batch():
  rng = np.random.default_rng(0)
  ids = rng.integers(4, 64, (2, 13)).astype(np.int32)
  segments = np.asarray([[1] * 7 + [2] * 5, [1] * 9 + [0] * 3], np.int32)
  positions = np.asarray([list(range(7)) + list(range(5)), list(range(12))], np.int32)
  weights = (rng.random((2, 12)) < 0.8) * (segments > 0)
  return {'inputs': ids[:, :-1], 'targets': ids[:, 1:], 'segment_ids': segments,
          'positions': positions, 'loss_weights': weights.astype(np.float32)}


def test_depth_k_reads_token_i_plus_k_of_the_same_document():
  segments = jnp.asarray([[1, 1, 1, 2, 2, 0]])
  np.testing.assert_array_equal(mtp.shifted(jnp.arange(6)[None], 2), [[2, 3, 4, 5, 0, 0]])
  np.testing.assert_array_equal(mtp.segments_at(segments, 1), [[1, 1, 0, 2, 0, 0]])
  np.testing.assert_array_equal(mtp.segments_at(segments, 2), [[1, 0, 0, 0, 0, 0]])


def _hidden(model, variables, batch):
  _, sown = model.apply(variables, batch, mutable=['mtp'])
  return [np.asarray(sown['mtp'][f'depth_{k}'][0]) for k in (1, 2)]


def test_a_module_sees_its_own_document_only():
  config, model, variables = _model()
  batch = _batch()
  before = _hidden(model, variables, batch)
  other = dict(batch, inputs=batch['inputs'].copy())
  other['inputs'][0, 7:] = 5  # row 0's second document
  after = _hidden(model, variables, other)
  for k, (b, a) in enumerate(zip(before, after), 1):
    # row 0's first document, where its token i + k is still in it: unchanged
    np.testing.assert_allclose(a[0, :7 - k], b[0, :7 - k], atol=1e-6)
    assert not np.allclose(a[0, 7:12 - k], b[0, 7:12 - k], atol=1e-4)
  np.testing.assert_array_equal(after[0][1], before[0][1])  # another row


def _nll(logits, targets, weights):
  logits = logits.astype(np.float64)
  log_z = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
  return np.sum((log_z - picked) * weights)


def test_the_modules_losses_are_the_shifted_cross_entropies_weighted_by_the_schedule():
  config, model, variables = _model()
  batch = _batch()
  hidden = _hidden(model, variables, batch)
  tokens = batch['loss_weights'].sum()
  segments = batch['segment_ids']
  want = []
  for k, h in enumerate(hidden, 1):
    logits = np.asarray(head_lib.project(config.model, variables['params'], jnp.asarray(h)))
    ahead = np.concatenate([segments[:, k:], np.zeros_like(segments[:, :k])], 1)
    weights = np.concatenate([batch['loss_weights'][:, k:], np.zeros((2, k))], 1)
    weights = weights * ((ahead == segments) & (ahead > 0))
    targets = np.concatenate([batch['targets'][:, k:], np.zeros((2, k), np.int32)], 1)
    want.append(_nll(logits, targets, weights) / tokens)
  config.train.steps = 100
  config.model.mtp.update(loss_weight=0.3, late_loss_weight=0.1, late_from=0.5)
  main = loss_lib.token_loss(model.apply(variables, batch), batch['targets'],
                             batch['loss_weights'], config, variables, tokens).total
  for step, weight in ((None, 0.3), (49, 0.3), (50, 0.1)):
    got = decoder.loss(model, config, variables, batch, step=step)
    np.testing.assert_allclose([got.metrics['mtp_loss_1'], got.metrics['mtp_loss_2']], want,
                               rtol=1e-5)
    np.testing.assert_allclose(got.total, main + weight * np.mean(want), rtol=1e-5)
