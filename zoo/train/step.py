"""train_step and eval_step: pure functions of (state, batch), jitted by their callers.

Neither knows the family: the loss (zoo/families: `loss(variables, batch, rng, whole)` ->
families.loss.Loss) says what is minimised, what is logged and which model state moved.

Gradient accumulation (train.microbatches = k): the batch's rows are dealt into k
microbatches (microbatch j: rows j, j+k, j+2k, ..., so each device keeps its own rows) and
a scan runs them one after another, each loss normalised by the whole batch's counts, so
the summed (float32) gradients, losses and metrics are the whole batch's; then one update.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from zoo import muon
from zoo.train import state as state_lib


def _deal(batch, k):
  """[B, ...] leaves -> [k, B/k, ...]: microbatch j holds rows j, j+k, j+2k, ..., each
  microbatch split over the batch axes as the batch was."""
  def deal(x):
    x = x.reshape(x.shape[0] // k, k, *x.shape[1:]).swapaxes(0, 1)
    return nn.with_logical_constraint(x, (None, 'batch') + (None,) * (x.ndim - 2))
  return jax.tree.map(deal, batch)


def _accumulated(grad_fn, params, batch, rng, whole, k):
  """grad_fn(params, microbatch, rng, whole) -> ((total, loss), grads) over k microbatches
  -> (the summed loss, moved state averaged; the summed gradients, in float32)."""
  def run(j, micro):
    (_, loss), grads = grad_fn(params, micro, jax.random.fold_in(rng, j), whole)
    return loss, jax.tree.map(lambda g: g.astype(jnp.float32), grads)

  def add(sums, inputs):
    (loss, grads), (sum_loss, sum_grads) = run(*inputs), sums
    total = jax.tree.map(jnp.add, sum_loss._replace(max_logits=None, eval_sums=None),
                         loss._replace(max_logits=None, eval_sums=None))
    highest = jax.tree.map(jnp.maximum, sum_loss.max_logits, loss.max_logits)
    return (total._replace(max_logits=highest), jax.tree.map(jnp.add, sum_grads, grads)), None

  micro = _deal(batch, k)
  shapes = jax.eval_shape(run, 0, jax.tree.map(lambda x: x[0], micro))
  zero_loss, zero_grads = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  zeros = (zero_loss._replace(max_logits=jax.tree.map(
      lambda s: jnp.full(s.shape, -jnp.inf, s.dtype), shapes[0].max_logits)), zero_grads)
  (loss, grads), _ = jax.lax.scan(add, zeros, (jnp.arange(k), micro))
  return loss._replace(state=jax.tree.map(lambda v: v / k, loss.state)), grads


def _poisoned(params, step, nonfinite):
  """train.fault.nonfinite=(FIRST, COUNT): steps FIRST..FIRST+COUNT-1 see NaN parameters,
  so their loss and gradients are NaN (an injected burst); other steps see `params`."""
  first, count = nonfinite
  burst = (step >= first) & (step < first + count)
  return jax.tree.map(lambda p: jnp.where(burst, jnp.nan, 1).astype(p.dtype) * p, params)


def _differentiated(params, trainable):
  """-> (the leaves to differentiate, leaves -> the whole tree again, their gradients ->
  gradients of the whole tree, zero on the rest); trainable None = every leaf."""
  if trainable is None:
    return params, lambda d: d, lambda g: g
  leaves, treedef = jax.tree.flatten(params)
  flags = jax.tree.leaves(trainable)
  join = lambda chosen, rest: treedef.unflatten(
      [next(chosen) if f else r for f, r in zip(flags, rest)])
  return ([x for x, f in zip(leaves, flags) if f],
          lambda d: join(iter(d), leaves),
          lambda g: join(iter(g), [jnp.zeros_like(x) for x in leaves]))


def _max_logit_metrics(max_logits):
  """The largest logit over all heads, and per attention layer (in tree order, a stack's
  layers in turn)."""
  per_layer = jnp.concatenate([jnp.max(x[0], axis=-1).reshape(-1)
                               for x in jax.tree.leaves(max_logits, is_leaf=lambda x:
                                                        isinstance(x, tuple))])
  return {'max_logit': jnp.max(per_layer), 'max_logit_per_layer': per_layer}


def make_train_step(loss_fn, optimizer, learning_rate_fn, microbatches=1, counts_fn=None,
                    nonfinite=(0, 0), trainable=None, qk_clip=0.0, teacher_model=None):
  """(state, batch) -> (state, metrics); a NaN/Inf loss or gradient leaves state unchanged.
  metrics: the loss's rows + grad_norm, learning_rate, nonfinite_streak, nonfinite_total.
  microbatches > 1: gradient accumulation; counts_fn(batch) gives the whole batch's loss
  normalisers (families.counts_fn). nonfinite: an injected fault (tests), see _poisoned.
  trainable: a tree of bools like the parameters (train.lora), None = all: only those are
  differentiated (the others' gradients are zeros the optimizer ignores). qk_clip > 0
  (optim.muon.qk_clip): MuonClip's QK-clip at that threshold after each update
  (zoo/muon.py); logged max logits (model.attention.log_max_logit) join the metrics.
  teacher_model (train.teacher): the step takes the teacher's variables as a third
  argument and the loss distils from it (zoo/families/distill.py)."""

  def objective(params, others, batch, rng, whole, step, teacher):
    extra = {} if teacher is None else {'teacher': (teacher_model, teacher)}
    loss = loss_fn({'params': params, **others}, batch, rng, whole, step=step, **extra)
    return loss.total, loss

  def train_step(state, batch, teacher=None):
    rng = jax.random.fold_in(state['rng'], state['step'])
    others = {k: v for k, v in state_lib.model_variables(state).items() if k != 'params'}
    params = state['params']
    if nonfinite[1]:
      params = _poisoned(params, state['step'] + 1, nonfinite)
    chosen, whole, whole_grads = _differentiated(params, trainable)
    grad_fn = jax.value_and_grad(
        lambda p, b, r, w: objective(whole(p), others, b, r, w, state['step'], teacher),
        has_aux=True)
    if microbatches == 1:
      (_, loss), grads = grad_fn(chosen, batch, rng, None)
    else:
      loss, grads = _accumulated(grad_fn, chosen, batch, rng, counts_fn(batch), microbatches)
    grads = whole_grads(grads)
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = optimizer.update(grads, state['opt_state'], state['params'])
    params = optax.apply_updates(state['params'], updates)
    if qk_clip:
      params = muon.qk_clip(params, loss.max_logits, qk_clip)

    finite = jnp.isfinite(loss.total) & jnp.isfinite(grad_norm)
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
               **(_max_logit_metrics(loss.max_logits) if loss.max_logits else {}),
               'learning_rate': learning_rate_fn(state['step']),
               'nonfinite_streak': streak, 'nonfinite_total': new_state['nonfinite_total']}
    return new_state, metrics

  return train_step


def make_eval_step(loss_fn, teacher_model=None):
  """(model variables, batch[, the reference's variables]) -> summed loss and weight (and
  an objective's eval sums), so batches combine exactly; with a label head also its
  predictions, the labels and which rows are real (a task's metrics). teacher_model: an
  objective's frozen reference, whose variables come third."""
  def eval_step(variables, batch, teacher=None):
    extra = {} if teacher is None else {'teacher': (teacher_model, teacher)}
    loss = loss_fn(variables, batch, **extra)
    out = {'loss_sum': loss.nll_sum, 'weight_sum': loss.weight_sum,
           **{f'sum_{k}': v for k, v in (loss.eval_sums or {}).items()}}
    if loss.predictions is not None:
      out.update(predictions=loss.predictions, labels=batch['labels'],
                 real=batch['segment_ids'][:, 0] > 0)
    return out
  return eval_step
