"""Gemma 3 with its images through zoo.convert.hf, against the committed fixture
(tests/fixtures/hf/gemma3_mm: a tiny Gemma3ForConditionalGeneration, two rows of text
around two digit images each, and transformers' float32 logits; make_fixtures.py also
checks that transformers loads the export with the same logits)."""

import json
import os
import shutil

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import REPO
from zoo import families
from zoo.convert import hf
from zoo.data import images
from zoo.errors import ConfigError

FIXTURE = os.path.join(REPO, 'tests', 'fixtures', 'hf', 'gemma3_mm')


@pytest.fixture(scope='module')
def imported():
  return hf.load(FIXTURE)


def _pixels():
  """[2 rows, 2 images, 56, 56, 3]: the fixture's images as the zoo makes them (gemma3)."""
  made = images.PROCESSORS['gemma3']
  made = type(made)(**{**made.__dict__, 'height': 56, 'width': 56})
  return np.stack([images.pixels(images.decode(os.path.join(FIXTURE, 'images', f'{i}.png')),
                                 made) for i in range(4)]).reshape(2, 2, 56, 56, 3)


def test_the_zoo_makes_gemma3s_pixels_from_the_same_images():
  ref = np.load(os.path.join(FIXTURE, 'reference.npz'))
  want = ref['pixel_values'].transpose(0, 2, 3, 1).reshape(2, 2, 56, 56, 3)
  np.testing.assert_allclose(_pixels(), want, atol=1e-6, rtol=0)


def test_logits_with_images_equal_transformers(imported):
  config, params = imported
  m = config.model
  assert (m.multimodal.tokens_per_image, m.multimodal.image_token_id, m.multimodal.num_layers,
          m.vision.pool) == (4, 380, 2, 'none')
  ref = np.load(os.path.join(FIXTURE, 'reference.npz'))
  batch = {'inputs': jnp.asarray(ref['input_ids']), 'pixels': jnp.asarray(_pixels())}
  logits = jax.jit(families.build(m).apply)({'params': params}, batch)
  np.testing.assert_allclose(logits, ref['logits'], atol=1e-4, rtol=0)
  # the images matter: without the bidirectional blocks, or with other pixels, they differ
  other = jax.jit(families.build(m).apply)({'params': params},
                                           {**batch, 'pixels': batch['pixels'][:, ::-1]})
  assert np.max(np.abs(other - ref['logits'])) > 1e-2


def test_load_save_load_gives_identical_params_with_the_tower(imported, tmp_path):
  config, params = imported
  hf.save(config, params, str(tmp_path))
  with open(tmp_path / 'config.json', encoding='utf-8') as f:
    written = json.load(f)
  assert written['architectures'] == ['Gemma3ForConditionalGeneration']
  assert (written['mm_tokens_per_image'], written['image_token_index']) == (4, 380)
  assert written['vision_config']['vision_use_head'] is False
  again_config, again = hf.load(str(tmp_path))
  assert again_config.model.to_dict() == config.model.to_dict()
  chex.assert_trees_all_equal(again, params)
  assert 'vision' in params and 'tower' in params['vision']


def test_a_checkpoint_whose_images_the_zoo_cannot_pool_is_one_line(tmp_path):
  path = tmp_path / 'gemma3_mm'
  shutil.copytree(FIXTURE, path)
  with open(path / 'config.json', encoding='utf-8') as f:
    source = json.load(f)
  source['mm_tokens_per_image'] = 3
  with open(path / 'config.json', 'w', encoding='utf-8') as f:
    json.dump(source, f)
  with pytest.raises(ConfigError, match=r'model.multimodal.tokens_per_image=3: an image of 4 x '
                                        r'4 patches averages to a square grid whose side '
                                        r'divides 4; use one of \[1, 4, 16\]'):
    hf.load(str(path))
