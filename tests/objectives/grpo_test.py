"""GRPO's advantages, clipped ratio and k3 KL against float64 numpy and hand-computed
cases (Shao et al. 2024 sec. 4.1; Liu et al. 2025; Schulman 2020's k3)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo.objectives import grpo


def test_group_advantages_by_hand():
  rewards = [[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]]
  got = grpo.advantages(rewards, 'group')
  np.testing.assert_allclose(got[0], np.array([0.5, -0.5, -0.5, 0.5]) / (0.5 + 1e-4))
  np.testing.assert_array_equal(got[1], np.zeros(4))  # a tied group teaches nothing
  np.testing.assert_allclose(grpo.advantages(rewards, 'dr_grpo')[0], [0.5, -0.5, -0.5, 0.5])


def test_clipping_by_hand():
  """ratio 1.5 / 0.5 with advantage +1 / -1 at epsilon 0.2: the pessimistic term."""
  ratio = np.array([[1.5, 0.5, 1.5, 0.5]])
  advantage = np.array([1.0, 1.0, -1.0, -1.0])
  logp = jnp.asarray(np.log(ratio).T, jnp.float32)  # one token per row
  terms, kl, clipped = grpo.token_terms(logp, jnp.zeros_like(logp), logp,
                                        jnp.asarray(advantage, jnp.float32), 0.2, 0.0)
  np.testing.assert_allclose(terms[:, 0], [-1.2, -0.5, 1.5, 0.8], rtol=1e-6)
  np.testing.assert_array_equal(clipped[:, 0], [True, False, False, True])
  np.testing.assert_array_equal(kl, 0.0)  # the policy is its own reference here


def _reference(logp, old, ref, adv, eps, beta):
  """float64 (token loss, d loss / d logp) from the formula in zoo/objectives/grpo.py."""
  ratio = np.exp(logp - old)
  a = adv[:, None]
  clipped = np.clip(ratio, 1 - eps, 1 + eps) * a
  take_clipped = clipped < ratio * a
  q = ref - logp
  loss = -np.minimum(ratio * a, clipped) + beta * (np.exp(q) - q - 1)
  # the clipped term is constant in logp where the clip is active (its gradient is 0)
  active = take_clipped & ((ratio < 1 - eps) | (ratio > 1 + eps))
  grad = np.where(active, 0.0, -ratio * a) + beta * (1 - np.exp(q))
  return loss, grad


@pytest.mark.parametrize('beta', [0.0, 0.04])
def test_token_terms_and_gradient_equal_float64(beta):
  rng = np.random.default_rng(0)
  logp = rng.normal(-2, 1, (4, 5))
  old = logp + rng.normal(0, 0.3, (4, 5))
  ref = logp + rng.normal(0, 0.5, (4, 5))
  adv = rng.normal(0, 1, 4)
  expected, expected_grad = _reference(logp, old, ref, adv, 0.2, beta)
  f32 = lambda x: jnp.asarray(x, jnp.float32)

  def total(lp):
    terms, _, _ = grpo.token_terms(lp, f32(old), f32(ref), f32(adv), 0.2, beta)
    return jnp.sum(terms), terms

  (_, terms), grad = jax.value_and_grad(total, has_aux=True)(f32(logp))
  np.testing.assert_allclose(terms, expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-6)


def test_k3_is_zero_at_the_reference_and_positive_elsewhere():
  logp = jnp.asarray([[-1.0, -2.0, -3.0]])
  ref = jnp.asarray([[-1.0, -1.5, -4.0]])
  _, kl, _ = grpo.token_terms(logp, logp, ref, jnp.zeros((1,)), 0.2, 1.0)
  q = np.array([0.0, 0.5, -1.0])
  np.testing.assert_allclose(kl[0], np.exp(q) - q - 1, rtol=1e-6)
  assert float(kl[0, 0]) == 0.0 and np.all(np.asarray(kl[0, 1:]) > 0)
