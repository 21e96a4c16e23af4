import chex
import jax
import numpy as np

from tests import helpers
from zoo import families
from zoo import run as run_lib
from zoo import sharding
from zoo.train import runtime
from zoo.train import state as state_lib
from zoo.train import step as step_lib


def _setup(moe=None, **optim_overrides):
  config = helpers.tiny_config()
  config.train.steps = 300
  if moe:
    config.model.moe.update(moe)
  config.optim.update(warmup_steps=10, learning_rate=3e-3, weight_decay=0.0, **optim_overrides)
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  parts = runtime.model_state(run_lib.resolve(config), mesh)
  state = jax.jit(parts.init_fn, out_shardings=parts.shardings)(jax.random.PRNGKey(0))
  train_step = jax.jit(parts.train_step(config))
  return config, state, train_step


def _batch(seed=0):
  ids = helpers.random_ids((4, 17), seed=seed)
  return {'inputs': ids[:, :-1], 'targets': ids[:, 1:],
          'segment_ids': np.ones((4, 16), np.int32),
          'positions': np.broadcast_to(np.arange(16), (4, 16)).astype(np.int32),
          'loss_weights': np.ones((4, 16), np.float32)}


def test_overfitting_one_batch_drives_the_loss_near_zero():
  config, state, train_step = _setup()
  batch = _batch()
  losses = []
  for _ in range(config.train.steps):
    state, metrics = train_step(state, batch)
    losses.append(float(metrics['loss']))
  assert losses[0] > 3.5  # ~ln(64) at init
  assert losses[-1] < 0.05, losses[::30]


def test_a_nonfinite_loss_skips_the_update_and_is_counted():
  _, state, train_step = _setup()
  state, _ = train_step(state, _batch())
  before = jax.device_get(state)
  bad = dict(_batch(1), loss_weights=np.full((4, 16), np.nan, np.float32))
  for streak in (1, 2):
    state, metrics = train_step(state, bad)
    assert int(metrics['nonfinite_streak']) == streak
  after = jax.device_get(state)
  chex.assert_trees_all_equal(after['params'], before['params'])
  chex.assert_trees_all_equal(after['opt_state'], before['opt_state'])
  assert int(after['step']) == int(before['step']) + 2 and int(after['nonfinite_total']) == 2
  state, metrics = train_step(state, _batch(2))
  assert int(metrics['nonfinite_streak']) == 0 and int(metrics['nonfinite_total']) == 2


def test_an_injected_nonfinite_burst_skips_exactly_its_steps():
  config, state, _ = _setup()
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  parts = runtime.model_state(run_lib.resolve(config), mesh)
  config.train.fault.nonfinite = (2, 2)  # steps 2 and 3
  train_step = jax.jit(parts.train_step(config))
  streaks, kept = [], None
  for step in range(1, 5):
    state, metrics = train_step(state, _batch(step))
    streaks.append(int(metrics['nonfinite_streak']))
    if step == 1:
      kept = jax.device_get(state['params'])
    if step == 3:
      chex.assert_trees_all_equal(jax.device_get(state['params']), kept)
  assert streaks == [0, 1, 2, 0] and int(state['nonfinite_total']) == 2


def test_selection_biases_move_once_a_step_without_gradients_and_hold_on_a_nonfinite_step():
  config, state, train_step = _setup(moe=dict(num_experts=4, top_k=2, bias_update_rate=0.01))
  bias = lambda s: np.asarray(jax.tree.leaves(s['moe_bias'])[0])
  np.testing.assert_array_equal(bias(state), np.zeros((2, 4)))  # [layers, experts]
  state, _ = train_step(state, _batch())
  moved = bias(state)
  assert set(np.round(moved.ravel() / 0.01).astype(int)) <= {-1, 0, 1} and np.any(moved)
  state, _ = train_step(state, dict(_batch(1), loss_weights=np.full((4, 16), np.nan,
                                                                  np.float32)))
  np.testing.assert_array_equal(bias(state), moved)
  model = families.build(config.model)
  eval_step = jax.jit(step_lib.make_eval_step(families.loss_fn(model, config)))
  assert np.isfinite(eval_step(state_lib.model_variables(state), _batch())['loss_sum'])
