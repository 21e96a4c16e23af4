"""T5: relative position buckets, encode/decode, and masks across both stacks."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import families
from zoo import presets
from zoo.kernels import bias as bias_lib

ATOL = 1e-5


def test_relative_position_buckets_by_hand():
  bucket = lambda rel, bidirectional: int(bias_lib.relative_position_bucket(
      jnp.array(rel), bidirectional, 32, 128))
  # bidirectional: 16 buckets per direction, 8 exact; keys after the query add 16
  assert [bucket(r, True) for r in (0, -1, -7, 1, 7)] == [0, 1, 7, 17, 23]
  # log buckets: 8 + floor(log(n / 8) / log(128 / 8) * 8)
  assert bucket(-20, True) == 8 + int(np.log(20 / 8) / np.log(16) * 8) == 10
  assert bucket(-127, True) == 15 and bucket(-5000, True) == 15 and bucket(5000, True) == 31
  # unidirectional: 32 buckets, 16 exact, only keys at or before the query are told apart
  assert [bucket(r, False) for r in (0, -1, -15, 3, 100)] == [0, 1, 15, 0, 0]
  assert bucket(-20, False) == 16 + int(np.log(20 / 16) / np.log(8) * 16) == 17
  assert bucket(-5000, False) == 31


@pytest.fixture(scope='module', params=['1.0', '1.1'])
def t5(request):
  config = helpers.tiny_config()
  presets.t5(config, version=request.param)
  config.model.update(vocab_size=64, d_model=32, num_encoder_layers=2, num_decoder_layers=2,
                      num_heads=4, head_dim=8, mlp_dim=64, dtype='float32', dropout_rate=0.0)
  model = families.build(config.model)
  batch = {'encoder_inputs': jnp.zeros((1, 12), jnp.int32),
           'decoder_inputs': jnp.zeros((1, 8), jnp.int32)}
  params = nn.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), batch))
  return model, params


def _batch(enc, dec, enc_seg=None, dec_seg=None, enc_pos=None, dec_pos=None):
  batch = {'encoder_inputs': jnp.asarray(enc)[None], 'decoder_inputs': jnp.asarray(dec)[None]}
  for key, value in (('encoder_segment_ids', enc_seg), ('decoder_segment_ids', dec_seg),
                     ('encoder_positions', enc_pos), ('decoder_positions', dec_pos)):
    if value is not None:
      batch[key] = jnp.asarray(value)[None]
  return batch


def test_encode_then_decode_equals_the_full_call(t5):
  model, params = t5
  batch = _batch(helpers.random_ids(12), helpers.random_ids(8, seed=1))
  encoded = model.apply(params, batch, method=model.encode)
  logits = model.apply(params, encoded, batch, method=model.decode)
  np.testing.assert_allclose(logits, model.apply(params, batch), atol=ATOL)
  assert logits.shape == (1, 8, 64) and logits.dtype == jnp.float32


def test_decoder_is_causal_and_encoder_is_bidirectional(t5):
  model, params = t5
  enc, dec = helpers.random_ids(12, seed=2), helpers.random_ids(8, seed=3)
  base = model.apply(params, _batch(enc, dec))
  dec2 = dec.copy()
  dec2[-1] = (dec[-1] + 1) % 64
  np.testing.assert_allclose(model.apply(params, _batch(enc, dec2))[0, :-1], base[0, :-1],
                             atol=ATOL)
  enc2 = enc.copy()
  enc2[-1] = (enc[-1] + 1) % 64  # every decoder position reads the whole encoder
  assert not np.allclose(model.apply(params, _batch(enc2, dec))[0, 0], base[0, 0], atol=1e-4)


def test_packed_examples_match_each_example_alone(t5):
  model, params = t5
  enc_a, enc_b = helpers.random_ids(5, seed=4), helpers.random_ids(7, seed=5)
  dec_a, dec_b = helpers.random_ids(3, seed=6), helpers.random_ids(5, seed=7)
  packed = model.apply(params, _batch(
      np.concatenate([enc_a, enc_b]), np.concatenate([dec_a, dec_b]),
      [1] * 5 + [2] * 7, [1] * 3 + [2] * 5,
      list(range(5)) + list(range(7)), list(range(3)) + list(range(5))))
  alone = model.apply(params, _batch(
      np.concatenate([enc_b, np.zeros(5, np.int32)]), np.concatenate([dec_b, np.zeros(3, np.int32)]),
      [1] * 7 + [0] * 5, [1] * 5 + [0] * 3))
  np.testing.assert_allclose(packed[0, 3:], alone[0, :5], atol=ATOL)


def test_stacks_have_their_own_relative_bias_and_v1_0_ties_the_head(t5):
  model, params = t5
  p = params['params']
  assert p['encoder']['relative_bias']['rel_embedding'].shape == (32, 4)
  assert p['decoder']['relative_bias']['rel_embedding'].shape == (32, 4)
  assert 'cross_attention' in p['decoder']['layers'] and 'cross_attention' not in p['encoder'][
      'layers']
  assert ('logits' in p) == (not model.config.tie_embeddings)
  leaf_names = {path[-1].key for path, _ in jax.tree_util.tree_flatten_with_path(p)[0]}
  assert 'bias' not in leaf_names  # T5 has no biases anywhere
