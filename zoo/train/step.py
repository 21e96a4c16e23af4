"""train_step and eval_step: pure functions of (state, batch), jitted by their callers.

Neither knows the family: the loss (zoo/families: `loss(variables, batch, rng)` ->
families.loss.Loss) says what is minimised, what is logged and which model state moved.
"""

import jax
import jax.numpy as jnp
import optax

from zoo.train import state as state_lib


def make_train_step(loss_fn, optimizer, learning_rate_fn):
  """(state, batch) -> (state, metrics); a NaN/Inf loss or gradient leaves state unchanged.
  metrics: the loss's rows + grad_norm, learning_rate, nonfinite_streak, nonfinite_total."""

  def objective(params, others, batch, rng):
    loss = loss_fn({'params': params, **others}, batch, rng)
    return loss.total, loss

  def train_step(state, batch):
    rng = jax.random.fold_in(state['rng'], state['step'])
    others = {k: v for k, v in state_lib.model_variables(state).items() if k != 'params'}
    (total, loss), grads = jax.value_and_grad(objective, has_aux=True)(
        state['params'], others, batch, rng)
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = optimizer.update(grads, state['opt_state'], state['params'])
    params = optax.apply_updates(state['params'], updates)

    finite = jnp.isfinite(total) & jnp.isfinite(grad_norm)
    keep_if_finite = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)
    streak = jnp.where(finite, 0, state['nonfinite_streak'] + 1)
    moved = {k: keep_if_finite(v, state[k]) for k, v in loss.state.items()}
    new_state = dict(
        state, **moved, step=state['step'] + 1,
        params=keep_if_finite(params, state['params']),
        opt_state=keep_if_finite(opt_state, state['opt_state']),
        nonfinite_streak=streak,
        nonfinite_total=state['nonfinite_total'] + (~finite).astype(jnp.int32))
    metrics = {**loss.metrics, 'grad_norm': grad_norm,
               'learning_rate': learning_rate_fn(state['step']),
               'nonfinite_streak': streak, 'nonfinite_total': new_state['nonfinite_total']}
    return new_state, metrics

  return train_step


def make_eval_step(loss_fn):
  """(model variables, batch) -> summed loss and weight, so batches combine exactly."""
  def eval_step(variables, batch):
    loss = loss_fn(variables, batch)
    return {'loss_sum': loss.nll_sum, 'weight_sum': loss.weight_sum}
  return eval_step
