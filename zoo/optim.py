"""The optimizers (AdamW, Adafactor, Muon: zoo/muon.py) and learning-rate schedules the
papers trained with.

Adafactor (Shazeer & Stern 2018) is factored per layer: a parameter of a scanned stack is
[layers, ...], and each layer's slice gets its own row/column statistics, update clipping
and parameter scale, exactly as if the layers were unrolled. `stacked` (a tree of bools,
from the parameters' logical axes) says which leaves carry that layer axis.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec as P

from zoo import muon
from zoo import phases as phases_lib
from zoo.errors import ConfigError

# norm gains, biases (Flax names them so; the experts' are wi_0_bias, ..., router_bias),
# attention sinks, and a Gated DeltaNet layer's decay rates, its norm's gain (decay_bias:
# a bias) as Qwen3-Next and FLA keep them
NO_DECAY_LEAVES = ('scale', 'bias', 'sinks', 'decay_log', 'norm_scale')
PARAM_SCALE_FLOOR = 1e-3  # Adafactor's epsilon_2: the smallest parameter RMS a step scales by


# --------------------------------------------------------------------------- schedules

def schedule(optim_config, total_steps, phases=None):
  """Learning rate per step (optim.schedule):
  cosine / linear / constant: 0 -> peak over warmup_steps, then decay to the floor
    (peak x min_learning_rate_ratio) at total_steps;
  rsqrt (T5): the peak up to warmup_steps, then peak x sqrt(warmup_steps / step);
  wsd: warmup, the peak held, then a linear decay to the floor over the last
    decay_fraction of the steps.
  With optim.warmup_tokens or optim.decay_tokens the same shapes run on the tokens trained
  so far (phases: zoo/phases.py resolved): warmup over warmup_tokens, the decay done
  at decay_tokens (0 = the run's total), the floor after it (GPT-3, Brown et al. 2020
  sec. 2.3 and App. B)."""
  o = optim_config
  if not (o.warmup_tokens or o.decay_tokens):
    return _shape(o, total_steps, o.warmup_steps)
  horizon = o.decay_tokens or phases_lib.total_tokens(phases)
  by_tokens = _shape(o, horizon, o.warmup_tokens)
  return lambda step: by_tokens(phases_lib.tokens_before(phases, step))


def _shape(o, total, warmup):
  """The schedule over `total` units (steps or tokens), `warmup` of them warming up."""
  peak, floor = o.learning_rate, o.learning_rate * o.min_learning_rate_ratio
  if o.schedule == 'rsqrt':
    start = max(warmup, 1)
    return lambda step: peak * jnp.sqrt(start / jnp.maximum(step, start))
  decay_steps = max(total - warmup, 1)
  if o.schedule == 'wsd':
    decay_steps = wsd_decay_steps(o, total)
    decay = optax.join_schedules(
        [optax.constant_schedule(peak), optax.linear_schedule(peak, floor, decay_steps)],
        [total - decay_steps - warmup])
  else:
    decay = {
        'cosine': optax.cosine_decay_schedule(peak, decay_steps,
                                              alpha=o.min_learning_rate_ratio),
        'linear': optax.linear_schedule(peak, floor, decay_steps),
        'constant': optax.constant_schedule(peak),
    }[o.schedule]
  if not warmup:
    return decay
  return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), decay], [warmup])


def wsd_decay_steps(optim_config, total):
  """Steps (or tokens) of the warmup-stable-decay schedule's final decay."""
  return max(int(round(optim_config.decay_fraction * total)), 1)


# ---------------------------------------------------------------------------- AdamW

def decay_mask(params):
  """True where weight decay applies: every leaf but NO_DECAY_LEAVES and *_bias."""
  def decays(path, _):
    name = str(getattr(path[-1], 'key', ''))
    return name not in NO_DECAY_LEAVES and not name.endswith('_bias')
  return jax.tree_util.tree_map_with_path(decays, params)


def _decayed_weights(o, learning_rate):
  """Adds weight_decay x the weight (x the learning rate too at optim.weight_decay_power=2)
  to the update, which the learning rate then scales: each step takes weight_decay x
  lr^power of every weight but norm scales and biases (power 2: PaLM's lr^2, sec. 5)."""
  if o.weight_decay_power == 1:
    return optax.add_decayed_weights(o.weight_decay, mask=decay_mask)

  def init(params):
    del params
    return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

  def update(updates, state, params):
    rate = o.weight_decay * learning_rate(state.count)
    updates = jax.tree.map(lambda u, p, decays: u + rate * p if decays else u, updates,
                           params, decay_mask(params))
    return updates, optax.ScaleByScheduleState(count=optax.safe_increment(state.count))

  return optax.GradientTransformation(init, update)


def _adamw(o, learning_rate):
  if o.weight_decay_power == 1:
    return optax.adamw(learning_rate, b1=o.b1, b2=o.b2, eps=o.eps,
                       weight_decay=o.weight_decay, mask=decay_mask)
  return optax.chain(optax.scale_by_adam(b1=o.b1, b2=o.b2, eps=o.eps),
                     _decayed_weights(o, learning_rate),
                     optax.scale_by_learning_rate(learning_rate))


# ------------------------------------------------------------------------- Adafactor

def factored_axes(shape, stacked, min_dim_size):
  """(row axis, column axes) of a parameter's factored second moment, or None (a full
  moment). One layer's slice (never the stacked layer axis) is read as a matrix: its
  largest dim the rows, the rest the columns, so an attention kernel [d_model, heads,
  head_dim] factors as T5's [d_model, heads x head_dim] did. None when the slice has one
  dim, or rows or columns number fewer than min_dim_size."""
  first = 1 if stacked else 0
  dims = shape[first:]
  if len(dims) < 2:
    return None
  row = int(np.argsort(dims, kind='stable')[-1])
  cols = tuple(first + i for i in range(len(dims)) if i != row)
  if dims[row] < min_dim_size or np.prod([shape[c] for c in cols]) < min_dim_size:
    return None
  return first + row, cols


class FactoredState(NamedTuple):
  count: jax.Array
  v_row: Any  # per leaf: the moment averaged over its column axis ([1] when not factored)
  v_col: Any  # ... over its row axis
  v: Any  # per leaf: the full moment where not factored ([1] when factored)


def _layer_rms(x, stacked):
  """RMS of each layer's slice (keeping dims for broadcasting), or of the whole leaf."""
  axes = tuple(range(1 if stacked else 0, x.ndim))
  return jnp.sqrt(jnp.mean(jnp.square(x), axis=axes, keepdims=True))


def _scale_by_factored_rms(a, stacked):
  """Adafactor's core: g / sqrt(v_hat), v_hat factored into row x column statistics per
  layer, decay beta_t = 1 - t^-decay_rate (t from 1: the first step sees g^2 alone), then
  update clipping (each layer's update RMS at most clipping_threshold) and the parameter
  scale (times max(RMS of the layer's parameter, 1e-3))."""

  def axes(p, s):
    return factored_axes(p.shape, s, a.min_dim_size_to_factor) if a.factored else None

  def flags(params):
    return jax.tree.map(lambda _: False, params) if stacked is None else stacked

  def init(params):
    def one(p, s, which):
      f = axes(p, s)
      if f is None:
        return jnp.zeros(p.shape if which == 'v' else (1,), jnp.float32)
      if which == 'v':
        return jnp.zeros((1,), jnp.float32)
      dropped = f[1] if which == 'v_row' else (f[0],)
      return jnp.zeros([n for i, n in enumerate(p.shape) if i not in dropped], jnp.float32)
    trees = {w: jax.tree.map(lambda p, s, w=w: one(p, s, w), params, flags(params))
             for w in ('v_row', 'v_col', 'v')}
    return FactoredState(jnp.zeros([], jnp.int32), **trees)

  def update(grads, state, params):
    t = (state.count + 1).astype(jnp.float32)
    beta = 1.0 - t ** -a.decay_rate

    def one(g, v_row, v_col, v, p, s):
      g32 = g.astype(jnp.float32)
      g2 = jnp.square(g32) + a.eps
      f = axes(p, s)
      if f is None:
        v = beta * v + (1 - beta) * g2
        u = g32 * jax.lax.rsqrt(v)
      else:
        row, cols = f
        v_row = beta * v_row + (1 - beta) * jnp.mean(g2, axis=cols)
        v_col = beta * v_col + (1 - beta) * jnp.mean(g2, axis=row)
        row_in_v_row = row - sum(c < row for c in cols)
        row_mean = jnp.mean(v_row, axis=row_in_v_row, keepdims=True)
        u = (g32 * jnp.expand_dims(jax.lax.rsqrt(v_row / row_mean), cols) *
             jnp.expand_dims(jax.lax.rsqrt(v_col), row))
      if a.clipping_threshold:
        u = u / jnp.maximum(1.0, _layer_rms(u, s) / a.clipping_threshold)
      if a.multiply_by_parameter_scale:
        u = u * jnp.maximum(_layer_rms(p.astype(jnp.float32), s), PARAM_SCALE_FLOOR)
      return u.astype(g.dtype), v_row, v_col, v

    out = jax.tree.map(one, grads, state.v_row, state.v_col, state.v, params, flags(params))
    pick = lambda i: jax.tree.map(lambda _, o: o[i], grads, out)
    return pick(0), FactoredState(state.count + 1, pick(1), pick(2), pick(3))

  return optax.GradientTransformation(init, update)


def _adafactor(o, learning_rate, stacked):
  a = o.adafactor
  chain = [_scale_by_factored_rms(a, stacked)]
  if a.momentum:
    chain.append(optax.ema(a.momentum, debias=False))
  if o.weight_decay:
    chain.append(_decayed_weights(o, learning_rate))
  chain.append(optax.scale_by_learning_rate(learning_rate))
  return optax.chain(*chain)


def state_floats(optim_config, shape, stacked, matrix=None):
  """Optimizer-state numbers one parameter of `shape` keeps (plan mode's bytes); matrix:
  its muon.matrix_dims (None: AdamW's leaf under Muon)."""
  size = int(np.prod(shape))
  if optim_config.name == 'muon':
    return size if matrix is not None else 2 * size
  if optim_config.name == 'adamw':
    return 2 * size
  a = optim_config.adafactor
  f = factored_axes(shape, stacked, a.min_dim_size_to_factor) if a.factored else None
  moment = size if f is None else size // int(np.prod([shape[c] for c in f[1]])) + (
      size // shape[f[0]])
  return moment + (size if a.momentum else 0)


# ----------------------------------------------------------------------------- make

def stacked_leaves(param_axes):
  """Logical axes per parameter (nn.get_partition_spec of boxed params) -> True where the
  first axis is a scanned stack's layer axis."""
  is_spec = lambda x: isinstance(x, jax.sharding.PartitionSpec)
  return jax.tree.map(lambda spec: len(spec) > 0 and spec[0] == 'layers', param_axes,
                      is_leaf=is_spec)


def make(optim_config, learning_rate, param_specs=None, trainable=None, shardings=None):
  """The optimizer: optim.name at the schedule `learning_rate` (step -> rate: schedule()),
  after global-norm clipping (clip_norm). param_specs: the parameters' logical
  PartitionSpecs (Adafactor reads the layer stacks from them, Muon its matrices; None = no
  stacks, and Muon needs them). trainable: a tree of bools like the parameters (train.lora:
  zoo/models/lora.py), None = all; the others keep no optimizer state and never move.
  shardings: the parameters' NamedShardings, where Muon places its iteration (None: left
  to XLA)."""
  if optim_config.name == 'muon':
    tx = _muon(optim_config, learning_rate, param_specs, trainable, shardings)
  else:
    stacked = None if param_specs is None else stacked_leaves(param_specs)
    tx = _make(optim_config, learning_rate, stacked)
  if trainable is None:
    return tx
  labels = jax.tree.map(lambda t: 'train' if t else 'frozen', trainable)
  return optax.multi_transform({'train': tx, 'frozen': optax.set_to_zero()}, labels)


def _make(optim_config, learning_rate, stacked):
  o = optim_config
  if o.name == 'adamw':
    tx = _adamw(o, learning_rate)
  else:
    tx = _adafactor(o, learning_rate, stacked)
  return _clipped(o, tx)


def _clipped(o, tx):
  if not o.clip_norm:
    return tx
  return optax.chain(optax.clip_by_global_norm(o.clip_norm), tx)


def _muon(o, learning_rate, param_specs, trainable, shardings):
  """Muon on the matrices zoo/muon.py picks, AdamW (optim.b1, b2, eps) on the rest; both
  decay weights by optim.weight_decay x lr (not norm scales or biases), both clipped
  together first."""
  matrix_leaves = muon.matrices(param_specs)
  treedef = jax.tree.structure(param_specs, is_leaf=lambda x: isinstance(x, P))
  trains = [True] * len(matrix_leaves) if trainable is None else jax.tree.leaves(trainable)
  if not any(m is not None and t for m, t in zip(matrix_leaves, trains)):
    raise ConfigError(
        "optim.name='muon' finds no weight matrix to orthogonalize among the trained "
        "parameters (only embeddings, norms, biases, heads): use optim.name='adamw'")
  labels = jax.tree.unflatten(treedef, ['adamw' if m is None else 'muon'
                                        for m in matrix_leaves])
  sharding_leaves = None if shardings is None else jax.tree.leaves(shardings)
  orthogonalized = optax.chain(muon.scale_by_muon(o.muon, matrix_leaves, sharding_leaves),
                               _decayed_weights(o, learning_rate),
                               optax.scale_by_learning_rate(learning_rate))
  return _clipped(o, optax.multi_transform(
      {'muon': orthogonalized,
       'adamw': _adamw(o, lambda step: o.muon.adamw_rate * learning_rate(step))}, labels))
