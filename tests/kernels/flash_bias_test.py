"""The flash_bias kernel (Pallas, interpret mode on CPU) against the XLA reference: T5's
relative bias and ALiBi computed in the kernel's blocks, forward and gradients (queries,
keys, values and T5's bias table), and models that train with it as with xla."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo import kernels
from zoo.kernels import bias as bias_lib
from zoo.kernels import flash_bias
from zoo.kernels import mask as mask_lib

B, L, K = 2, 256, 32


def _rows(kind):
  """(segment ids, positions) [B, L]: one row as `kind`, the other one whole document."""
  if kind == 'packed':  # three documents and trailing padding; positions restart per document
    lengths = (90, 100, 40)
    ids = np.concatenate([np.full(n, i + 1) for i, n in enumerate(lengths)] + [np.zeros(26)])
    positions = np.concatenate([np.arange(n) for n in lengths] + [np.zeros(26)])
  elif kind == 'padded':
    ids = np.concatenate([np.ones(200), np.zeros(56)])
    positions = np.arange(L)
  else:
    ids, positions = np.ones(L), np.arange(L)
  as_batch = lambda row, whole: jnp.asarray(np.stack([row, whole]), jnp.int32)
  return as_batch(ids, np.ones(L)), as_batch(positions, np.arange(L))


CASES = {  # bias kind, rows, causal, window, (heads, kv heads), T5's max distance
    't5_encoder': ('t5', 'padded', False, 0, (4, 4), 128),
    't5_decoder_self_attention': ('t5', 'full', True, 0, (4, 4), 128),
    't5_packed_bidirectional_mqa': ('t5', 'packed', False, 0, (4, 1), 128),
    't5_packed_causal': ('t5', 'packed', True, 0, (4, 2), 128),
    # far blocks whose pairs all share one bucket (the kernel loops over a block's buckets)
    't5_short_distance': ('t5', 'full', False, 0, (4, 4), 16),
    'alibi_gqa': ('alibi', 'packed', True, 0, (4, 2), 128),
    'alibi_gqa_sliding_window': ('alibi', 'full', True, 48, (4, 2), 128),
}


@pytest.mark.parametrize('name', sorted(CASES))
def test_flash_bias_matches_the_reference_forward_and_backward(name):
  kind, rows, causal, window, (heads, groups), max_distance = CASES[name]
  ids, positions = _rows(rows)
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(B, L, heads, K)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(B, L, groups, K)), jnp.float32) for _ in range(2))
  if kind == 't5':
    params = jnp.asarray(rng.normal(size=(32, heads)), jnp.float32)
  else:
    params = jnp.asarray(bias_lib.alibi_slopes(heads))
  mask = mask_lib.Mask(ids, ids, causal=causal, window=window)
  real = np.asarray(ids > 0)[..., None, None]  # padding rows differ by design

  def run(kernel):
    def attend(q, k, v, params):
      bias = bias_lib.PositionBias(positions, positions, params, kind=kind,
                                   bidirectional=not causal, max_distance=max_distance)
      return kernels.attention(q, k, v, mask, bias=bias, kernel=kernel, block_sizes=(128, 128))
    return attend

  loss = lambda kernel: lambda *x: jnp.sum(jnp.sin(run(kernel)(*x)) * real)
  np.testing.assert_allclose(jax.jit(run('flash_bias'))(q, k, v, params) * real,
                             jax.jit(run('xla'))(q, k, v, params) * real, atol=2e-5)
  wrt = (0, 1, 2, 3) if kind == 't5' else (0, 1, 2)  # ALiBi's slopes are constants
  got = jax.jit(jax.grad(loss('flash_bias'), wrt))(q, k, v, params)
  want = jax.jit(jax.grad(loss('xla'), wrt))(q, k, v, params)
  for name, g, w in zip(('query', 'key', 'value'), got, want):
    np.testing.assert_allclose(g, w, atol=5e-5, err_msg=name)
  if kind == 't5':  # each entry sums ~10^4 pairs' gradients: relative to the table's scale
    np.testing.assert_allclose(got[3], want[3], atol=5e-5 * float(jnp.max(jnp.abs(want[3]))))


def _train(config, kernel, mesh_sizes):
  config = config.copy_and_resolve_references()
  config.model.attention.kernel = kernel
  rows, params, initial = helpers.train_steps(config, mesh_sizes, steps=5)
  return [float(r['loss']) for r in rows], params, jax.device_get(initial['params'])


@pytest.mark.parametrize('name, overrides, mesh', [
    ('t5_base', [], {'data': 2, 'fsdp': 1, 'tensor': 2, 'expert': 1}),
    ('gpt2_small', ['model.position=alibi'], {'data': 1, 'fsdp': 1, 'tensor': 1, 'expert': 1}),
    # umT5: a table in every layer, each layer's slice of the scanned tables into the kernel
    ('umt5_base', [], {'data': 1, 'fsdp': 1, 'tensor': 1, 'expert': 1}),
])
def test_models_train_five_steps_with_flash_bias_as_with_xla(name, overrides, mesh):
  config = helpers.smoke(name, 'train.batch_size=8', *overrides)
  (got, got_params, initial), (want, want_params, _) = (
      _train(config, kernel, mesh) for kernel in ('flash_bias', 'xla'))
  np.testing.assert_allclose(got, want, rtol=1e-5)
  tables = [(path, leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(want_params)
            if 'rel_embedding' in jax.tree_util.keystr(path)]
  assert len(tables) == {'t5_base': 2, 'gpt2_small': 0, 'umt5_base': 2}[name]
  for path, table in tables:  # the bias tables moved under flash_bias as under xla
    start, got_table = (functools.reduce(lambda t, k: t[k.key], path, tree)
                        for tree in (initial, got_params))
    assert table.shape[0] == (2 if name == 'umt5_base' else 32)  # per layer: [layers, ...]
    assert np.max(np.abs(table - start)) > 1e-3
    np.testing.assert_allclose(got_table, table, atol=2e-4)


def test_auto_picks_flash_bias_on_tpu_for_a_position_bias():
  assert kernels.resolve('auto', has_bias=True, on='tpu', lengths=(512, 512))[0] == 'flash_bias'
  assert kernels.resolve('auto', has_bias=True, on='tpu', lengths=(114, 114))[0] == 'flash_bias'
  name, why = kernels.resolve('auto', has_bias=True, on='tpu', lengths=(600, 600))
  assert name == 'xla' and 'neither multiples of 128 nor one block' in why
  assert kernels.resolve('auto', has_bias=True, on='gpu', dtype=jnp.bfloat16)[0] == 'gpu'
  # T5's cross-attention (no bias) under flash_bias: splash, or xla where it cannot block
  assert kernels.resolve('flash_bias', on='tpu', lengths=(128, 512))[0] == 'splash'
  assert kernels.resolve('flash_bias', on='tpu', lengths=(114, 512))[0] == 'xla'


@pytest.mark.parametrize('overrides, message', [
    (['model.attention.kernel=flash_bias'],
     r"kernel='flash_bias' computes a position bias, and model.position='rope' adds none"),
    (['model.attention.kernel=flash_bias', 'model.position=alibi', 'data.seq_len=640',
      'model.max_length=640'], r'block_q=512 / block_kv=512 must divide the query length 640'),
    (['model.attention.kernel=splash', 'model.position=alibi'],
     r"kernel='splash' takes no additive bias, which model.position='alibi' adds; use "
     r"'flash_bias'"),
])
def test_config_rejects_a_flash_bias_setup_it_cannot_run(overrides, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    helpers.load(helpers.config_file('gpt_shakespeare'), overrides)


def test_kernel_calls_it_cannot_take_say_what_to_use():
  with pytest.raises(ValueError, match="'flash_bias' is a TPU kernel .* on a GPU use 'gpu'"):
    kernels.resolve('flash_bias', has_bias=True, on='gpu')
  with pytest.raises(ValueError, match='block_q=96 / block_kv=128 must divide'):
    flash_bias.block_sizes(256, 256, 96, 128)
  q = jnp.ones((1, 128, 2, 8))
  ids = jnp.ones((1, 128), jnp.int32)
  with pytest.raises(ValueError, match="'flash_bias' computes a bias.PositionBias"):
    kernels.attention(q, q, q, mask_lib.Mask(ids, ids), bias=jnp.zeros((1, 2, 128, 128)),
                      kernel='flash_bias')
