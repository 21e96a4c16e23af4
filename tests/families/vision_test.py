"""The vision family: the published ViT counts, its loss by hand, one line for each bad
field, image tasks read as files (scikit-learn's digits among them), and a sharded step
equal to one device's."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from tests import helpers
from zoo import counting
from zoo import families
from zoo.convert import hf
from zoo.data import digits
from zoo.errors import ConfigError
from zoo.train import runtime


@pytest.mark.parametrize('name,want', [('vit_b16', 86_567_656), ('vit_l16', 304_326_632)])
def test_the_published_vits_count_their_parameters(name, want):
  config = helpers.load(helpers.config_file(name, None))
  assert counting.param_count(counting.abstract_params(config)) == want


def test_a_vit_counts_patch_tokens_flops_without_its_added_tables():
  # ViT-B/16 at 224: 197 tokens; its position table (197 x 768) and class token are added
  config = helpers.load(helpers.config_file('vit_b16', None))
  matmul = 86_567_656 - 197 * 768 - 768
  assert counting.flops_per_token(config) == 6 * matmul + 12 * 12 * 768 * 197


def test_the_loss_is_the_label_heads_cross_entropy_over_the_real_rows():
  config = helpers.smoke('vit_digits')
  model = families.build(config.model)
  batch = {k: jnp.asarray(v) for k, v in helpers.family_batch(config, 5).items()}
  variables = model.init(jax.random.PRNGKey(0), batch)
  got = families.get(config.model).loss(model, config, variables, batch).total
  logits = np.asarray(model.apply(variables, batch)['label_logits'], np.float64)
  real = np.asarray(batch['segment_ids'][:, 0]) > 0  # the first three rows are padding
  picked = logits[np.arange(5), np.asarray(batch['labels'])]
  want = np.mean((np.log(np.exp(logits).sum(-1)) - picked)[real])
  np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize('overrides,message', [
    (['data.seq_len=20'], r'data.seq_len=20: a 16 x 16 image is 17 tokens .*; set '
                          r'data.seq_len=17'),
    (['model.vision.patch_size=32'], r'model.vision.image_size=16 is smaller than one patch '
                                     r'of model.vision.patch_size=32; use a multiple'),
    (['model.vision.channels=2'], r'model.vision.channels=2, data.image_channels=2: images '
                                  r'are read grey \(1\) or RGB \(3\)'),
    (['model.vision.pool=cls'], r"model.vision.position='learned', pool='cls': .* pooling "
                                r"one of \('token', 'map', 'gap'\)"),
    (['data.task.processor=clip'], r"data.task.processor='clip' is not one of 'siglip'"),
])
def test_a_bad_vision_field_is_one_line_naming_it(tmp_path, overrides, message):
  with pytest.raises(ConfigError, match=message):
    config = helpers.smoke('vit_digits', *overrides)
    runtime.corpus(config, str(tmp_path))


def _task(directory, lines):
  os.makedirs(directory / 'images', exist_ok=True)
  Image.fromarray(np.full((8, 8), 200, np.uint8)).save(directory / 'images' / 'ok.png')
  (directory / 'images' / 'broken.png').write_bytes(b'not an image')
  for split in ('train', 'eval'):
    (directory / f'{split}.jsonl').write_text(''.join(json.dumps(x) + '\n' for x in lines))
  return str(directory)


@pytest.mark.parametrize('lines,message', [
    ([{'image': 'images/ok.png', 'label': 1}, {'image': 'images/broken.png', 'label': 0}],
     r'train.jsonl:2: image .*broken.png cannot be read .*; give a PNG, JPEG'),
    ([{'image': 'images/ok.png', 'label': 1}, {'image': 'images/gone.png', 'label': 0}],
     r'train.jsonl:2: image .*gone.png cannot be read'),
    ([{'image': 'images/ok.png', 'label': 1}, {'label': 0}], r"train.jsonl:2: no field 'image'"),
    ([{'image': 'images/ok.png', 'label': 'one'}], r"train.jsonl:1: label 'one' is not a class"),
])
def test_an_image_task_that_cannot_be_read_is_one_line_naming_the_file(tmp_path, lines,
                                                                       message):
  config = helpers.smoke('vit_digits', f'data.task.path={_task(tmp_path / "task", lines)}')
  with pytest.raises(ConfigError, match=message):
    runtime.corpus(config, str(tmp_path / 'run'))


def test_an_image_task_reads_its_files_as_the_processor_makes_pixels(tmp_path):
  lines = [{'image': 'images/ok.png', 'label': 1}, {'image': 'images/ok.png', 'label': 0}]
  config = helpers.smoke('vit_digits', f'data.task.path={_task(tmp_path / "task", lines)}',
                         'model.num_labels=0')  # the task's classes
  task = runtime.corpus(config, str(tmp_path / 'run'))
  assert task.tokenizer is None and task.num_labels == 2 and len(task.train) == 2
  first = task.train[0]
  # grey 200 rescaled and normalised with ViT's mean and std (0.5): 200 / 255 * 2 - 1
  np.testing.assert_allclose(first['pixels'], np.full((16, 16, 1), 200 / 255 * 2 - 1),
                             rtol=1e-6)
  assert first['label'] == 1


def test_the_digits_are_written_once_as_image_files_with_a_held_out_quarter(tmp_path):
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  directory = digits.write(str(tmp_path), 0.25, 0)
  rows = {split: [json.loads(line) for line in open(os.path.join(directory, f'{split}.jsonl'))]
          for split in ('train', 'eval')}
  assert (len(rows['train']), len(rows['eval'])) == (1348, 449)
  names = [r['image'] for split in rows.values() for r in split]
  assert len(set(names)) == 1797
  source = datasets.load_digits()
  first = rows['eval'][0]
  index = int(first['image'][len('images/'):-len('.png')])
  grey = np.asarray(Image.open(os.path.join(directory, first['image'])))
  np.testing.assert_array_equal(grey, np.round(source.images[index] * 255 / 16))
  assert first['label'] == source.target[index]
  stamp = os.path.getmtime(os.path.join(directory, 'train.jsonl'))
  assert digits.write(str(tmp_path), 0.25, 0) == directory  # the same split: kept
  assert os.path.getmtime(os.path.join(directory, 'train.jsonl')) == stamp


def test_a_vit_step_on_a_mesh_gives_one_devices_losses():
  config = helpers.smoke('vit_digits', 'model.dropout_rate=0.0')
  one = {'data': 1, 'fsdp': 1, 'tensor': 1}
  want = [float(r['loss']) for r in helpers.train_steps(config, one, steps=3)[0]]
  mesh = {'data': 2, 'fsdp': 2, 'tensor': 2}
  got = [float(r['loss']) for r in helpers.train_steps(config, mesh, steps=3)[0]]
  np.testing.assert_allclose(got, want, rtol=2e-5)
  assert want[-1] < want[0]


def test_a_vit_run_has_no_hugging_face_layout_yet_and_says_so(tmp_path):
  with pytest.raises(hf.ConvertError, match=r"model.family='vision' \(vit\) has no Hugging "
                                            'Face layout in the zoo yet'):
    hf.save(helpers.smoke('vit_digits'), {}, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()
