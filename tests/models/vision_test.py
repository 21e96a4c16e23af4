"""The vision tower (zoo/models/vision.py): patches as a strided convolution reads them,
fixed 2D positions by hand, a resized position table, ViT-B/16's published parameter count,
attention pooling against float64 numpy, and every patch seeing every other."""

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from tests import helpers
from zoo.models import vision


def _tower_config(**overrides):
  """The blocks' fields: pre-norm LayerNorm blocks with biases and GELU, as ViT's."""
  m = helpers.tiny_config().model
  m.update(**{'position': 'none', 'norm': 'layernorm', 'activation': 'gelu',
              'use_bias': True, 'num_kv_heads': 4, **overrides})
  return ml_collections.FrozenConfigDict(m)


def test_patch_embedding_is_the_strided_convolution():
  rng = np.random.default_rng(0)
  images = rng.normal(size=(2, 8, 12, 3))
  kernel = rng.normal(size=(4, 4, 3, 5))  # [patch, patch, C, D], a convolution's HWIO
  got = np.asarray(vision.patches(jnp.asarray(images), 4)) @ kernel.reshape(48, 5)
  want = np.zeros((2, 6, 5))
  for i in range(2):
    for j in range(3):
      want[:, i * 3 + j] = np.einsum('buvc,uvcd->bd', images[:, 4 * i:4 * i + 4,
                                                              4 * j:4 * j + 4], kernel)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sincos_positions_by_hand():
  table = np.asarray(vision.sincos_2d(2, 3, 8))  # frequencies 1 and 1 / 10,000
  row, col = 1, 2  # position 1 x 3 + 2
  want = [np.sin(col), np.sin(col / 1e4), np.cos(col), np.cos(col / 1e4),
          np.sin(row), np.sin(row / 1e4), np.cos(row), np.cos(row / 1e4)]
  np.testing.assert_allclose(table[5], want, rtol=1e-6, atol=1e-7)
  assert table.shape == (6, 8)
  with pytest.raises(ValueError, match='divisible by 4'):
    vision.sincos_2d(2, 2, 6)


def test_a_position_table_resizes_to_another_grid():
  table = jnp.asarray(np.random.default_rng(1).normal(size=(16, 6)), jnp.float32)
  assert vision.resize_positions(table, (4, 4)) is table
  constant = jnp.ones((16, 6)) * jnp.arange(6.0)[None]
  np.testing.assert_allclose(vision.resize_positions(constant, (6, 3)),
                             np.ones((18, 6)) * np.arange(6.0)[None], rtol=1e-6)
  # a 2 x 2 grid doubled: an inner cell is 3/4 its nearer old cell and 1/4 the other, along
  # each axis; an edge cell its old one's (rows [0, 4] and [8, 12]: new row 1 is 3/4 the first)
  ramp = jnp.asarray([[0.0], [4.0], [8.0], [12.0]])
  resized = np.asarray(vision.resize_positions(ramp, (4, 4)))[:, 0]
  np.testing.assert_allclose(resized.reshape(4, 4)[1], [2, 3, 5, 6], rtol=1e-6)
  with pytest.raises(ValueError, match='not a square grid'):
    vision.resize_positions(jnp.ones((6, 2)), (2, 2))


def test_vit_b16_has_the_published_parameter_count():
  m = _tower_config(d_model=768, num_layers=12, num_heads=12, num_kv_heads=12, mlp_dim=3072,
                    num_labels=1000)
  tower = vision.VisionTower(m, image_size=224, patch_size=16)
  shapes = jax.eval_shape(tower.init, jax.random.key(0), jnp.zeros((1, 224, 224, 3)))
  count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(flax.linen.unbox(shapes)))
  assert count == 86_567_656  # ViT-B/16 with its 1,000-class head (Dosovitskiy et al.)


def _attention_pool_reference(params, x, heads):
  """SigLIP's MAP head in float64: the probe attends over x, then norm and a residual MLP."""
  f64 = lambda a: np.asarray(a, np.float64)
  att = params['attention']
  project = lambda y, name: np.einsum('bld,dhk->blhk', y, f64(att[name]['kernel'])) + f64(
      att[name]['bias'])
  probe = np.broadcast_to(f64(params['probe']), (x.shape[0], 1, x.shape[2]))
  q, k, v = project(probe, 'query'), project(x, 'key'), project(x, 'value')
  logits = np.einsum('bqhk,bshk->bhqs', q, k) / np.sqrt(q.shape[-1])
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  heads_out = np.einsum('bhqs,bshk->bqhk', weights, v)
  pooled = np.einsum('bqhk,hkd->bqd', heads_out, f64(att['out']['kernel'])) + f64(
      att['out']['bias'])
  mean, var = pooled.mean(-1, keepdims=True), pooled.var(-1, keepdims=True)
  normed = (pooled - mean) / np.sqrt(var + 1e-6) * f64(params['norm']['scale']) + f64(
      params['norm']['bias'])
  mlp = params['mlp']
  hidden = normed @ f64(mlp['wi']['kernel']) + f64(mlp['wi']['bias'])
  hidden = 0.5 * hidden * (1 + np.vectorize(__import__('math').erf)(hidden / np.sqrt(2)))
  return (pooled + hidden @ f64(mlp['wo']['kernel']) + f64(mlp['wo']['bias']))[:, 0]


def test_attention_pooling_equals_float64_numpy():
  m = _tower_config()
  x = jnp.asarray(np.random.default_rng(2).normal(size=(3, 5, m.d_model)), jnp.float32)
  pool = vision.AttentionPool(m)
  params = flax.linen.unbox(pool.init(jax.random.key(1), x))['params']
  np.testing.assert_allclose(pool.apply({'params': params}, x),
                             _attention_pool_reference(params, x, m.num_heads),
                             rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('pool,position', [('token', 'learned'), ('map', 'sincos2d'),
                                           ('gap', 'learned')])
def test_every_patch_sees_every_other_at_any_resolution(pool, position):
  m = _tower_config(num_labels=3)
  tower = vision.VisionTower(m, image_size=16, patch_size=4, position=position, pool=pool)
  images = jnp.asarray(np.random.default_rng(3).normal(size=(2, 16, 16, 3)), jnp.float32)
  variables = tower.init(jax.random.key(0), images)
  out = tower.apply(variables, images)
  tokens = 16 + (pool == 'token')
  assert out['hidden'].shape == (2, tokens, m.d_model) and out['label_logits'].shape == (2, 3)
  if pool == 'gap':
    np.testing.assert_allclose(out['pooled'], out['hidden'].mean(1), rtol=1e-6)
  changed = tower.apply(variables, images.at[:, -4:, -4:].add(1.0))  # the last patch only
  first = tokens - 16  # the first patch's state
  assert not np.allclose(changed['hidden'][:, first], out['hidden'][:, first])
  larger = tower.apply(variables, jnp.zeros((1, 24, 20, 3)))  # 6 x 5 patches
  assert larger['hidden'].shape == (1, 30 + (pool == 'token'), m.d_model)


def test_pixels_past_the_last_whole_patch_are_dropped_as_a_strided_convolution_drops_them():
  tower = vision.VisionTower(_tower_config(), image_size=16, patch_size=4, pool='gap')
  images = jax.random.normal(jax.random.key(1), (1, 19, 17, 3))
  variables = tower.init(jax.random.key(0), images[:, :16, :16])
  np.testing.assert_array_equal(tower.apply(variables, images)['hidden'],
                                tower.apply(variables, images[:, :16, :16])['hidden'])
  with pytest.raises(ValueError, match=r'^images of 3 x 16 pixels are smaller than one patch '
                                       r'of 4; resize them to a multiple of it'):
    tower.init(jax.random.key(0), jnp.zeros((1, 3, 16, 3)))


def test_an_unknown_pooling_names_the_choices():
  tower = vision.VisionTower(_tower_config(), image_size=16, patch_size=4, pool='cls')
  with pytest.raises(ValueError, match=r"pool='cls', position='learned': the tower pools by "
                                       r"one of \('token', 'map', 'gap', 'none'\)"):
    tower.init(jax.random.key(0), jnp.zeros((1, 16, 16, 3)))
