"""What the families' losses are made of: token cross-entropy, the model run with its sown
MoE statistics, and the MoE terms. A family's `loss` composes these into a `Loss`.

Glossary: B batch, L length, V vocab.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from zoo import models


class Loss(NamedTuple):
  """One batch's loss, as every family returns it."""
  total: jax.Array  # what the optimizer minimises
  metrics: dict  # rows for the metrics log: 'loss' (mean token NLL) and any the family adds
  state: dict  # model collections the step moved (models.STATE_COLLECTIONS); {} when none
  nll_sum: jax.Array  # summed token NLL and weight, so eval batches combine exactly
  weight_sum: jax.Array


def cross_entropy(logits_BLV, targets_BL, weights_BL, z_loss=0.0):
  """Weighted sums in float32: (negative log-likelihood, z-loss, weight)."""
  logits_BLV = logits_BLV.astype(jnp.float32)
  log_z_BL = jax.nn.logsumexp(logits_BLV, axis=-1)
  target_logit_BL = jnp.take_along_axis(logits_BLV, targets_BL[..., None], axis=-1)[..., 0]
  weights_BL = weights_BL.astype(jnp.float32)
  return (jnp.sum((log_z_BL - target_logit_BL) * weights_BL),
          jnp.sum(z_loss * jnp.square(log_z_BL) * weights_BL),
          jnp.sum(weights_BL))


def moe_stats(collection):
  """The 'moe' collection sown by every MoE layer -> means over layers, per-layer load."""
  found = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(collection)[0]:
    name = next(k.key for k in reversed(path) if hasattr(k, 'key'))
    found.setdefault(name, []).append(leaf)
  per_layer = {k: jnp.concatenate([v.reshape(-1, *v.shape[v.ndim - (k == 'load'):])
                                   for v in found[k]]) for k in found}
  return {'moe_aux_loss': jnp.mean(per_layer['balance_loss']),
          'moe_z_loss': jnp.mean(per_layer['z_loss']),
          'moe_dropped_fraction': jnp.mean(per_layer['dropped_fraction']),
          'moe_load': per_layer['load']}


def apply(model, variables, batch, rng=None):
  """The model on a batch (training, with dropout, when `rng` is given) -> (outputs, MoE
  statistics or None, the state collections it moved)."""
  train = rng is not None
  if not model.config.moe.num_experts:
    return model.apply(variables, batch, train=train,
                       rngs={'dropout': rng} if train else None), None, {}
  moved = [k for k in models.STATE_COLLECTIONS if train and k in variables]
  outputs, collections = model.apply(variables, batch, train=train,
                                     rngs={'dropout': rng} if train else None,
                                     mutable=['moe', *moved])
  return outputs, moe_stats(collections['moe']), {k: collections[k] for k in moved}


def token_loss(logits_BLV, targets_BL, weights_BL, z_loss):
  """Mean token cross-entropy (plus z_loss x log(Z)^2) over the weighted tokens."""
  nll, z, weight = cross_entropy(logits_BLV, targets_BL, weights_BL, z_loss)
  mean = jnp.maximum(weight, 1.0)
  metrics = {'loss': nll / mean}
  if z_loss:
    metrics['z_loss'] = z / mean
  return Loss((nll + z) / mean, metrics, {}, nll, weight)


def add(loss, name, value):
  """`loss` with `value` added to the total and logged as `name`."""
  return loss._replace(total=loss.total + value, metrics={**loss.metrics, name: value})


def with_moe(loss, stats, state, moe_config):
  """Adds the balance and router z-losses (means over the MoE layers), logs the statistics
  and carries the moved state; `loss` unchanged for a dense model."""
  if stats is None:
    return loss
  total = (loss.total + moe_config.balance_loss * stats['moe_aux_loss'] +
           moe_config.z_loss * stats['moe_z_loss'])
  return loss._replace(total=total, metrics={**loss.metrics, **stats}, state=state)

