"""Preference optimisation on pairs (data.task.kind='preference'): each row holds a prompt's
chosen and rejected completions ([B, 2, L], zoo/families/tasks.py: pair_row), and the loss
compares their log-probabilities under the model and under a frozen reference.

With pi and r a completion's summed log-probability under the model and the reference, c
and w the chosen and rejected, |y| a completion's token count, beta and eps
(train.preference.beta, label_smoothing):
  dpo    (Rafailov et al. 2023, eq. 7; cDPO's label smoothing):
         h = beta ((pi_c - r_c) - (pi_w - r_w)),  loss = -(1 - eps) log s(h) - eps log s(-h)
  ipo    (Azar et al. 2023, eq. 17):  h = (pi_c - r_c) - (pi_w - r_w),
         loss = (h - 1 / (2 beta))^2
  simpo  (Meng et al. 2024, eq. 6; no reference): h = beta (pi_c / |y_c| - pi_w / |y_w|)
         - gamma,  loss = -(1 - eps) log s(h) - eps log s(-h)
With train.preference.nll_weight = alpha > 0 each pair adds alpha x the chosen completion's
mean token negative log-likelihood, -pi_c / |y_c| (RPO: Pang et al. 2024, eq. 2), which keeps
DPO from pushing the chosen answer's own likelihood down with the rejected one's.
Logged: the loss, the implicit rewards (beta (pi - r); SimPO: beta pi / |y|) of each side
and their margin, the share of pairs whose chosen reward is higher (preference_accuracy),
and the mean summed log-probabilities of each side.

Glossary: B rows of a batch (each a pair), L length, V vocab.
"""

import jax
import jax.numpy as jnp

from zoo.families import loss as loss_lib
from zoo.models import lora

KINDS = ('dpo', 'ipo', 'simpo')


def counts(batch):
  """The whole batch's normaliser: its real pairs (an eval batch's padding rows aside)."""
  return {'rows': batch['targets'].shape[0], 'pairs': jnp.sum(_real(batch))}


def _real(batch):
  return (batch['segment_ids'][:, 0, 0] > 0).astype(jnp.float32)


def token_logps(model, variables, batch, rng=None):
  """Each target token's log-probability [B..., L] under the model, float32; batch leaves
  [B..., L] (a pair's two rows are run as two rows)."""
  lead = batch['targets'].shape[:-1]
  flat = {k: v.reshape(-1, v.shape[-1]) for k, v in batch.items()}
  logits_BLV = loss_lib.apply(model, variables, flat, rng).outputs.astype(jnp.float32)
  target_BL = jnp.take_along_axis(logits_BLV, flat['targets'][..., None], axis=-1)[..., 0]
  logp_BL = target_BL - jax.nn.logsumexp(logits_BLV, axis=-1)
  return logp_BL.reshape(*lead, -1)


def sequence_logps(model, variables, batch, rng=None):
  """-> (summed log-probability of each row's weighted targets, their count), [B, 2]."""
  weights = batch['loss_weights']
  return (jnp.sum(token_logps(model, variables, batch, rng) * weights, axis=-1),
          jnp.sum(weights, axis=-1))


def reference_logps(model, variables, batch, teacher):
  """The frozen reference's summed log-probabilities [B, 2]: the teacher copy's, else (LoRA)
  the model's own with its adapters switched off; never differentiated."""
  if teacher is not None:
    model, variables = teacher
  else:
    variables = {**variables, 'params': lora.switched_off(variables['params'])}
  return jax.lax.stop_gradient(sequence_logps(model, variables, batch)[0])


def pair_losses(kind, policy_B2, reference_B2, lengths_B2, beta, label_smoothing, gamma,
                nll_weight=0.0):
  """-> (each pair's loss [B], chosen reward [B], rejected reward [B]) by the formulas in
  the module docstring; index 0 of the last axis is the chosen completion."""
  if kind == 'simpo':
    rewards_B2 = beta * policy_B2 / jnp.maximum(lengths_B2, 1.0)
    h_B = rewards_B2[:, 0] - rewards_B2[:, 1] - gamma
  else:
    ratio_B2 = policy_B2 - reference_B2
    rewards_B2 = beta * ratio_B2
    h_B = (beta if kind == 'dpo' else 1.0) * (ratio_B2[:, 0] - ratio_B2[:, 1])
  if kind == 'ipo':
    loss_B = jnp.square(h_B - 1.0 / (2.0 * beta))
  else:
    loss_B = (-(1.0 - label_smoothing) * jax.nn.log_sigmoid(h_B) -
              label_smoothing * jax.nn.log_sigmoid(-h_B))
  if nll_weight:
    loss_B = loss_B - nll_weight * policy_B2[:, 0] / jnp.maximum(lengths_B2[:, 0], 1.0)
  return loss_B, rewards_B2[:, 0], rewards_B2[:, 1]


def loss(model, config, variables, batch, rng=None, whole=None, step=None, teacher=None):
  """The pairs' mean preference loss over the whole batch's real pairs (whole: counts of the
  batch this one is a microbatch of), with its metrics as shares of the whole."""
  del step
  p, kind = config.train.preference, config.train.objective
  whole = whole or counts(batch)
  policy_B2, lengths_B2 = sequence_logps(model, variables, batch, rng)
  reference_B2 = (jnp.zeros_like(policy_B2) if kind == 'simpo' else
                  reference_logps(model, variables, batch, teacher))
  loss_B, chosen_B, rejected_B = pair_losses(kind, policy_B2, reference_B2, lengths_B2,
                                             p.beta, p.label_smoothing, p.simpo_gamma,
                                             p.nll_weight)
  real_B = _real(batch)
  pairs = jnp.maximum(whole['pairs'], 1.0)
  share = lambda x_B: jnp.sum(x_B * real_B) / pairs
  summed = jnp.sum(loss_B * real_B)
  metrics = {'loss': summed / pairs, 'reward_chosen': share(chosen_B),
             'reward_rejected': share(rejected_B), 'reward_margin': share(chosen_B - rejected_B),
             'preference_accuracy': share((chosen_B > rejected_B).astype(jnp.float32)),
             'logps_chosen': share(policy_B2[:, 0]), 'logps_rejected': share(policy_B2[:, 1])}
  return loss_lib.Loss(summed / pairs, metrics, {}, summed, jnp.sum(real_B),
                       eval_sums={'preference_accuracy': jnp.sum(
                           (chosen_B > rejected_B).astype(jnp.float32) * real_B)})
