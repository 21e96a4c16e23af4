import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests import helpers
from zoo import families
from zoo import phases
from zoo import optim


def _boxed_params(config):
  model = families.build(config.model)
  return jax.jit(model.init)(jax.random.PRNGKey(0), {'inputs': jnp.zeros((1, 8), jnp.int32)})['params']


def _params(**overrides):
  return nn.unbox(_boxed_params(helpers.tiny_config(**overrides)))


def _flat(tree):
  return {'/'.join(str(getattr(k, 'key', k)) for k in path): leaf
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_decay_mask_spares_norm_scales_and_biases_even_when_scanned():
  params = _params(norm='layernorm', use_bias=True)
  mask = _flat(optim.decay_mask(params))
  assert mask['layers/attention_norm/scale'] is False  # 2-D under scan, still a norm
  assert mask['final_norm/bias'] is False
  assert mask['layers/mlp/wi_0/bias'] is False
  assert mask['layers/mlp/wi_0/kernel'] is True
  assert mask['token_embed/embedding'] is True and mask['logits/kernel'] is True
  decayed = {k for k, v in mask.items() if v}
  assert all(k.endswith(('kernel', 'embedding')) for k in decayed)


def test_decay_mask_spares_a_gated_deltanets_decay_rates_and_norm_gain():
  config = helpers.tiny_config()
  config.model.attention.pattern = 'DG'
  config.model.delta.update(key_heads=2, value_heads=4, key_dim=8, value_dim=8, chunk=8)
  mask = _flat(optim.decay_mask(nn.unbox(_boxed_params(config))))
  delta = {k.split('/delta/')[1]: v for k, v in mask.items() if '/delta/' in k}
  assert {k for k, v in delta.items() if not v} == {'decay_log', 'decay_bias', 'norm_scale'}
  assert delta['query/kernel'] and delta['query_conv'] and delta['out/kernel']


def test_weight_decay_moves_kernels_but_not_norm_scales():
  config = helpers.tiny_config()
  config.optim.weight_decay, config.optim.clip_norm = 0.5, 0.0
  params = _params()
  tx = optim.make(config.optim, optim.schedule(config.optim, 10))
  state = tx.init(params)
  zeros = jax.tree.map(jnp.zeros_like, params)
  for _ in range(3):
    updates, state = tx.update(zeros, state, params)
    params_after = optax.apply_updates(params, updates)
  flat_before, flat_after = _flat(params), _flat(params_after)
  np.testing.assert_array_equal(flat_after['final_norm/scale'], flat_before['final_norm/scale'])
  assert np.all(np.abs(flat_after['logits/kernel']) < np.abs(flat_before['logits/kernel']) + 1e-9)
  assert not np.allclose(flat_after['logits/kernel'], flat_before['logits/kernel'])


def test_schedule_warms_up_linearly_then_decays_to_the_floor():
  config = helpers.tiny_config()
  o = config.optim
  o.learning_rate, o.warmup_steps, o.min_learning_rate_ratio = 1.0, 10, 0.1
  for kind, middle in [('cosine', 0.55), ('linear', 0.55), ('constant', 1.0)]:
    o.schedule = kind
    lr = optim.schedule(o, 110)
    np.testing.assert_allclose([lr(0), lr(5), lr(10)], [0.0, 0.5, 1.0], atol=1e-6)
    np.testing.assert_allclose(lr(60), middle, atol=1e-6)
    np.testing.assert_allclose(lr(110), 1.0 if kind == 'constant' else 0.1, atol=1e-6)


def test_rsqrt_and_wsd_schedules_match_hand_computed_values():
  o = helpers.tiny_config().optim
  o.learning_rate, o.warmup_steps, o.min_learning_rate_ratio = 0.01, 100, 0.0
  o.schedule = 'rsqrt'  # T5: 0.01 = 1/sqrt(10^4) held, then 1/sqrt(step) (here x 100 steps)
  lr = optim.schedule(o, 1000)
  np.testing.assert_allclose([lr(0), lr(100), lr(400), lr(900)],
                             [0.01, 0.01, 0.005, 0.01 / 3], rtol=1e-6)
  o.schedule, o.warmup_steps, o.decay_fraction, o.min_learning_rate_ratio = 'wsd', 10, 0.2, 0.1
  lr = optim.schedule(o, 100)  # warmup 0..10, stable to 80, linear to 0.001 at 100
  np.testing.assert_allclose([lr(5), lr(10), lr(50), lr(80), lr(90), lr(100)],
                             [0.005, 0.01, 0.01, 0.01, 0.0055, 0.001], rtol=1e-6)
  o.schedule, o.min_learning_rate_ratio = 'linear', 0.0  # BERT: warmup, then linear to zero
  lr = optim.schedule(o, 110)
  np.testing.assert_allclose([lr(10), lr(60), lr(110)], [0.01, 0.005, 0.0], atol=1e-9)


def _adafactor_reference(params, grads, stacked, a, lr, momentum_state):
  """One Adafactor step in float64 numpy, each layer's slice of a stacked leaf on its own."""
  updates = {}
  for name, p in params.items():
    slices = range(p.shape[0]) if stacked[name] else [None]
    out = np.zeros_like(p)
    for i in slices:
      at = (lambda x: x[i]) if i is not None else (lambda x: x)
      g, w = at(grads[name]), at(p)
      key = (name, i)
      st = momentum_state.setdefault(key, {'t': 0})
      st['t'] += 1
      beta = 1 - st['t'] ** -a['decay_rate']
      g2 = g ** 2 + a['eps']
      # one layer's slice as a matrix: its largest dim the rows, the rest the columns
      r = int(np.argsort(g.shape, kind='stable')[-1])
      rows, cols = g.shape[r], g.size // g.shape[r]
      if g.ndim >= 2 and min(rows, cols) >= a['min_dim']:
        g2_matrix = np.moveaxis(g2, r, 0).reshape(rows, cols)
        st['R'] = beta * st.get('R', 0) + (1 - beta) * g2_matrix.mean(axis=1)
        st['C'] = beta * st.get('C', 0) + (1 - beta) * g2_matrix.mean(axis=0)
        v_matrix = np.outer(st['R'] / st['R'].mean(), st['C'])
        v_hat = np.moveaxis(v_matrix.reshape(np.moveaxis(g2, r, 0).shape), 0, r)
      else:
        st['V'] = beta * st.get('V', 0) + (1 - beta) * g2
        v_hat = st['V']
      u = g / np.sqrt(v_hat)
      u = u / max(1.0, np.sqrt(np.mean(u ** 2)) / a['clip'])
      u = u * max(np.sqrt(np.mean(w ** 2)), 1e-3)
      if a['momentum']:
        st['m'] = a['momentum'] * st.get('m', 0) + (1 - a['momentum']) * u
        u = st['m']
      if i is None:
        out = -lr * u
      else:
        out[i] = -lr * u
    updates[name] = out
  return updates


@pytest.mark.parametrize('momentum', [0.0, 0.9])
def test_adafactor_first_updates_match_a_float64_reference_per_layer(momentum):
  config = helpers.tiny_config()
  o = config.optim
  o.name, o.schedule, o.warmup_steps, o.learning_rate = 'adafactor', 'constant', 0, 0.01
  o.weight_decay, o.clip_norm = 0.0, 0.0
  o.adafactor.update(min_dim_size_to_factor=8, momentum=momentum)
  params = _params()
  specs = nn.get_partition_spec(_boxed_params(config))
  stacked = optim.stacked_leaves(specs)
  tx = optim.make(o, optim.schedule(o, 10), specs)
  state = tx.init(params)
  flat_stacked = _flat(stacked)
  assert flat_stacked['layers/mlp/wi_0/kernel'] and not flat_stacked['token_embed/embedding']
  # a [2 layers, 32, 64] kernel: statistics per layer over its largest (64) and other dims;
  # the query kernel [2, 32, 4 heads, 8] is read as [32, 4 x 8] per layer
  v_row, v_col = _flat(state[0].v_row), _flat(state[0].v_col)
  assert v_row['layers/mlp/wi_0/kernel'].shape == (2, 64)
  assert v_col['layers/mlp/wi_0/kernel'].shape == (2, 32)
  assert v_row['layers/attention/query/kernel'].shape == (2, 32)
  assert v_col['layers/attention/query/kernel'].shape == (2, 4, 8)
  assert v_row['layers/attention_norm/scale'].shape == (1,)  # one dim per layer: full moment
  a = dict(decay_rate=0.8, eps=1e-30, min_dim=8, clip=1.0, momentum=momentum)
  reference_state = {}
  rng = np.random.default_rng(0)
  for step in range(3):
    grads = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)
    # layer 1's gradients 100x layer 0's: clipping and scales must be per layer
    grads['layers'] = jax.tree.map(lambda g: g * np.array([1.0, 100.0]).reshape(
        (2,) + (1,) * (g.ndim - 1)).astype(np.float32), grads['layers'])
    updates, state = tx.update(grads, state, params)
    want = _adafactor_reference(
        {k: np.asarray(v, np.float64) for k, v in _flat(params).items()},
        {k: np.asarray(v, np.float64) for k, v in _flat(grads).items()},
        flat_stacked, a, 0.01, reference_state)
    got = _flat(updates)
    for name in want:
      np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=1e-9,
                                 err_msg=f'{name} at step {step}')
    params = optax.apply_updates(params, updates)


@pytest.mark.parametrize('name', ['adamw', 'adafactor'])
def test_weight_decay_power_2_takes_lr_squared_of_each_weight(name):
  o = helpers.tiny_config().optim
  o.name, o.schedule, o.warmup_steps, o.clip_norm = name, 'constant', 0, 0.0
  o.learning_rate, o.weight_decay, o.weight_decay_power = 0.1, 1.0, 2
  params = _params()
  tx = optim.make(o, optim.schedule(o, 10))
  state = tx.init(params)
  zeros = jax.tree.map(jnp.zeros_like, params)  # the moments' updates are 0: decay alone
  for _ in range(2):
    updates, state = tx.update(zeros, state, params)
    params = optax.apply_updates(params, updates)
  before, after = _flat(_params()), _flat(params)
  np.testing.assert_allclose(after['logits/kernel'], before['logits/kernel'] * (1 - 0.01) ** 2,
                             rtol=1e-6)
  np.testing.assert_array_equal(after['final_norm/scale'], before['final_norm/scale'])


def test_a_schedule_in_tokens_follows_the_phases_batches():
  config = helpers.tiny_config()  # 4 x 16 tokens a step, 10 steps
  config.train.steps, config.train.phases = 10, '4:2:16'  # 32 tokens a step to step 4
  o = config.optim
  o.learning_rate, o.schedule, o.min_learning_rate_ratio = 1.0, 'linear', 0.1
  o.warmup_steps, o.warmup_tokens, o.decay_tokens = 0, 64.0, 320.0
  lr = optim.schedule(o, 10, phases.resolve(config))
  # tokens before update k+1: 0, 32, 64, 96, 128, 192, 256, 320, 384 (steps 5.. run 64)
  want = [0.0, 0.5, 1.0, 1.0 - 0.9 * 32 / 256, 1.0 - 0.9 * 64 / 256, 1.0 - 0.9 * 128 / 256,
          1.0 - 0.9 * 192 / 256, 0.1, 0.1]
  np.testing.assert_allclose([float(lr(jnp.int32(k))) for k in range(9)], want, rtol=1e-6)
