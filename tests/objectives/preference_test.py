"""DPO, IPO and SimPO losses (with RPO's NLL term) and gradients against float64 numpy
written from the papers' formulas, hand-computed cases, and the objective's
log-probabilities against the model's logits."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import families
from zoo.objectives import preference

BETA, SMOOTHING, GAMMA, ALPHA = 0.3, 0.1, 0.4, 0.7


def _log_sigmoid(x):
  return -np.logaddexp(0.0, -x)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _reference(kind, pi, ref, lengths):
  """float64: (loss [B], d loss / d pi [B, 2]) from Rafailov et al. eq. 7 (+ cDPO's
  smoothing), Azar et al. eq. 17, Meng et al. eq. 6."""
  if kind == 'simpo':
    h = BETA * (pi[:, 0] / lengths[:, 0] - pi[:, 1] / lengths[:, 1]) - GAMMA
    dh = np.stack([BETA / lengths[:, 0], -BETA / lengths[:, 1]], 1)
  else:
    scale = BETA if kind == 'dpo' else 1.0
    h = scale * ((pi[:, 0] - ref[:, 0]) - (pi[:, 1] - ref[:, 1]))
    dh = np.stack([np.full_like(h, scale), np.full_like(h, -scale)], 1)
  # RPO's term, alpha x the chosen completion's mean token NLL (Pang et al. 2024, eq. 2)
  nll = -ALPHA * pi[:, 0] / lengths[:, 0]
  dnll = np.stack([-ALPHA / lengths[:, 0], np.zeros(len(h))], 1)
  if kind == 'ipo':
    return (h - 1 / (2 * BETA)) ** 2 + nll, (2 * (h - 1 / (2 * BETA)))[:, None] * dh + dnll
  loss = -(1 - SMOOTHING) * _log_sigmoid(h) - SMOOTHING * _log_sigmoid(-h)
  dloss = -(1 - SMOOTHING) * _sigmoid(-h) + SMOOTHING * _sigmoid(h)
  return loss + nll, dloss[:, None] * dh + dnll


@pytest.mark.parametrize('kind', preference.KINDS)
def test_pair_losses_and_gradients_equal_the_papers_formulas_in_float64(kind):
  rng = np.random.default_rng(0)
  pi, ref = rng.normal(-20, 4, (6, 2)), rng.normal(-20, 4, (6, 2))
  lengths = rng.integers(3, 30, (6, 2)).astype(np.float64)
  expected, expected_grad = _reference(kind, pi, ref, lengths)

  def total(pi_):
    loss_B, _, _ = preference.pair_losses(kind, pi_, jnp.asarray(ref, jnp.float32),
                                          jnp.asarray(lengths, jnp.float32), BETA,
                                          SMOOTHING, GAMMA, ALPHA)
    return jnp.sum(loss_B), loss_B

  (_, loss_B), grad = jax.value_and_grad(total, has_aux=True)(jnp.asarray(pi, jnp.float32))
  np.testing.assert_allclose(loss_B, expected, rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(grad, expected_grad, rtol=2e-5, atol=2e-6)


def test_dpo_at_the_reference_is_log_two_and_rewards_are_zero():
  pi = jnp.asarray([[-5.0, -7.0]])
  loss_B, chosen_B, rejected_B = preference.pair_losses('dpo', pi, pi, jnp.ones((1, 2)),
                                                        0.1, 0.0, 0.0)
  np.testing.assert_allclose(loss_B, [np.log(2.0)], rtol=1e-6)
  assert float(chosen_B[0]) == float(rejected_B[0]) == 0.0


def test_ipo_is_zero_where_the_margin_is_its_target():
  # h = (pi_c - r_c) - (pi_w - r_w) = 1 / (2 beta) = 5 at beta 0.1
  loss_B, _, _ = preference.pair_losses('ipo', jnp.asarray([[-1.0, -6.0]]),
                                        jnp.zeros((1, 2)), jnp.ones((1, 2)), 0.1, 0.0, 0.0)
  np.testing.assert_allclose(loss_B, [0.0], atol=1e-6)


@pytest.fixture(scope='module')
def tiny():
  config = helpers.tiny_config()
  with config.unlocked():
    config.train.objective, config.train.lora.rank = 'dpo', 2
  model = families.build(config.model, config.train.lora)
  rng = np.random.default_rng(1)
  B, L = 3, config.data.seq_len
  batch = {'inputs': rng.integers(0, config.model.vocab_size, (B, 2, L)).astype(np.int32),
           'targets': rng.integers(0, config.model.vocab_size, (B, 2, L)).astype(np.int32),
           'segment_ids': np.ones((B, 2, L), np.int32),
           'positions': np.broadcast_to(np.arange(L, dtype=np.int32), (B, 2, L)).copy(),
           'loss_weights': (rng.random((B, 2, L)) < 0.5).astype(np.float32)}
  flat = {k: v.reshape(2 * B, L) for k, v in batch.items()}
  variables = nn.unbox(model.init(jax.random.PRNGKey(0), flat))
  # adapters that do something: b at random, not its zero init
  variables = {'params': jax.tree_util.tree_map_with_path(
      lambda p, x: x + 0.05 * jax.random.normal(jax.random.PRNGKey(2), x.shape)
      if 'lora' in str(p) else x, variables['params'])}
  return config, model, variables, batch


def test_sequence_logps_sum_the_weighted_targets_log_softmax(tiny):
  config, model, variables, batch = tiny
  flat = {k: v.reshape(-1, v.shape[-1]) for k, v in batch.items()}
  logits = np.asarray(model.apply(variables, flat), np.float64)
  logp = logits - np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1,
                                keepdims=True)) - logits.max(-1, keepdims=True)
  target = np.take_along_axis(logp, flat['targets'][..., None], -1)[..., 0]
  expected = np.sum(target * flat['loss_weights'], -1).reshape(-1, 2)
  got, lengths = preference.sequence_logps(model, variables, batch)
  np.testing.assert_allclose(got, expected, rtol=1e-5)
  np.testing.assert_array_equal(lengths, batch['loss_weights'].sum(-1))


def test_with_lora_the_reference_is_the_model_with_its_adapters_switched_off(tiny):
  config, model, variables, batch = tiny
  bare = families.build(config.model)  # the same model without adapters
  params = {k: v for k, v in variables['params'].items()}
  stripped = jax.tree_util.tree_map(lambda x: x, _without_adapters(params))
  expected, _ = preference.sequence_logps(bare, {'params': stripped}, batch)
  got = preference.reference_logps(model, variables, batch, None)
  np.testing.assert_allclose(got, expected, rtol=1e-6)
  policy, _ = preference.sequence_logps(model, variables, batch)
  assert not np.allclose(policy, expected)  # the adapters do change the policy


def _without_adapters(tree):
  if not isinstance(tree, dict):
    return tree
  return {k: _without_adapters(v) for k, v in tree.items() if k != 'lora'}


def test_the_loss_averages_real_pairs_and_logs_accuracy(tiny):
  config, model, variables, batch = tiny
  padded = {k: np.concatenate([v, np.zeros_like(v[:1])]) for k, v in batch.items()}
  out = preference.loss(model, config, variables, padded)
  policy, _ = preference.sequence_logps(model, variables, batch)
  reference = preference.reference_logps(model, variables, batch, None)
  loss_B, chosen, rejected = preference.pair_losses('dpo', policy, reference, None,
                                                    config.train.preference.beta, 0.0, 0.0)
  np.testing.assert_allclose(out.total, np.mean(loss_B), rtol=1e-5)
  assert float(out.weight_sum) == 3.0
  np.testing.assert_allclose(out.metrics['preference_accuracy'],
                             np.mean(np.asarray(chosen) > np.asarray(rejected)))
  np.testing.assert_allclose(out.metrics['reward_margin'], np.mean(chosen - rejected),
                             rtol=1e-5, atol=1e-7)
