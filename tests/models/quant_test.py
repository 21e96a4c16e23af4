"""Quantized training (model.quant): the int8 and fp8 matmuls against numpy references of
their scaling, the compiled step's int8 dots, and quantized models training on meshes and
the pipeline as on one device."""

import functools
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from tests import helpers
from zoo.models import quant

def _positive_absmax(a, axis):
  """Each channel's largest magnitude made positive: it scales to +127.5 exactly, which
  int8 saturates to 127 however the division rounds (-127.5 goes to -127 or -128)."""
  top = np.expand_dims(np.argmax(np.abs(a), axis=axis), axis)
  np.put_along_axis(a, top, np.abs(np.take_along_axis(a, top, axis)), axis)
  return a


RNG = np.random.default_rng(0)
X = _positive_absmax(RNG.normal(size=(8, 256)).astype(np.float32), 1)
W = _positive_absmax(RNG.normal(size=(256, 16)).astype(np.float32), 0)


def _np_quantized(x, w, bound, cast, x_axis=1, w_axis=0):
  """absmax scaling per row of x and per column of w (over `axis`, the contracted one),
  values cast, products summed exactly (float64), scales applied after."""
  sx = np.abs(x).max(axis=x_axis, keepdims=True) / np.float32(bound)
  sw = np.abs(w).max(axis=w_axis, keepdims=True) / np.float32(bound)
  qx, qw = cast(x / sx), cast(w / sw)
  return (qx.astype(np.float64) @ qw.astype(np.float64)) * sx * sw


def _int8(v):
  return np.clip(np.round(v), -128, 127)


def _fp8(v):
  return v.astype(ml_dtypes.float8_e4m3fn)


@pytest.mark.parametrize('mode,bound,cast', [('int8', 127.5, _int8), ('fp8', 448.0, _fp8)])
def test_a_quantized_matmul_is_the_numpy_per_channel_product(mode, bound, cast):
  got = np.asarray(quant.matmul(jnp.asarray(X), jnp.asarray(W), quant.Recipe(mode)),
                   np.float64)
  want = _np_quantized(X, W, bound, cast)
  exact = X.astype(np.float64) @ W
  scale = np.abs(exact).max()
  np.testing.assert_allclose(got / scale, want / scale, atol=1e-6)
  assert np.abs(got - exact).max() / scale > 1e-3  # it is not the float product


def test_a_tile_scales_each_block_of_the_contracted_axis_apart():
  x = X.copy()
  x[:, 3] = np.abs(x[:, 3]) * 100  # an outlier in the first 128 columns
  x = np.concatenate([_positive_absmax(x[:, t:t + 128], 1) for t in (0, 128)], axis=1)
  w = np.concatenate([_positive_absmax(W[t:t + 128].copy(), 0) for t in (0, 128)])
  got = np.asarray(quant.matmul(jnp.asarray(x), jnp.asarray(w), quant.Recipe('int8', 128)),
                   np.float64)
  tiles = [_np_quantized(x[:, t:t + 128], w[t:t + 128], 127.5, _int8) for t in (0, 128)]
  np.testing.assert_allclose(got, sum(tiles), rtol=1e-5, atol=1e-4)
  channel = np.asarray(quant.matmul(jnp.asarray(x), jnp.asarray(w), quant.Recipe('int8')))
  assert np.abs(got - channel).max() > 1e-3 * np.abs(got).max()  # the tiles are not one


def test_the_compiled_step_multiplies_int8_forward_and_backward():
  def loss(x, w):
    return jnp.sum(quant.matmul(x, w, quant.Recipe('int8')) ** 2)

  hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(X, W).compile().as_text()
  int8_dots = [l for l in hlo.splitlines() if re.search(r'= s32\[[^\]]*\][^ ]* dot\(', l)]
  assert len(int8_dots) == 3, int8_dots  # y = x w, dy w^T, x^T dy
  grads = jax.grad(loss, argnums=(0, 1))(X, W)
  float_grads = jax.grad(lambda x, w: jnp.sum((x @ w) ** 2), argnums=(0, 1))(X, W)
  for g, f in zip(grads, float_grads):
    assert np.abs(g - f).max() / np.abs(f).max() < 0.05


def test_the_expert_matmuls_are_quantized_on_both_dispatch_paths():
  x = _positive_absmax(RNG.normal(size=(12, 64)).astype(np.float32), 1)
  w = np.stack([_positive_absmax(RNG.normal(size=(64, 8)).astype(np.float32), 0)
                for _ in range(3)])
  sizes = np.array([5, 4, 3], np.int32)
  # dropless: Qwix's ragged dot scales each output column once across the experts
  ragged = quant.ragged_dot(quant.Recipe('int8'))(jnp.asarray(x), jnp.asarray(w),
                                                   jnp.asarray(sizes))
  sw = np.abs(w).max(axis=(0, 1)) / np.float32(127.5)
  rows = np.split(np.arange(12), np.cumsum(sizes)[:-1])
  sx = np.abs(x).max(axis=1, keepdims=True) / np.float32(127.5)
  qx, qw = _int8(x / sx), _int8(w / sw)
  want = np.concatenate([(qx[r].astype(np.float64) @ qw[e]) * sx[r] * sw
                         for e, r in enumerate(rows)])
  np.testing.assert_allclose(ragged, want, rtol=1e-5, atol=1e-4)
  # capacity: a batched dot, each expert's weight scaled on its own
  batched = quant.expert_matmul(jnp.asarray(x.reshape(3, 4, 64)), jnp.asarray(w),
                                quant.Recipe('int8'))
  want = np.stack([_np_quantized(x[4 * e:4 * e + 4], w[e], 127.5, _int8) for e in range(3)])
  np.testing.assert_allclose(batched, want, rtol=1e-5, atol=1e-4)


def _moe_config(mode):
  # every layer a mixture (a pipeline stages only those), the balance loss over the batch
  # (a context mesh splits sequences)
  return helpers.smoke('deepseek_v2_lite', 'train.batch_size=8', 'data.seq_len=16',
                       'model.remat=full', 'model.moe.first_dense=0',
                       "model.moe.balance_scope='batch'", f'model.quant.mode={mode}')


@functools.cache
def _one_device(mode):
  """(losses, final params) of 3 steps on one device."""
  rows, params, _ = helpers.train_steps(_moe_config(mode), {}, 3)
  return [r['loss'] for r in rows], params


def test_a_quantized_model_trains_within_a_percent_of_float_and_not_equal_to_it():
  losses = {}
  for mode in ('none', 'int8', 'fp8'):
    losses[mode], params = _one_device(mode)
    assert {x.dtype for x in jax.tree.leaves(params)} == {np.dtype('float32')}  # kept float
  for mode in ('int8', 'fp8'):
    np.testing.assert_allclose(losses[mode], losses['none'], rtol=0.01)
    assert losses[mode] != losses['none']


@pytest.mark.parametrize('mesh', [{'fsdp': 2, 'tensor': 2, 'expert': 2},
                                  {'stage': 2, 'context': 2, 'tensor': 2}])
def test_a_quantized_model_on_a_mesh_gives_the_one_device_losses(mesh):
  sharded = [r['loss'] for r in helpers.train_steps(_moe_config('int8'), mesh, 3)[0]]
  np.testing.assert_allclose(sharded, _one_device('int8')[0], rtol=1e-4)
