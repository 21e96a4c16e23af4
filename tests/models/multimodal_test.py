"""Images in a decoder's rows (zoo/models/multimodal.py): the image blocks of the mask by
hand, the image tokens taken in order, an image row and its caption accuracy by hand, one
line for each bad field, and a sharded train step equal to one device's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import counting
from zoo import families
from zoo import run as run_lib
from zoo.errors import ConfigError
from zoo.families import decoder
from zoo.kernels import mask as mask_lib
from zoo.plan import analytic
from zoo.train import runtime


def test_an_images_tokens_attend_each_other_both_ways_and_text_stays_causal():
  # text, an image of 3 tokens, text, an image of 2 tokens
  image_L = jnp.asarray([[0, 1, 1, 1, 0, 1, 1]], bool)
  blocks = mask_lib.contiguous_blocks(image_L)
  np.testing.assert_array_equal(blocks, [[0, 1, 1, 1, 0, 2, 2]])
  ones = jnp.ones((1, 7), jnp.int32)
  got = np.asarray(mask_lib.Mask(ones, ones, causal=True, q_block_ids=blocks,
                                 kv_block_ids=blocks).dense())[0, 0]
  want = np.tril(np.ones((7, 7), bool))
  want[1:4, 1:4] = True  # the first image's tokens see each other
  want[5:7, 5:7] = True  # the second's, but not the first image's later tokens from it
  np.testing.assert_array_equal(got, want)
  windowed = np.asarray(mask_lib.Mask(ones, ones, causal=True, window=2, q_block_ids=blocks,
                                      kv_block_ids=blocks).dense())[0, 0]
  # Gemma 3's local layers: the window (keys after query - 2) over causal-or-block
  distance = np.arange(7)[:, None] - np.arange(7)[None, :]
  np.testing.assert_array_equal(windowed, want & (distance < 2))


def _config(*overrides):
  return helpers.smoke('gemma3_digits', *overrides)


def test_the_image_tokens_take_the_images_tokens_in_order():
  config = _config()
  m = config.model
  model = families.build(m)
  T, I = m.multimodal.tokens_per_image, 2
  ids = np.full((1, 12), 7, np.int32)
  ids[0, 1:1 + T] = ids[0, 6:6 + T] = m.multimodal.image_token_id
  pixels = jax.random.normal(jax.random.key(1), (1, I, 16, 16, 1))
  batch = {'inputs': jnp.asarray(ids), 'pixels': pixels}
  variables = model.init(jax.random.key(0), batch)
  swapped = {'inputs': batch['inputs'], 'pixels': pixels[:, ::-1]}
  hidden = model.apply(variables, batch, head=False)
  again = model.apply(variables, swapped, head=False)
  # the text before any image is the same; from the first image on, the order shows
  np.testing.assert_allclose(hidden[0, 0], again[0, 0], rtol=1e-6)
  assert np.max(np.abs(hidden[0, 1:] - again[0, 1:])) > 1e-3


def test_an_image_row_is_bos_the_images_tokens_the_caption_and_eos():
  config = _config('data.seq_len=12')
  d = config.data

  class Tokenizer:
    bos_id, eos_id = 2, 3

  row = decoder.task_example('image_text', {'pixels': np.zeros((16, 16, 1)), 'text': [40, 41]},
                             Tokenizer, d)
  image = d.image_token_id
  np.testing.assert_array_equal(row['inputs'], [2, image, image, image, image, 40, 41,
                                                0, 0, 0, 0, 0])
  np.testing.assert_array_equal(row['targets'][:7], [image, image, image, image, 40, 41, 3])
  np.testing.assert_array_equal(row['loss_weights'], [0, 0, 0, 0, 1, 1, 1] + [0] * 5)
  np.testing.assert_array_equal(row['segment_ids'], [1] * 7 + [0] * 5)
  assert row['pixels'].shape == (1, 16, 16, 1)


def test_caption_accuracy_counts_rows_whose_every_caption_token_is_the_argmax():
  logits = np.zeros((3, 4, 5), np.float32)
  targets = np.asarray([[1, 2, 3, 0], [1, 2, 3, 0], [4, 4, 0, 0]])
  weights = np.asarray([[0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]], np.float32)
  for b, l in [(0, 1), (0, 2), (1, 1)]:  # row 1 gets its second caption token wrong
    logits[b, l, targets[b, l]] = 5.0
  logits[0, 0, 0] = logits[1, 2, 0] = 5.0
  got = decoder._captions_right(jnp.asarray(logits), {  # pylint: disable=protected-access
      'targets': jnp.asarray(targets), 'loss_weights': jnp.asarray(weights)})
  assert (float(got['caption_accuracy']), float(got['caption_accuracy_count'])) == (1.0, 2.0)


@pytest.mark.parametrize('overrides,message', [
    (['model.multimodal.tokens_per_image=2'], r'model.multimodal.tokens_per_image=2: an image '
                                              r'of 4 x 4 patches averages to a square grid'),
    (['model.multimodal.image_token_id=512'], r'model.multimodal.image_token_id=512 is not an '
                                              r'id of the vocabulary'),
    (['model.attention.kernel=splash', 'data.seq_len=128'],
     r"model.attention.kernel='splash', mesh.context=1: an image's tokens attend each other "
     r'both ways'),
    (['model.multimodal.tokens_per_image=0'], r"data.task.kind='image_text' puts an image in "
                                              r'each row, which a text decoder cannot read'),
])
def test_a_bad_multimodal_field_is_one_line_naming_it(tmp_path, overrides, message):
  with pytest.raises(ConfigError, match=message):
    runtime.corpus(_config(*overrides), str(tmp_path))


def test_a_multimodal_step_on_a_mesh_gives_one_devices_losses():
  config = _config('model.dropout_rate=0.0', 'model.dtype=float32')
  one = {'data': 1, 'fsdp': 1, 'tensor': 1}
  want = [float(r['loss']) for r in helpers.train_steps(config, one, steps=3)[0]]
  mesh = {'data': 4, 'fsdp': 1, 'tensor': 2}
  got = [float(r['loss']) for r in helpers.train_steps(config, mesh, steps=3)[0]]
  np.testing.assert_allclose(got, want, rtol=2e-5)


def test_the_tower_counts_flops_per_image_apart_from_the_decoders_tokens():
  config = helpers.load(helpers.config_file('gemma3_digits', None))
  boxed = counting.abstract_params(config)
  text = counting.flops_per_token(helpers.load(helpers.config_file('gemma3_digits', None),
                                               ['data.task.kind=', 'data.task.path=',
                                                'model.multimodal.tokens_per_image=0']))
  # the tower: 2 blocks of d_model 64 (4 x 64 x 64 + 4 x 64 attention, 2 x 64 x 128 + 128 +
  # 64 MLP, two norms), patches of 16 pixels, 16 patches; 4 tokens of the 64 -> 128 projection
  block = (4 * 64 * 64 + 4 * 64) + (2 * 64 * 128 + 128 + 64) + 4 * 64
  tower = 16 * 64 + 64 + 2 * block + 2 * 64  # patch matmul, the blocks, the final norm
  per_row = 6 * (tower * 16 + 64 * 128 * 4) + 12 * 64 * 16 * 16 * 2
  assert counting.param_count(jax.tree.map(lambda x: x.value, boxed['vision']['tower'],
                                           is_leaf=lambda x: hasattr(x, 'value'))) == (
                                               tower + 16 * 64)
  assert counting.flops_per_token(config, boxed) == text + round(per_row / 16)
  # plan mode names the tower apart: its parameters (with the norm and projection) and the
  # FLOPs of one image
  plan = analytic.plan(run_lib.resolve(config), 1)
  projection = 64 + 64 * 128  # the RMSNorm's scale, the projection
  assert plan['vision'] == {'params': tower + 16 * 64 + projection, 'flops_per_image': per_row}
  assert f'image tower: {tower + 16 * 64 + projection:,} of the parameters' in (
      analytic.report(plan))


def test_a_cached_step_given_images_says_it_is_not_built():
  config = _config()
  model = families.build(config.model)
  batch = {'inputs': jnp.zeros((1, 8), jnp.int32), 'pixels': jnp.zeros((1, 1, 16, 16, 1))}
  variables = model.init(jax.random.key(0), batch)
  cached = {**batch, 'kv_segment_ids': jnp.ones((1, 8), jnp.int32),
            'kv_positions': jnp.zeros((1, 8), jnp.int32)}
  with pytest.raises(ValueError, match=r'^image prompts in cached decoding are not built yet'):
    model.apply(variables, cached, mutable=['cache'])
