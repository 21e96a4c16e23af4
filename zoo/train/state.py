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


def model_variables(state):
  """The variables model.apply takes (params + state collections), out of the train state
  (or out of a tree shaped like it: its shardings)."""
  return {k: state[k] for k in ('params', *models.STATE_COLLECTIONS) if k in state}


def make(model, optimizer, config, mesh):
  """-> (init_fn(rng) -> state, abstract state with shardings attached, shardings)."""
  batch = families.example_batch(config.model, 1, config.data.seq_len)

  def init_fn(rng):
    params_rng, state_rng = jax.random.split(rng)
    variables = model.init(params_rng, batch)
    params = nn.unbox(variables['params'])
    state = {'step': jnp.zeros((), jnp.int32), 'params': params,
             'opt_state': optimizer.init(params), 'rng': state_rng,
             'nonfinite_streak': jnp.zeros((), jnp.int32),
             'nonfinite_total': jnp.zeros((), jnp.int32)}
    state.update({k: variables[k] for k in models.STATE_COLLECTIONS if k in variables})
    return state

  rng = jax.random.PRNGKey(0)
  abstract = jax.eval_shape(init_fn, rng)
  param_specs = nn.get_partition_spec(jax.eval_shape(model.init, rng, batch)['params'])
  is_spec = lambda x: isinstance(x, P)
  opt_specs = optax.tree_utils.tree_map_params(
      optimizer, lambda _, spec: spec, abstract['opt_state'], param_specs,
      transform_non_params=lambda _: P(), is_leaf=is_spec)
  specs = jax.tree.map(lambda _: P(), abstract)
  specs.update(params=param_specs, opt_state=opt_specs)
  shardings = sharding.logical_to_shardings(specs, mesh, sharding.rules(config))
  shardings = jax.tree.map(lambda s, x: sharding.fit(s, x.shape), shardings, abstract)
  abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          abstract, shardings)
  return init_fn, abstract, shardings
