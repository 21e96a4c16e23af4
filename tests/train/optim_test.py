import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from tests import helpers
from zoo import families
from zoo.train import optim


def _params(**overrides):
  config = helpers.tiny_config(**overrides)
  model = families.build(config.model)
  return nn.unbox(model.init(jax.random.PRNGKey(0), {'inputs': jnp.zeros((1, 8), jnp.int32)}))[
      'params']


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


def test_weight_decay_moves_kernels_but_not_norm_scales():
  config = helpers.tiny_config()
  config.optim.weight_decay, config.optim.clip_norm = 0.5, 0.0
  params = _params()
  tx = optim.make(config.optim, 10)
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
