"""DeepSeek Sparse Attention in the latent attention layer (zoo/models/indexer.py,
zoo/models/mla.py): with the top-k past every key it is dense MLA; cached decoding (the
indexer's keys cached beside the latent) equals the full pass; the indexer trains by its KL
alone, the warm-up trains nothing else; bad configs and stage orders are one line."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo.kernels import mask as mask_lib
from zoo.models import mla
from zoo.train import runtime
from zoo.train import state as state_lib

MLA = dict(kv_lora_rank=16, q_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
           v_head_dim=6)
INDEX = dict(index_heads=3, index_head_dim=8, index_block=4)
L = 10


def _config(**index):
  config = helpers.tiny_config(position='rope')
  config.model.mla.update({**MLA, **index})
  config.model.kernel_init_std = 0.3  # logits far from uniform
  config.data.seq_len = 16
  return helpers.validate(config)


def _inputs():
  x = jax.random.normal(jax.random.PRNGKey(1), (2, L, 32))
  positions = jnp.broadcast_to(jnp.arange(L), (2, L))
  ids = jnp.ones((2, L), jnp.int32)
  return x, positions, mask_lib.Mask(ids, ids, causal=True)


def _params(m):
  x, positions, mask = _inputs()
  return nn.meta.unbox(mla.LatentAttention(m).init(jax.random.PRNGKey(0), x, mask=mask,
                                                   q_positions_BL=positions)['params'])


def _apply(m, params, x=None):
  x_, positions, mask = _inputs()
  return mla.LatentAttention(m).apply({'params': params}, x_ if x is None else x, mask=mask,
                                      q_positions_BL=positions, mutable=['indexer'])


def test_with_the_top_k_past_every_key_or_in_the_warmup_the_layer_is_dense_mla():
  m = _config(**INDEX, index_top_k=16).model
  params = _params(m)
  dense_params = {k: v for k, v in params.items() if k != 'indexer'}
  x, positions, mask = _inputs()
  dense = mla.LatentAttention(_config().model).apply({'params': dense_params}, x, mask=mask,
                                                     q_positions_BL=positions)
  for model in (m, _config(**INDEX, index_top_k=3, index_stage='warmup').model):
    out, sown = _apply(model, params)
    np.testing.assert_allclose(out, dense, atol=2e-5, rtol=0)
    assert float(sown['indexer']['queries'][0]) == 2 * L
  sparse_out, _ = _apply(_config(**INDEX, index_top_k=3).model, params)
  assert float(jnp.max(jnp.abs(sparse_out - dense))) > 1e-2  # 3 keys of up to 10 differ


def test_cached_decoding_keeps_the_indexers_keys_and_equals_the_full_pass():
  m = _config(**INDEX, index_top_k=4).model
  params = _params(m)
  module = mla.LatentAttention(m)
  x, positions, _ = _inputs()
  full, _ = _apply(m, params)
  slots = jnp.ones((2, 12), jnp.int32).at[:, 10:].set(0)  # a cache of 12 slots, 10 written
  cache, outs = {}, []
  for start, stop in ((0, 5), (5, 6), (6, 7), (7, 10)):  # a prefill, tokens and a chunk
    ids = jnp.ones((2, stop - start), jnp.int32)
    mask = mask_lib.Mask(ids, slots, causal=True, kv_cache=True)
    out, variables = module.apply({'params': params, **cache}, x[:, start:stop], mask=mask,
                                  q_positions_BL=positions[:, start:stop], mutable=['cache'])
    cache = {'cache': variables['cache']}
    outs.append(out)
  np.testing.assert_allclose(jnp.concatenate(outs, 1), full, atol=2e-5, rtol=0)
  assert jax.tree.map(jnp.shape, cache['cache'])['cached_index_key'] == (2, 12, 8)


def test_the_indexer_trains_by_its_kl_alone_and_the_warmup_trains_nothing_else():
  m = _config(**INDEX, index_top_k=4).model
  params = _params(m)
  out_grads = jax.grad(lambda p: jnp.sum(_apply(m, p)[0] ** 2))(params)
  kl_grads = jax.grad(lambda p: _apply(m, p)[1]['indexer']['kl'][0])(params)
  norm = lambda tree: float(sum(jnp.sum(jnp.abs(g)) for g in jax.tree.leaves(tree)))
  assert norm(out_grads['indexer']) == 0 and norm(kl_grads['indexer']) > 0
  assert norm({k: v for k, v in kl_grads.items() if k != 'indexer'}) == 0
  assert norm({k: v for k, v in out_grads.items() if k != 'indexer'}) > 0
  # the warm-up's optimizer moves the indexer's parameters alone; the sparse stage all
  warmup = _config(**INDEX, index_top_k=4, index_stage='warmup')
  trains = state_lib.trainable(warmup, {'attention': params})
  flat = jax.tree_util.tree_flatten_with_path(trains)[0]
  assert flat and all(t == ('indexer' in str(path)) for path, t in flat)
  assert state_lib.trainable(_config(**INDEX, index_top_k=4), params) is None


@pytest.mark.parametrize('changes, message', [
    ({'kv_lora_rank': 0, **INDEX}, r'model.mla.index_heads > 0 needs multi-head latent '
                                   r'attention: set model.mla.kv_lora_rank > 0'),
    ({'q_lora_rank': 0, **INDEX}, r'needs model.mla.q_lora_rank > 0: the indexer reads the '
                                  r'query latent'),
    ({**INDEX, 'index_top_k': 32}, r'model.mla.index_top_k=32 exceeds data.seq_len=16'),
    ({**INDEX, 'index_stage': 'dense'}, r"model.mla.index_stage='dense' must be one of"),
    ({**INDEX, 'index_head_dim': 2}, r'index_head_dim=2 must be at least qk_rope_head_dim=4'),
    ({**INDEX, 'index_top_k': 4, 'mesh': {'context': 2}},
     r'model.mla.index_heads > 0 with mesh.context=2, mesh.stage=1: DeepSeek Sparse Attention '
     r'is built for whole sequences'),
])
def test_bad_sparse_attention_configs_are_one_line(changes, message):
  config = helpers.tiny_config(position='rope')
  changes = dict(changes)
  config.mesh.update(changes.pop('mesh', {}))
  config.model.mla.update({**MLA, **changes})
  config.data.seq_len = 16
  with pytest.raises(config_lib.ConfigError, match=message):
    helpers.validate(config)


def test_the_sparse_stage_refuses_weights_whose_indexer_was_never_warmed_up():
  new = ['layers/block_0/attention/indexer/key/kernel']  # what init_params lacks
  with pytest.raises(config_lib.ConfigError, match=r"model.mla.index_stage='sparse' starts "
                                                   r"from train.init_params='/w/v3_1', which "
                                                   r'holds no indexer .* run the dense '
                                                   r'warm-up first'):
    runtime.check_index_stage(_config(**INDEX, index_top_k=4), '/w/v3_1', new)
  runtime.check_index_stage(_config(**INDEX, index_top_k=4, index_stage='warmup'), '/w/v3_1',
                            new)  # the warm-up starts there
  runtime.check_index_stage(_config(**INDEX, index_top_k=4), '/w/warm', [])
