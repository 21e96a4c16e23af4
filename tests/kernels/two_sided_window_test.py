"""A bidirectional stack's window (T5Gemma's encoder): query i sees keys j with
|i - j| <= window, against a numpy mask built by hand; in the reference, splash (values and
gradients, with padding) and the cuDNN call (its XLA implementation); the kernels that take
causal windows only refuse it in one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo import kernels
from zoo.kernels import bias as bias_lib
from zoo.kernels import gpu
from zoo.kernels import mask as mask_lib
from zoo.kernels import reference

L, W = 256, 40


def _inputs():
  keys = jax.random.split(jax.random.PRNGKey(3), 4)
  q = jax.random.normal(keys[0], (2, L, 4, 32))
  k, v = (jax.random.normal(key, (2, L, 2, 32)) for key in keys[1:3])
  segments = jnp.asarray([[1] * L, [1] * 200 + [0] * 56], jnp.int32)  # row 2 padded
  return q, k, v, segments, jax.random.normal(keys[3], q.shape)


def test_the_window_reaches_both_ways_and_includes_its_ends():
  segments = np.array([[1] * 8 + [2] * 4 + [0] * 2])
  got = np.asarray(mask_lib.Mask(segments, segments, window=2).dense())[0, 0]
  i, j = np.arange(14)[:, None], np.arange(14)[None, :]
  want = (np.abs(i - j) <= 2) & (segments[0][:, None] == segments[0][None, :]) & (
      segments[0][None, :] > 0)
  np.testing.assert_array_equal(got, want)
  assert got[5, 3] and got[5, 7] and not got[5, 8] and not got[5, 2]
  # a causal mask's window of 2 is the query and one key back
  causal = np.asarray(mask_lib.Mask(segments, segments, causal=True, window=2).dense())[0, 0]
  assert causal[5, 4] and causal[5, 5] and not causal[5, 3] and not causal[5, 6]
  # ring attention's slot layout gives the same mask
  slots = jnp.broadcast_to(jnp.arange(14), (1, 14))
  np.testing.assert_array_equal(
      mask_lib.Mask(segments, segments, window=2, slots=slots).dense()[0, 0], want)


def test_splash_and_the_cudnn_call_take_it_as_the_reference_forward_and_backward():
  q, k, v, segments, weights = _inputs()
  mask = mask_lib.Mask(segments, segments, window=W)
  want = lambda q, k, v: reference.dot_product_attention(q, k, v, mask.dense())
  runs = {'splash': lambda q, k, v: kernels.attention(q, k, v, mask, kernel='splash',
                                                      block_sizes=(128, 128)),
          'cudnn (xla implementation)': lambda q, k, v: gpu.attention(
              q, k, v, mask, scale=32 ** -0.5, implementation='xla')}
  real = (segments > 0)[..., None, None]
  loss = lambda fn: lambda *x: jnp.sum(jnp.where(real, fn(*x), 0) * weights)
  wants = jax.grad(loss(want), (0, 1, 2))(q, k, v)
  for name, run in runs.items():
    np.testing.assert_allclose(np.where(real, jax.jit(run)(q, k, v), 0),
                               np.where(real, want(q, k, v), 0), atol=2e-5, err_msg=name)
    for g, w in zip(jax.jit(jax.grad(loss(run), (0, 1, 2)))(q, k, v), wants):
      np.testing.assert_allclose(g, w, atol=2e-5, err_msg=name)


def test_kernels_with_causal_windows_only_refuse_it():
  q, k, v, segments, _ = _inputs()
  mask = mask_lib.Mask(segments, segments, window=W)
  bias = bias_lib.PositionBias(segments, segments, jnp.zeros((32, 4)))
  with pytest.raises(ValueError, match="'flash_bias' takes causal windows only"):
    kernels.attention(q, k, v, mask, bias=bias, kernel='flash_bias')
  with pytest.raises(config_lib.ConfigError, match=r"window=16 with model.position='t5_bias':"
                                                   r" the encoder's window is two-sided"):
    helpers.smoke('t5_base', 'model.attention.window=16')
