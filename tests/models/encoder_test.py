"""The encoder (BERT family): bidirectional attention, padding and segment isolation, heads."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import families
from zoo import presets

ATOL = 1e-5


@pytest.fixture(scope='module')
def encoder():
  config = helpers.tiny_config()
  presets.bert(config)
  config.model.update(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=0,
                      mlp_dim=64, max_length=64, dtype='float32')
  model = families.build(config.model)
  params = nn.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), {'inputs': jnp.zeros((1, 16), jnp.int32)}))
  return jax.jit(lambda batch: model.apply(params, batch)), params


def _batch(ids, segment_ids=None, token_type_ids=None):
  return helpers.batch(ids, segment_ids=segment_ids, token_type_ids=token_type_ids)


def test_attention_is_bidirectional(encoder):
  apply, _ = encoder
  ids = helpers.random_ids(16)
  changed = ids.copy()
  changed[-1] = (ids[-1] + 1) % 64
  a, b = apply(_batch(ids))['logits'], apply(_batch(changed))['logits']
  assert not np.allclose(a[0, 0], b[0, 0], atol=1e-4)  # the first token sees the last


def test_padding_never_changes_real_tokens(encoder):
  apply, _ = encoder
  ids = helpers.random_ids(16, seed=1)
  segment_ids = [1] * 10 + [0] * 6
  noisy = ids.copy()
  noisy[10:] = helpers.random_ids(6, seed=2)
  a, b = apply(_batch(ids, segment_ids)), apply(_batch(noisy, segment_ids))
  np.testing.assert_allclose(a['logits'][0, :10], b['logits'][0, :10], atol=ATOL)
  np.testing.assert_allclose(a['nsp_logits'], b['nsp_logits'], atol=ATOL)


def test_token_types_change_the_output(encoder):
  apply, _ = encoder
  ids = helpers.random_ids(16, seed=3)
  a = apply(_batch(ids, token_type_ids=[0] * 16))['logits']
  b = apply(_batch(ids, token_type_ids=[0] * 8 + [1] * 8))['logits']
  assert not np.allclose(a, b, atol=1e-4)


def test_bert_layout_has_every_pretraining_part(encoder):
  _, params = encoder
  p = params['params']
  assert {'token_embed', 'embeddings', 'layers', 'mlm_transform', 'mlm_norm', 'mlm_bias',
          'pooler', 'nsp'} <= set(p)
  assert {'position_embed', 'type_embed', 'norm'} == set(p['embeddings'])
  assert p['embeddings']['type_embed']['embedding'].shape == (2, 32)
  assert 'logits' not in p  # the MLM output is tied to the word embeddings
  assert 'final_norm' not in p  # post-norm: every block ends in its own LayerNorm
