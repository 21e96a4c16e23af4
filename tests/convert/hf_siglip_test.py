"""SigLIP through zoo.convert.hf against its committed fixture (tests/fixtures/hf/siglip: a
tiny SiglipModel, six digits as images, and transformers' float32 embeddings and logits,
made by make_fixtures.py siglip, which also checks that transformers loads the export)."""

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
from zoo.data import image_task
from zoo.data import images

FIXTURE = os.path.join(REPO, 'tests', 'fixtures', 'hf', 'siglip')


@pytest.fixture(scope='module')
def imported():
  return hf.load(FIXTURE)


def _pixels(config):
  """The fixture's images as the zoo's pipeline makes them (data.task.processor siglip)."""
  made = image_task.processor(config.data)
  return np.stack([images.pixels(images.decode(os.path.join(FIXTURE, 'images', f'{i}.png')),
                                 made) for i in range(6)])


def test_the_zoo_makes_transformers_pixels_from_the_same_images(imported):
  config, _ = imported
  ref = np.load(os.path.join(FIXTURE, 'reference.npz'))
  want_BYXC = ref['pixel_values'].transpose(0, 2, 3, 1)
  np.testing.assert_allclose(_pixels(config), want_BYXC, atol=1e-6, rtol=0)


def test_embeddings_and_logits_equal_transformers(imported):
  config, params = imported
  ref = np.load(os.path.join(FIXTURE, 'reference.npz'))
  assert (config.model.family, config.data.seq_len) == ('image_text', 9)  # 30 px, patches of 8
  batch = {'pixels': jnp.asarray(_pixels(config)), 'inputs': jnp.asarray(ref['input_ids'])}
  out = jax.jit(families.build(config.model).apply)({'params': params}, batch)
  np.testing.assert_allclose(out['image_embeds'], ref['image_embeds'], atol=1e-4, rtol=0)
  np.testing.assert_allclose(out['text_embeds'], ref['text_embeds'], atol=1e-4, rtol=0)
  logits = (jnp.exp(out['log_temperature']) * out['image_embeds'] @ out['text_embeds'].T +
            out['bias'])
  np.testing.assert_allclose(logits, ref['logits_per_image'], atol=1e-4, rtol=0)


def test_load_save_load_gives_identical_params_and_siglips_config(imported, tmp_path):
  config, params = imported
  hf.save(config, params, str(tmp_path))
  with open(tmp_path / 'config.json', encoding='utf-8') as f:
    written = json.load(f)
  with open(os.path.join(FIXTURE, 'config.json'), encoding='utf-8') as f:
    source = json.load(f)
  assert written['architectures'] == ['SiglipModel']
  for tower in ('text_config', 'vision_config'):
    for field, value in written[tower].items():
      if field != 'attention_dropout':
        assert source[tower][field] == value, (tower, field)
  again_config, again = hf.load(str(tmp_path))
  assert again_config.model.to_dict() == config.model.to_dict()
  chex.assert_trees_all_equal(again, params)


def _edited(tmp_path, tower, **changes):
  path = tmp_path / 'siglip'
  shutil.copytree(FIXTURE, path)
  with open(path / 'config.json', encoding='utf-8') as f:
    source = json.load(f)
  source[tower].update(changes)
  with open(path / 'config.json', 'w', encoding='utf-8') as f:
    json.dump(source, f)
  return str(path)


@pytest.mark.parametrize('tower,changes,message', [
    ('vision_config', {'hidden_size': 48}, r'siglip text_config.hidden_size=32 but '
                                           r'vision_config.hidden_size=48: the zoo builds both '
                                           r'towers of one shape'),
    ('vision_config', {'vision_use_head': False}, r'vision_use_head=false: the zoo pools'),
    ('text_config', {'projection_size': 16}, r'projection_size=16: the zoo.s text head keeps'),
])
def test_a_siglip_config_the_zoo_does_not_build_is_one_line(tmp_path, tower, changes, message):
  with pytest.raises(hf.ConvertError, match=message):
    hf.load(_edited(tmp_path, tower, **changes))


def test_a_config_that_omits_fields_takes_transformers_defaults(tmp_path):
  # the hub's siglip-base names only the towers' model types: every field a default
  path = _edited(tmp_path, 'text_config')
  with open(os.path.join(path, 'config.json'), encoding='utf-8') as f:
    source = json.load(f)
  source['text_config'] = {'model_type': 'siglip_text_model'}
  source['vision_config'] = {'model_type': 'siglip_vision_model'}
  config = hf.hf_siglip.config(source, set())
  m = config.model
  assert (m.d_model, m.num_layers, m.vocab_size, m.max_length, m.vision.image_size,
          m.vision.patch_size, config.data.seq_len) == (768, 12, 32000, 64, 224, 16, 196)


def test_a_run_siglip_cannot_hold_says_the_field(imported, tmp_path):
  config, params = imported
  config = config.copy_and_resolve_references()
  config.model.vision.pool = 'gap'
  with pytest.raises(hf.ConvertError, match=r"save: model.vision.pool='gap' has no place in "
                                            r"SiglipModel, which is built with 'map'"):
    hf.save(config, params, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()
