"""One switch for the attention kernel: what 'auto' picks where, the cuDNN call's arguments
(checked through XLA on CPU), and the errors for what a kernel cannot do."""


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



def test_auto_picks_splash_on_tpu_gpu_on_gpu_and_xla_where_they_cannot_run():
  assert kernels.resolve('auto', on='tpu', lengths=(1024, 1024))[0] == 'splash'
  assert kernels.resolve('auto', on='gpu', dtype=jnp.bfloat16)[0] == 'gpu'
  assert kernels.resolve('auto', on='cpu')[0] == 'xla'
  assert kernels.resolve('auto', has_bias=True, on='cpu')[0] == 'xla'
  name, why = kernels.resolve('auto', has_bias=True, on='tpu')
  assert name == 'flash_bias' and 'position bias computed in' in why
  assert kernels.resolve('auto', on='gpu', dtype=jnp.float32)[0] == 'xla'
  assert kernels.resolve('auto', on='tpu', lengths=(100, 100))[0] == 'xla'
  with kernels.target('tpu'):  # AOT compiles for a TPU slice trace as TPU
    assert kernels.resolve('auto', lengths=(128, 128))[0] == 'splash'


def test_kernels_that_cannot_run_say_which_field_and_what_to_use():
  with pytest.raises(ValueError, match=r"kernel='gpu' needs a GPU, this is cpu; use 'auto'"):
    kernels.resolve('gpu', on='cpu')
  with pytest.raises(ValueError, match="kernel='splash' takes no additive position bias"):
    kernels.resolve('splash', has_bias=True, on='tpu')
  with pytest.raises(ValueError, match=r"multiples of 128, got \(100, 100\)"):
    kernels.resolve('splash', lengths=(100, 100), on='tpu')


@pytest.mark.parametrize('overrides, message', [
    (['model.attention.kernel=splash'], r'data.seq_len=64 to be a multiple of 128'),
    (['model.attention.kernel=splash', 'data.seq_len=128', 'model.max_length=128',
      'model.attention.block_q=96'], r'model.attention.block_q=96 must be a multiple of 128'),
])
def test_config_rejects_a_splash_setup_it_cannot_run(overrides, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    helpers.load(helpers.config_file('gpt_shakespeare'), overrides)


@pytest.mark.parametrize('causal, window', [(True, 0), (False, 0), (True, 5)])
def test_the_cudnn_call_means_the_reference_attention(causal, window):
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(2, 16, 4, 8)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(2, 16, 2, 8)), jnp.float32) for _ in range(2))
  ids = jnp.asarray([[1] * 9 + [2] * 7, [1] * 12 + [0] * 4], jnp.int32)
  mask = mask_lib.Mask(ids, ids, causal=causal, window=window)
  real = np.asarray(ids > 0)[..., None, None]
  got = gpu.attention(q, k, v, mask, scale=0.3, implementation='xla')  # same call, XLA
  want = reference.dot_product_attention(q, k, v, mask.dense(), scale=0.3)
  np.testing.assert_allclose(got * real, want * real, atol=1e-5)


@pytest.mark.parametrize('kind', ['t5', 'alibi'])
def test_the_cudnn_call_with_a_position_bias_means_the_reference_forward_and_backward(kind):
  # on a GPU, auto gives T5 and ALiBi models cuDNN with the dense bias as an input
  rng = np.random.default_rng(2)
  q = jnp.asarray(rng.normal(size=(2, 16, 4, 8)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(2, 16, 2, 8)), jnp.float32) for _ in range(2))
  ids = jnp.asarray([[1] * 9 + [2] * 7, [1] * 12 + [0] * 4], jnp.int32)
  positions = jnp.asarray([list(range(9)) + list(range(7)), list(range(16))], jnp.int32)
  params = (jnp.asarray(rng.normal(size=(32, 4)), jnp.float32) if kind == 't5'
            else jnp.asarray(bias_lib.alibi_slopes(4)))
  mask = mask_lib.Mask(ids, ids, causal=kind == 'alibi')
  real = np.asarray(ids > 0)[..., None, None]

  def loss(attend):
    def value(q, k, v, params):
      bias = bias_lib.PositionBias(positions, positions, params, kind=kind,
                                   bidirectional=kind == 't5').dense()
      return jnp.sum(jnp.sin(attend(q, k, v, bias)) * real)
    return value
  cudnn = lambda q, k, v, bias: gpu.attention(q, k, v, mask, bias, 0.3, implementation='xla')
  xla = lambda q, k, v, bias: reference.dot_product_attention(q, k, v, mask.dense(), bias, 0.3)
  got = jax.grad(loss(cudnn), (0, 1, 2, 3))(q, k, v, params)
  want = jax.grad(loss(xla), (0, 1, 2, 3))(q, k, v, params)
  np.testing.assert_allclose(loss(cudnn)(q, k, v, params), loss(xla)(q, k, v, params),
                             rtol=1e-6)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, atol=1e-5)


def test_padding_queries_get_every_key_under_cudnn_and_change_no_gradient():
  # a decoder's padding queries against an unpadded encoder attend no key, which cuDNN's
  # backward turns into NaN (docs/contracts.md, Known problems); cuDNN gets them every key
  rng = np.random.default_rng(3)
  q = jnp.asarray(rng.normal(size=(2, 6, 4, 8)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(2, 10, 2, 8)), jnp.float32) for _ in range(2))
  q_ids = jnp.asarray([[1] * 4 + [0] * 2, [1] * 3 + [2] * 3], jnp.int32)
  kv_ids = jnp.asarray([[1] * 10, [1] * 5 + [2] * 5], jnp.int32)
  mask = mask_lib.Mask(q_ids, kv_ids)
  segments, keys = mask.dense(), np.asarray(gpu.keys_of(mask))
  assert not segments[0, 0, 4:].any()  # the raw mask: two queries without a key
  assert keys.any(-1).all()
  real = np.asarray(q_ids > 0)
  np.testing.assert_array_equal(keys[:, 0][real], np.asarray(segments)[:, 0][real])

  def loss(attend):
    return lambda q, k, v: jnp.sum(jnp.sin(attend(q, k, v)) * real[..., None, None])
  cudnn = lambda q, k, v: gpu.attention(q, k, v, mask, scale=0.3, implementation='xla')
  xla = lambda q, k, v: reference.dot_product_attention(q, k, v, segments, scale=0.3)
  np.testing.assert_allclose(cudnn(q, k, v), reference.dot_product_attention(
      q, k, v, keys, scale=0.3), atol=1e-5)  # the call takes those keys
  got = jax.grad(loss(cudnn), (0, 1, 2))(q, k, v)
  want = jax.grad(loss(xla), (0, 1, 2))(q, k, v)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, atol=1e-5)


def test_the_decoder_on_xla_and_a_dense_mask_still_work():
  q = jnp.ones((1, 4, 2, 8))
  out = kernels.attention(q, q, q, mask_lib.causal_mask(4), kernel='xla')
  assert out.shape == (1, 4, 2, 8)
  with pytest.raises(ValueError, match='needs a zoo.kernels.mask.Mask'):
    with kernels.target('tpu'):
      jax.eval_shape(lambda x: kernels.attention(x, x, x, None, kernel='splash'),
                     jnp.ones((1, 128, 2, 8)))


@pytest.mark.parametrize('kernel', ['splash', 'auto'])
def test_a_cache_mask_runs_xla_whatever_kernel_is_configured(kernel):
  # decoding: 1 query at slot 5 of a 7-slot cache (no multiple of 128 for splash), window 3
  rng = np.random.default_rng(1)
  q = jnp.asarray(rng.normal(size=(2, 1, 4, 8)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(2, 7, 2, 8)), jnp.float32) for _ in range(2))
  kv_ids = jnp.asarray([[0, 1, 1, 1, 1, 1, 1], [1] * 7], jnp.int32)
  mask = mask_lib.Mask(jnp.ones((2, 1), jnp.int32), kv_ids, causal=True, window=3, q_start=5,
                       kv_cache=True)
  with kernels.target('tpu'):
    got = kernels.attention(q, k, v, mask, kernel=kernel)
  # by hand: slots 3, 4, 5 (the window up to the query), all real in both rows
  allowed = np.zeros((2, 1, 1, 7), bool)
  allowed[..., 3:6] = True
  np.testing.assert_array_equal(mask.dense(), allowed)
  want = reference.dot_product_attention(q, k, v, jnp.asarray(allowed))
  np.testing.assert_allclose(got, want, atol=1e-6)
