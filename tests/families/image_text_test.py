"""The image_text family (SigLIP): the published counts and FLOPs, both objectives' losses
against float64 numpy over the real pairs, retrieval accuracy by hand, one line for each bad
field or pair, the digits' captions read as pairs, and a sharded step (the sigmoid loss round
the ring of the batch axes) equal to one device's."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from tests import helpers
from zoo import config as config_lib
from zoo import counting
from zoo import families
from zoo.data import digits
from zoo.errors import ConfigError
from zoo.families import image_text
from zoo.train import runtime

# transformers' SiglipModel at each release config: (whole, vision tower, text tower)
PUBLISHED = {'siglip_base16': (203_155_970, 92_884_224, 110_271_744),
             'siglip_so400m14': (877_960_498, 428_225_600, 449_734_896)}


@pytest.mark.parametrize('name', sorted(PUBLISHED))
def test_the_published_siglips_count_their_parameters_tower_by_tower(name):
  params = jax.tree.map(lambda x: x.value, counting.abstract_params(
      helpers.load(helpers.config_file(name, None))), is_leaf=lambda x: hasattr(x, 'value'))
  got = (counting.param_count(params), counting.param_count(params['vision']),
         counting.param_count(params['text']))
  assert got == PUBLISHED[name]


def test_two_towers_count_flops_per_image_token_with_the_text_tower_at_its_share():
  config = helpers.load(helpers.config_file('siglip_base16', None))
  S, T, D, layers = 196, 64, 768, 12  # 14 x 14 patches, captions of 64 tokens
  vision = 92_884_224 - 196 * D  # the position table is added
  text = 110_271_744 - 32_000 * D - 64 * D  # the token and position tables are gathers
  attention = 12 * 12 * 64 * (S * S + T * T) * layers / S
  assert counting.flops_per_token(config) == round(6 * (vision + text * T / S)) + round(
      attention)


def _reference(image, text, t, b, real, objective):
  """SigLIP's and CLIP's losses in float64 numpy over the real rows only."""
  image, text = image[real], text[real]
  logits = np.exp(t) * image @ text.T
  if objective == 'sigmoid_contrastive':
    signs = 2 * np.eye(len(image)) - 1
    return np.sum(np.log1p(np.exp(-signs * (logits + b)))) / len(image)
  log_rows = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  log_cols = logits - np.log(np.exp(logits).sum(0, keepdims=True))
  return -0.5 * (np.mean(np.diag(log_rows)) + np.mean(np.diag(log_cols)))


@pytest.mark.parametrize('objective', ['sigmoid_contrastive', 'softmax_contrastive'])
def test_the_loss_is_the_objectives_over_the_real_pairs(objective):
  config = helpers.smoke('siglip_digits', f'data.objective={objective}')
  model = families.build(config.model)
  batch = {k: jnp.asarray(v) for k, v in helpers.family_batch(config, 7).items()}
  variables = model.init(jax.random.PRNGKey(0), batch)
  got = families.get(config.model).loss(model, config, variables, batch)
  out = jax.tree.map(lambda x: np.asarray(x, np.float64), model.apply(variables, batch))
  np.testing.assert_allclose(np.linalg.norm(out['image_embeds'], axis=1), 1.0, rtol=1e-6)
  real = np.asarray(batch['segment_ids'][:, 0]) > 0  # the first three rows are padding
  want = _reference(out['image_embeds'], out['text_embeds'], out['log_temperature'],
                    out['bias'], real, objective)
  np.testing.assert_allclose(got.total, want, rtol=1e-5)
  assert float(got.weight_sum) == 4 and float(got.metrics['temperature']) == pytest.approx(10)


def test_retrieval_counts_an_image_whose_best_text_has_its_captions_ids():
  unit = np.eye(3, dtype=np.float32)
  outputs = {'image_embeds': jnp.asarray(unit[[0, 1, 2, 0]]),
             'text_embeds': jnp.asarray(np.stack([unit[1], unit[2], unit[2] * 0.5, unit[0]]))}
  ids = jnp.asarray([[5, 1], [6, 1], [7, 1], [5, 1]])
  real = jnp.asarray([1.0, 0.0, 1.0, 1.0])
  # row 0 -> text 3 (same ids: right); row 2 -> text 2 (right, the padding text skipped);
  # row 3 -> text 3 (right); row 1 is padding and not counted
  assert float(image_text.retrieved(outputs, ids, real)) == 3.0
  real = jnp.ones(4)
  # with every row real, image 1's best is text 0 (ids 5 != 6) and image 2's text 1 (6 != 7)
  assert float(image_text.retrieved(outputs, ids, real)) == 2.0


@pytest.mark.parametrize('overrides,message', [
    (['train.microbatches=2'], r'train.microbatches=2: a contrastive loss pairs every row '
                               r'with every other row of the batch; set train.microbatches=1'),
    (['model.position=rope'], r"model.position='rope' is not built for model.family="
                              r"'image_text'; use one of 'learned'"),
    (['data.task.kind=image_classification'], r"data.task.kind='image_classification' is not "
                                              r"built for model.family='image_text'"),
    (['data.objective=mlm'], r"data.objective='mlm'"),
])
def test_a_bad_image_text_field_is_one_line_naming_it(tmp_path, overrides, message):
  with pytest.raises(ConfigError, match=message):
    config = helpers.smoke('siglip_digits', *overrides)
    runtime.corpus(config, str(tmp_path))


def _pairs(directory, lines):
  (directory / 'images').mkdir(parents=True)
  Image.fromarray(np.full((8, 8), 200, np.uint8)).save(directory / 'images' / 'ok.png')
  for split in ('train', 'eval'):
    (directory / f'{split}.jsonl').write_text(''.join(json.dumps(x) + '\n' for x in lines))
  return str(directory)


@pytest.mark.parametrize('lines,message', [
    ([{'image': 'images/ok.png', 'text': 'a cat'}, {'image': 'images/ok.png'}],
     r"train.jsonl:2: no field 'text' \(the image's caption, a non-empty string\); "
     r"data.task.kind='image_text' reads image, text"),
    ([{'image': 'images/ok.png', 'text': 7}], r"train.jsonl:1: no field 'text'"),
    ([{'text': 'a cat'}], r"train.jsonl:1: no field 'image' .*reads image, text"),
    ([{'image': 'images/gone.png', 'text': 'a cat'}], r'train.jsonl:1: image .*gone.png cannot'),
])
def test_a_pair_that_cannot_be_read_is_one_line_naming_the_file(tmp_path, lines, message):
  config = helpers.smoke('siglip_digits', f'data.task.path={_pairs(tmp_path / "task", lines)}')
  with pytest.raises(ConfigError, match=message):
    runtime.corpus(config, str(tmp_path / 'run'))


def test_the_digits_read_as_pairs_of_pixels_and_their_captions_ids(tmp_path):
  config = helpers.smoke('siglip_digits')
  task = runtime.corpus(config, str(tmp_path))
  first = task.eval[0]
  record = task.records['eval'][0]
  assert record['text'] == digits.caption(record['label'])
  assert task.tokenizer.decode(first['text']) == record['text']
  row = families.get(config.model).task_example('image_text', first, task.tokenizer,
                                                config.data)
  T = config.data.text_len
  assert row['inputs'].shape == (T,) and first['pixels'].shape == (16, 16, 1)
  ids = list(first['text'])[:T - 1] + [task.tokenizer.eos_id]
  assert list(row['inputs'][:len(ids)]) == ids
  assert set(row['inputs'][len(ids):]) <= {task.tokenizer.pad_id}


def test_a_siglip_step_on_a_mesh_gives_one_devices_losses():
  config = helpers.smoke('siglip_digits', 'model.dropout_rate=0.0')
  one = {'data': 1, 'fsdp': 1, 'tensor': 1}
  want = [float(r['loss']) for r in helpers.train_steps(config, one, steps=3)[0]]
  # the ring round data's 4 devices, 2 rows each (data 2 x fsdp 2 x tensor 2 meets XLA:CPU's
  # swapped row blocks: docs/contracts.md, Known problems)
  mesh = {'data': 4, 'fsdp': 1, 'tensor': 2}
  got = [float(r['loss']) for r in helpers.train_steps(config, mesh, steps=3)[0]]
  np.testing.assert_allclose(got, want, rtol=2e-5)


def test_a_rows_text_is_its_caption_for_pairs_and_its_sequence_otherwise():
  # what the learned-table check and an export's model_max_length read
  assert config_lib.text_length(helpers.smoke('siglip_digits').data) == 16  # seq_len is 16 too
  pairs = helpers.smoke('siglip_digits', 'model.max_length=12')
  assert (config_lib.text_length(pairs.data), pairs.data.seq_len) == (12, 16)
  assert config_lib.text_length(helpers.smoke('gpt_shakespeare').data) == 64
