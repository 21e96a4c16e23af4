"""The train state, created sharded: eval_shape -> logical specs -> jit(init, out_shardings).

State is a dict: step, params, opt_state, rng, nonfinite_streak, nonfinite_total, and the
model's state collections (models.STATE_COLLECTIONS, e.g. moe_bias) where it has them.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from zoo import families
from zoo import models
from zoo import sharding
from zoo.models import lora
from zoo import optim


def model_variables(state):
  """The variables model.apply takes (params + state collections), out of the train state
  (or out of a tree shaped like it: its shardings)."""
  return {k: state[k] for k in ('params', *models.STATE_COLLECTIONS) if k in state}


def trainable(config, params):
  """Which parameters train: a tree of bools (train.lora: the adapters and a label head;
  model.mla.index_stage='warmup': the indexers, DeepSeek-V3.2's dense warm-up), or None for
  all."""
  if config.train.lora.rank:
    return lora.trainable(params)
  a = config.model.mla
  if a.kv_lora_rank and a.index_heads and a.index_stage == 'warmup':
    return jax.tree_util.tree_map_with_path(
        lambda path, _: 'indexer' in (getattr(k, 'key', None) for k in path), params)
  return None


def make(model, config, mesh, learning_rate):
  """-> (optimizer, init_fn(rng) -> state, abstract state with shardings, shardings).
  The optimizer (at the schedule `learning_rate`: the run's) is built here: Adafactor needs
  to know which parameters are layer stacks."""
  batch = families.example_batch(config.model, 1, config.data.seq_len)
  rng = jax.random.PRNGKey(0)
  boxed = jax.eval_shape(model.init, rng, batch)  # the model traced once for its shapes
  param_specs, params = nn.get_partition_spec(boxed['params']), nn.unbox(boxed['params'])
  axis_rules = sharding.rules(config)
  param_shardings = jax.tree.map(
      lambda s, x: sharding.fit(s, x.shape),
      sharding.logical_to_shardings(param_specs, mesh, axis_rules), params)
  optimizer = optim.make(config.optim, learning_rate, param_specs,
                         trainable(config, params), param_shardings)

  def assemble(variables, state_rng):
    params = nn.unbox(variables['params'])
    state = {'step': jnp.zeros((), jnp.int32), 'params': params,
             'opt_state': optimizer.init(params), 'rng': state_rng,
             'nonfinite_streak': jnp.zeros((), jnp.int32),
             'nonfinite_total': jnp.zeros((), jnp.int32)}
    state.update({k: variables[k] for k in models.STATE_COLLECTIONS if k in variables})
    return state

  def init_fn(rng):
    params_rng, state_rng = jax.random.split(rng)
    return assemble(model.init(params_rng, batch), state_rng)

  abstract = jax.eval_shape(assemble, boxed, rng)  # the optimizer's shapes, not the model's
  specs = jax.tree.map(lambda _: P(), abstract)
  specs.update(params=param_specs,
               opt_state=_opt_state_specs(abstract['opt_state'], abstract['params'],
                                          param_specs))
  shardings = sharding.logical_to_shardings(specs, mesh, axis_rules)
  shardings = jax.tree.map(lambda s, x: sharding.fit(s, x.shape), shardings, abstract)
  abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          abstract, shardings)
  return optimizer, init_fn, abstract, shardings


def _opt_state_specs(opt_state, params, param_specs):
  """Logical specs of the optimizer state: every subtree shaped like the parameter tree
  (moments, Adafactor's row/column statistics) follows the parameters' axes, dropping the
  dim a statistic averaged away; counters and placeholders are replicated."""
  treedef = jax.tree.structure(params)
  is_spec = lambda x: isinstance(x, P)
  # multi_transform's branches (Muon's AdamW leaves, LoRA's frozen ones) hold MaskedNodes
  is_masked = lambda x: isinstance(x, optax.MaskedNode)
  shaped_like_params = lambda n: jax.tree.structure(n, is_leaf=is_masked) == treedef

  def leaf_spec(x, p, spec):
    if is_masked(x):
      return x
    if x.shape == p.shape:
      return spec
    for dim in range(len(p.shape)):  # a statistic with one dim averaged away
      if x.shape == p.shape[:dim] + p.shape[dim + 1:]:
        return P(*spec[:dim], *spec[dim + 1:])
    return P()

  def visit(node):
    if shaped_like_params(node):
      return jax.tree.map(leaf_spec, node, params,
                          jax.tree.unflatten(treedef, jax.tree.leaves(param_specs,
                                                                      is_leaf=is_spec)),
                          is_leaf=is_masked)
    return P()

  return jax.tree.map(visit, opt_state, is_leaf=shaped_like_params)
