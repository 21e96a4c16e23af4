"""Rotary embeddings: the rotation itself, and each scaling against transformers' rotary code
(tests/fixtures/rope.json, made once with transformers 5.25 by tests/fixtures/make_rope.py)."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo import config as config_lib
from zoo.models import dims
from zoo.models import rope


def test_rope_preserves_norms_and_scores_depend_only_on_relative_position():
  K = 16
  q = jax.random.normal(jax.random.PRNGKey(0), (1, 1, 1, K))
  k = jax.random.normal(jax.random.PRNGKey(1), (1, 1, 1, K))
  rotate = lambda x, p: rope.apply(x, jnp.array([[p]]), 10_000.0)
  for p in (0, 3, 1000):
    np.testing.assert_allclose(jnp.linalg.norm(rotate(q, p)), jnp.linalg.norm(q), rtol=1e-5)
  score = lambda i, j: float(jnp.sum(rotate(q, i) * rotate(k, j)))
  np.testing.assert_allclose(score(5, 2), score(105, 102), rtol=1e-4)
  np.testing.assert_allclose(score(0, 0), float(jnp.sum(q * k)), rtol=1e-5)
  assert abs(score(5, 2) - score(5, 3)) > 1e-3


def test_rope_rotates_the_first_pair_by_the_position_angle():
  x = jnp.zeros((1, 1, 1, 4)).at[..., 0].set(1.0)
  got = rope.apply(x, jnp.array([[2]]), 10_000.0)
  np.testing.assert_allclose(got[0, 0, 0], [np.cos(2), 0, np.sin(2), 0], atol=1e-6)


def test_llama3_rope_scaling_slows_low_frequencies_keeps_high_ones_and_blends_between():
  theta, K, scaling = 10_000.0, 16, ('llama3', 8.0, 1.0, 4.0, 32)
  want = []
  for i in range(K // 2):  # the Llama 3.1 rule, one frequency at a time
    freq = theta ** (-2 * i / K)
    wavelength = 2 * np.pi / freq
    if wavelength < 32 / 4.0:
      want.append(freq)
    elif wavelength > 32 / 1.0:
      want.append(freq / 8.0)
    else:
      smooth = (32 / wavelength - 1.0) / (4.0 - 1.0)
      want.append((1 - smooth) * freq / 8.0 + smooth * freq)
  got, _ = rope.frequencies(K, theta, scaling)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  plain, _ = rope.frequencies(K, theta)
  # wavelengths 6.3 (kept), 19.9 (blended), 62.8 and longer (divided by 8)
  assert got[0] == plain[0] and plain[1] / 8 < got[1] < plain[1]
  np.testing.assert_allclose(got[2:], plain[2:] / 8, rtol=1e-6)


with open(os.path.join(os.path.dirname(__file__), '..', 'fixtures', 'rope', 'rope.json'),
          encoding='utf-8') as _f:
  FIXTURE = json.load(_f)


def _scaling(params):
  """transformers' rope_parameters -> the model config's rope_scaling -> rope's tuple."""
  m = config_lib.base().model
  m.rope_scaling.update(
      type=params['rope_type'], factor=params['factor'],
      original_max_length=params.get('original_max_position_embeddings',
                                     FIXTURE['max_position_embeddings']),
      **{k: params[k] for k in ('low_freq_factor', 'high_freq_factor', 'mscale',
                                'mscale_all_dim', 'beta_fast', 'beta_slow') if k in params})
  return dims.rope_scaling(m)


@pytest.mark.parametrize('name', sorted(FIXTURE['cases']))
def test_each_scaling_rotates_as_transformers_does_in_prefill_and_cached_decoding(name):
  case = FIXTURE['cases'][name]
  scaling = _scaling(case['params'])
  for call in case['calls']:  # a prefill of 24, then one position at a time to 40
    positions = jnp.asarray([call['positions']])
    freq, factor = rope.frequencies(FIXTURE['head_dim'], FIXTURE['theta'], scaling, positions)
    angles = np.asarray(positions[0, :, None] * freq[None], np.float64)
    np.testing.assert_allclose(np.cos(angles) * factor, call['cos'], atol=2e-6)
    np.testing.assert_allclose(np.sin(angles) * factor, call['sin'], atol=2e-6)


def test_dynamic_scaling_leaves_positions_inside_the_trained_length_alone():
  short = jnp.arange(16)[None]
  plain, _ = rope.frequencies(16, 10_000.0, (), short)
  dynamic, _ = rope.frequencies(16, 10_000.0, ('dynamic', 4.0, 16), short)
  np.testing.assert_allclose(dynamic, plain, rtol=1e-6)
  longer, _ = rope.frequencies(16, 10_000.0, ('dynamic', 4.0, 16), jnp.arange(40)[None])
  assert np.all(np.asarray(longer)[1:] < np.asarray(plain)[1:])  # a larger base: slower
