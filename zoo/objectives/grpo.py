"""GRPO's loss (Shao et al. 2024, DeepSeekMath sec. 4.1; as DeepSeek-R1 trained with it) over
completions already sampled and scored (zoo/post/grpo.py makes the batch): each row is a
prompt and one of its G completions, the loss reading the completion's tokens.

With r_t = pi(y_t) / pi_old(y_t) a token's probability ratio to the policy that sampled it,
A the completion's advantage, eps the clip range (train.grpo.epsilon) and beta the KL weight
(kl_beta), each completion token adds
  -min(r_t A, clip(r_t, 1 - eps, 1 + eps) A) + beta (exp(q_t) - q_t - 1),  q_t = log
  pi_ref(y_t) - log pi(y_t)
(the k3 estimator of KL(pi || pi_ref), Schulman 2020), averaged over every completion token
of the batch (token-level, as DAPO and Dr. GRPO average). The advantages: each reward minus
its group's mean, over the group's standard deviation ('group') or not ('dr_grpo': Liu et al.
2025, which also drops the per-completion length normalisation; token-level averaging has
none).

Glossary: B rows of a batch (P x G), L length, P prompts, G group size.
"""

import jax
import jax.numpy as jnp
import numpy as np

from zoo.families import loss as loss_lib
from zoo.objectives import preference

STD_FLOOR = 1e-4  # a group whose rewards are all equal has zero advantages, not NaN


def advantages(rewards_PG, kind):
  """Group-relative advantages [P, G] (numpy, float64): rewards minus their group's mean,
  over the group's standard deviation (population, + STD_FLOOR) for 'group'."""
  rewards_PG = np.asarray(rewards_PG, np.float64)
  centred_PG = rewards_PG - rewards_PG.mean(axis=1, keepdims=True)
  if kind == 'dr_grpo':
    return centred_PG
  return centred_PG / (rewards_PG.std(axis=1, keepdims=True) + STD_FLOOR)


def token_terms(logp_BL, old_logp_BL, ref_logp_BL, advantage_B, epsilon, kl_beta):
  """-> (each token's loss [B, L], its k3 KL [B, L], whether its clipped term was taken
  [B, L]) by the formula in the module docstring."""
  ratio_BL = jnp.exp(logp_BL - old_logp_BL)
  a_B1 = advantage_B[:, None]
  unclipped_BL = ratio_BL * a_B1
  clipped_BL = jnp.clip(ratio_BL, 1.0 - epsilon, 1.0 + epsilon) * a_B1
  q_BL = ref_logp_BL - logp_BL
  kl_BL = jnp.exp(q_BL) - q_BL - 1.0
  return (-jnp.minimum(unclipped_BL, clipped_BL) + kl_beta * kl_BL, kl_BL,
          clipped_BL < unclipped_BL)


def extra_spec(rows):
  """What the sampling adds to each [B, L] row of the family's batch."""
  float32 = np.dtype(np.float32)
  return {'old_logps': (rows, float32), 'ref_logps': (rows, float32),
          'advantages': (rows[:1], float32)}


def counts(batch):
  return {'rows': batch['targets'].shape[0], 'tokens': jnp.sum(batch['loss_weights'])}


def loss(model, config, variables, batch, rng=None, whole=None, step=None, teacher=None):
  """The batch's mean token loss over the whole batch's completion tokens; the batch carries
  the sampling policy's and the reference's log-probabilities (old_logps, ref_logps [B, L])
  and each row's advantage [B]."""
  del step, teacher  # the reference's log-probabilities come with the batch
  g = config.train.grpo
  whole = whole or counts(batch)
  model_keys = ('inputs', 'targets', 'segment_ids', 'positions', 'loss_weights')
  logp_BL = preference.token_logps(model, variables, {k: batch[k] for k in model_keys}, rng)
  terms_BL, kl_BL, clipped_BL = token_terms(logp_BL, batch['old_logps'], batch['ref_logps'],
                                            batch['advantages'], g.epsilon, g.kl_beta)
  w_BL = batch['loss_weights']
  tokens = jnp.maximum(whole['tokens'], 1.0)
  mean = lambda x_BL: jnp.sum(x_BL * w_BL) / tokens
  summed = jnp.sum(terms_BL * w_BL)
  metrics = {'loss': summed / tokens, 'kl': mean(kl_BL),
             'clip_fraction': mean(clipped_BL.astype(jnp.float32)),
             'ratio': mean(jnp.exp(logp_BL - batch['old_logps']))}
  return loss_lib.Loss(summed / tokens, metrics, {}, summed, jnp.sum(w_BL))
