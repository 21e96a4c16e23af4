"""Splash attention (Pallas, interpret mode on CPU) against the XLA reference: forward and
gradients for every mask kind and head layout, bare and inside a sharded decoder."""


import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import kernels
from zoo import families
from zoo import sharding
from zoo.kernels import mask as mask_lib

B, L, K = 2, 256, 32
HEADS = {'mha': (4, 4), 'gqa': (4, 2), 'mqa': (4, 1)}


def _segments(kind):
  if kind == 'packed':  # three documents and trailing padding
    row = np.concatenate([np.full(90, 1), np.full(100, 2), np.full(40, 3), np.zeros(26)])
  elif kind == 'padded':
    row = np.concatenate([np.ones(200), np.zeros(56)])
  else:
    row = np.ones(L)
  return jnp.asarray(np.stack([row, np.roll(row, 0)]), jnp.int32)


MASKS = {'causal': ('full', True, 0), 'bidirectional_padded': ('padded', False, 0),
         'sliding_window': ('full', True, 48), 'packed_causal': ('packed', True, 0)}


def _compare(mask, heads, groups, block_sizes=(128, 128)):
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(B, L, heads, K)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(B, L, groups, K)), jnp.float32) for _ in range(2))
  real = np.asarray(mask.q_segment_ids > 0)[..., None, None]  # padding rows differ by design
  run = lambda kernel: lambda *x: kernels.attention(*x, mask, kernel=kernel,
                                                    block_sizes=block_sizes)
  loss = lambda kernel: lambda *x: jnp.sum(jnp.sin(run(kernel)(*x)) * real)
  np.testing.assert_allclose(jax.jit(run('splash'))(q, k, v) * real,
                             jax.jit(run('xla'))(q, k, v) * real, atol=2e-5)
  for got, want in zip(jax.jit(jax.grad(loss('splash'), (0, 1, 2)))(q, k, v),
                       jax.jit(jax.grad(loss('xla'), (0, 1, 2)))(q, k, v)):
    np.testing.assert_allclose(got, want, atol=5e-5)


@pytest.mark.parametrize('name', sorted(MASKS))
def test_every_mask_kind_matches_the_reference_forward_and_backward(name):
  segments, causal, window = MASKS[name]
  ids = _segments(segments)
  _compare(mask_lib.Mask(ids, ids, causal=causal, window=window), *HEADS['gqa'])


@pytest.mark.parametrize('layout', ['mha', 'mqa'])
def test_mha_and_mqa_layouts_match_the_reference(layout):
  ids = _segments('packed')
  _compare(mask_lib.Mask(ids, ids, causal=True), *HEADS[layout], block_sizes=(128, 256))


def test_a_sharded_decoder_gives_the_reference_logits_and_gradients():
  config = helpers.load(helpers.config_file('llama3_8b'),
                           ['data.seq_len=128', 'model.max_length=128', 'mesh.data=2',
                            'mesh.fsdp=2', 'mesh.tensor=2'])
  rng = np.random.default_rng(1)
  segment_ids = np.repeat([[1] * 80 + [2] * 40 + [0] * 8], 8, axis=0)
  batch = {'inputs': jnp.asarray(rng.integers(0, 512, (8, 128)), jnp.int32),
           'segment_ids': jnp.asarray(segment_ids, jnp.int32),
           'positions': jnp.asarray(np.concatenate([np.arange(80), np.arange(40),
                                                    np.zeros(8)])[None].repeat(8, 0), jnp.int32)}
  real = (batch['segment_ids'] > 0)[..., None]
  mesh = sharding.make_mesh(config.mesh)
  results = {}
  for kernel in ('xla', 'splash'):
    with config.unlocked():
      config.model.attention.kernel = kernel
    model = families.build(config.model)
    params = nn.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), batch)['params'])

    def loss(p, model=model):
      return jnp.sum(jnp.sin(model.apply({'params': p}, batch)) * real)
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.rules(config)):
      results[kernel] = jax.jit(jax.value_and_grad(loss))(params)
  assert float(results['splash'][0]) == pytest.approx(float(results['xla'][0]), rel=1e-5)
  for got, want in zip(jax.tree.leaves(results['splash'][1]), jax.tree.leaves(results['xla'][1])):
    # float32 noise of a 500k-term sum: relative to each gradient's scale
    np.testing.assert_allclose(got, want, atol=1e-4 * float(jnp.max(jnp.abs(want))))


def test_block_sizes_must_be_lane_multiples_dividing_the_length():
  ids = _segments('full')
  with pytest.raises(ValueError, match=r'block_q=96 / block_kv=128 must be multiples of 128'):
    _compare(mask_lib.Mask(ids, ids, causal=True), 4, 2, block_sizes=(96, 128))
