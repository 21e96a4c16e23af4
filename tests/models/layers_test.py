import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo.models import layers


def _x(shape=(2, 3, 8), seed=0):
  return jax.random.normal(jax.random.PRNGKey(seed), shape) * 3 + 1


def test_layernorm_matches_float64_reference():
  x = _x()
  norm = layers.Norm('layernorm', eps=1e-5)
  params = norm.init(jax.random.PRNGKey(0), x)
  scale = np.linspace(0.5, 1.5, 8)
  bias = np.linspace(-1, 1, 8)
  params = {'params': {'scale': jnp.asarray(scale, jnp.float32),
                       'bias': jnp.asarray(bias, jnp.float32)}}
  x64 = np.asarray(x, np.float64)
  want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(norm.apply(params, x), want * scale + bias, atol=1e-5)


def test_rmsnorm_matches_float64_reference_and_has_no_bias():
  x = _x()
  norm = layers.Norm('rmsnorm', eps=1e-6)
  params = norm.init(jax.random.PRNGKey(0), x)
  assert set(params['params']) == {'scale'}
  x64 = np.asarray(x, np.float64)
  want = x64 / np.sqrt(np.mean(x64 ** 2, -1, keepdims=True) + 1e-6)
  np.testing.assert_allclose(norm.apply(params, x), want, atol=1e-5)


def _mlp_reference(x, params, activation):
  x = np.asarray(x, np.float64)
  w = {k: np.asarray(v['kernel'], np.float64) for k, v in params['params'].items()}
  gelu_tanh = lambda h: 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
  silu = lambda h: h / (1 + np.exp(-h))
  if activation == 'swiglu':
    h = silu(x @ w['wi_0']) * (x @ w['wi_1'])
  elif activation == 'geglu':
    h = gelu_tanh(x @ w['wi_0']) * (x @ w['wi_1'])
  elif activation == 'relu':
    h = np.maximum(x @ w['wi'], 0)
  elif activation == 'gelu_tanh':
    h = gelu_tanh(x @ w['wi'])
  else:
    from math import erf  # pylint: disable=g-import-not-at-top
    h = x @ w['wi']
    h = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
  return h @ w['wo']


@pytest.mark.parametrize('activation', ['relu', 'gelu', 'gelu_tanh', 'swiglu', 'geglu'])
def test_mlp_matches_float64_reference(activation):
  x = _x()
  mlp = layers.MLP(16, activation)
  params = mlp.init(jax.random.PRNGKey(1), x)
  params = jax.tree.map(lambda p: p.unbox() if hasattr(p, 'unbox') else p, params,
                        is_leaf=lambda p: hasattr(p, 'unbox'))
  np.testing.assert_allclose(mlp.apply(params, x), _mlp_reference(x, params, activation),
                             rtol=1e-4, atol=1e-4)


def test_dense_general_contracts_trailing_dims_with_named_axes():
  x = _x((2, 3, 4, 5))
  dense = layers.DenseGeneral(7, ('heads', 'head_dim', 'embed'), num_in=2, use_bias=True)
  variables = dense.init(jax.random.PRNGKey(0), x)
  assert variables['params']['kernel'].names == ('heads', 'head_dim', 'embed')
  kernel = np.asarray(variables['params']['kernel'].value, np.float64)
  want = np.einsum('blhk,hkd->bld', np.asarray(x, np.float64), kernel)
  np.testing.assert_allclose(dense.apply(variables, x), want, atol=1e-4)


def test_sinusoidal_positions_hand_computed():
  got = layers.sinusoidal(jnp.array([[0, 1]]), 4)
  np.testing.assert_allclose(got[0, 0], [0, 0, 1, 1], atol=1e-7)
  np.testing.assert_allclose(got[0, 1], [np.sin(1), np.sin(1e-4), np.cos(1), np.cos(1e-4)],
                             atol=1e-6)
