"""Loss, train_step and eval_step: pure functions of (state, batch), jitted by the loop.

State is a dict: step, params, opt_state, rng, nonfinite_streak, nonfinite_total, and
moe_bias where experts balance without a loss (moe.bias_update_rate): the model's
variables are params (+ moe_bias).
Glossary: B batch, L length, V vocab.
"""

import jax
import jax.numpy as jnp
import optax

# Which batch keys hold the targets and weights of each family's loss.
LOSS_KEYS = {
    'decoder': ('targets', 'loss_weights'),
    'encoder': ('targets', 'loss_weights'),
    'encoder_decoder': ('decoder_targets', 'decoder_loss_weights'),
}


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


MODEL_VARIABLES = ('params', 'moe_bias')


def model_variables(state):
  """The variables model.apply takes, out of the train state."""
  return {k: state[k] for k in MODEL_VARIABLES if k in state}


def _batch_loss(model, variables, batch, family, z_loss, rng=None):
  """Weighted sums of the token loss, plus the next-sentence loss where the model has one,
  plus the MoE statistics (`moe`) where the model has experts, plus the experts' updated
  selection biases (`moe_bias`) when training moves them."""
  targets_key, weights_key = LOSS_KEYS[family]
  train = rng is not None
  has_experts = bool(model.config.moe.num_experts)
  mutable = ['moe'] + (['moe_bias'] if train and 'moe_bias' in variables else [])
  outputs = model.apply(variables, batch, train=train,
                        rngs={'dropout': rng} if train else None,
                        mutable=mutable if has_experts else False)
  moe, moe_bias = None, None
  if has_experts:
    outputs, collections = outputs
    moe, moe_bias = moe_stats(collections['moe']), collections.get('moe_bias')
  logits_BLV = outputs['logits'] if isinstance(outputs, dict) else outputs
  sums = dict(zip(('nll', 'z', 'weight'), cross_entropy(
      logits_BLV, batch[targets_key], batch[weights_key], z_loss)))
  if isinstance(outputs, dict) and 'nsp_logits' in outputs:
    real_B = (batch['segment_ids'][:, 0] > 0).astype(jnp.float32)  # padding rows: weight 0
    nsp_nll, _, nsp_weight = cross_entropy(outputs['nsp_logits'][:, None],
                                           batch['next_sentence_labels'][:, None],
                                           real_B[:, None])
    sums.update(nsp_nll=nsp_nll, nsp_weight=nsp_weight)
  if moe:
    sums['moe'] = moe
  if moe_bias is not None:
    sums['moe_bias'] = moe_bias
  return sums


def make_train_step(model, optimizer, learning_rate_fn, config):
  """(state, batch) -> (state, metrics); a NaN/Inf loss or gradient leaves state unchanged."""
  family, z_loss = config.model.family, config.train.z_loss
  moe_config = config.model.moe

  def loss_fn(params, moe_bias, batch, rng):
    variables = {'params': params} if moe_bias is None else {'params': params,
                                                             'moe_bias': moe_bias}
    sums = _batch_loss(model, variables, batch, family, z_loss, rng)
    weight = jnp.maximum(sums['weight'], 1.0)
    aux = {'loss': sums['nll'] / weight, 'z_loss': sums['z'] / weight}
    total = (sums['nll'] + sums['z']) / weight
    if 'nsp_nll' in sums:
      aux['nsp_loss'] = sums['nsp_nll'] / jnp.maximum(sums['nsp_weight'], 1.0)
      total = total + aux['nsp_loss']
    if 'moe' in sums:  # balance and router z-loss, averaged over the MoE layers
      aux.update(sums['moe'])
      total = (total + moe_config.balance_loss * sums['moe']['moe_aux_loss'] +
               moe_config.z_loss * sums['moe']['moe_z_loss'])
    return total, (aux, sums.get('moe_bias'))

  def train_step(state, batch):
    rng = jax.random.fold_in(state['rng'], state['step'])
    (total, (aux, moe_bias)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state['params'], state.get('moe_bias'), batch, rng)
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = optimizer.update(grads, state['opt_state'], state['params'])
    params = optax.apply_updates(state['params'], updates)

    finite = jnp.isfinite(total) & jnp.isfinite(grad_norm)
    keep_if_finite = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)
    streak = jnp.where(finite, 0, state['nonfinite_streak'] + 1)
    new_state = dict(
        state, step=state['step'] + 1,
        params=keep_if_finite(params, state['params']),
        opt_state=keep_if_finite(opt_state, state['opt_state']),
        nonfinite_streak=streak,
        nonfinite_total=state['nonfinite_total'] + (~finite).astype(jnp.int32))
    if moe_bias is not None:
      new_state['moe_bias'] = keep_if_finite(moe_bias, state['moe_bias'])
    metrics = {**aux, 'grad_norm': grad_norm,
               'learning_rate': learning_rate_fn(state['step']),
               'nonfinite_streak': streak, 'nonfinite_total': new_state['nonfinite_total']}
    return new_state, metrics

  return train_step


def make_eval_step(model, config):
  """(model variables, batch) -> summed loss and weight, so batches combine exactly."""
  def eval_step(variables, batch):
    sums = _batch_loss(model, variables, batch, config.model.family, 0.0)
    return {'loss_sum': sums['nll'], 'weight_sum': sums['weight']}
  return eval_step
