"""Mask semantics on the real decoder: causality, packing and padding."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import families
from zoo import run as run_lib
from zoo.plan import compiled
from zoo.plan import topology

ATOL = 1e-5


@pytest.fixture(scope='module')
def decoder():
  config = helpers.tiny_config()
  model = families.build(config.model)
  params = nn.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), {'inputs': jnp.zeros((1, 16), jnp.int32)}))
  return jax.jit(lambda batch: model.apply(params, batch))


def _batch(ids, segment_ids=None, positions=None):
  return helpers.batch(ids, segment_ids=segment_ids, positions=positions)


def test_changing_the_last_token_leaves_earlier_logits_unchanged(decoder):
  ids = helpers.random_ids(16)
  changed = ids.copy()
  changed[-1] = (ids[-1] + 1) % 64
  a, b = decoder(_batch(ids)), decoder(_batch(changed))
  np.testing.assert_allclose(a[0, :-1], b[0, :-1], atol=ATOL)
  assert not np.allclose(a[0, -1], b[0, -1], atol=1e-3)


def test_a_packed_document_matches_the_document_alone(decoder):
  first, second = helpers.random_ids(6, seed=1), helpers.random_ids(10, seed=2)
  packed = decoder(_batch(np.concatenate([first, second]), [1] * 6 + [2] * 10,
                          list(range(6)) + list(range(10))))
  alone = decoder(_batch(np.concatenate([second, np.zeros(6, np.int32)]),
                         [1] * 10 + [0] * 6, list(range(10)) + [0] * 6))
  np.testing.assert_allclose(packed[0, 6:], alone[0, :10], atol=ATOL)
  first_alone = decoder(_batch(np.concatenate([first, np.zeros(10, np.int32)]),
                               [1] * 6 + [0] * 10, list(range(6)) + [0] * 10))
  np.testing.assert_allclose(packed[0, :6], first_alone[0, :6], atol=ATOL)


def test_padding_never_changes_real_tokens(decoder):
  ids = helpers.random_ids(16, seed=3)
  segment_ids = [1] * 11 + [0] * 5
  noisy = ids.copy()
  noisy[11:] = helpers.random_ids(5, seed=4)
  a = decoder(_batch(ids, segment_ids))
  b = decoder(_batch(noisy, segment_ids))
  np.testing.assert_allclose(a[0, :11], b[0, :11], atol=ATOL)


@pytest.mark.parametrize('overrides', [
    {'position': 'learned', 'norm': 'layernorm', 'use_bias': True, 'activation': 'gelu_tanh',
     'tie_embeddings': True},
    {'position': 'sinusoidal', 'norm_position': 'post', 'activation': 'relu'},
    {'block': 'parallel', 'num_kv_heads': 1, 'attention': {'kernel': 'xla', 'window': 4}},
    {'position': 'alibi'},
], ids=['gpt2_style', 'post_norm', 'parallel_mqa_window', 'alibi'])
def test_variants_stay_causal(overrides):
  config = helpers.tiny_config()
  for key, value in overrides.items():
    if isinstance(value, dict):
      config.model[key].update(value)
    else:
      config.model[key] = value
  model = families.build(config.model)
  ids = helpers.random_ids(16, seed=5)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), _batch(ids))
  changed = ids.copy()
  changed[-1] = (ids[-1] + 1) % 64
  a, b = model.apply(params, _batch(ids)), model.apply(params, _batch(changed))
  assert a.dtype == jnp.float32 and a.shape == (1, 16, 64)
  np.testing.assert_allclose(a[0, :-1], b[0, :-1], atol=ATOL)


def test_sliding_window_limits_how_far_back_a_token_sees():
  config = helpers.tiny_config()
  config.model.attention.window = 4
  config.model.num_layers = 1
  model = families.build(config.model)
  ids = helpers.random_ids(16, seed=6)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), _batch(ids))
  changed = ids.copy()
  changed[0] = (ids[0] + 1) % 64
  a, b = model.apply(params, _batch(ids)), model.apply(params, _batch(changed))
  np.testing.assert_allclose(a[0, 4:], b[0, 4:], atol=ATOL)  # one layer: token 0 is out of view


def test_scan_and_remat_give_the_same_loss_and_gradients_as_unrolled():
  batch = _batch(helpers.random_ids(16, seed=7))
  results = []
  for scan, remat in [(True, 'none'), (True, 'full'), (False, 'dots')]:
    config = helpers.tiny_config(scan_layers=scan, remat=remat)
    model = families.build(config.model)
    params = nn.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), batch)['params'])
    if not scan:  # unrolled layers_i hold what the scanned stack holds at index i
      scanned = nn.unbox(families.build(helpers.tiny_config().model).init(
          jax.random.PRNGKey(0), batch)['params'])
      params = dict(params)
      for i in range(config.model.num_layers):
        params[f'layers_{i}'] = jax.tree.map(lambda x: x[i], scanned['layers'])
    loss = lambda p: jnp.sum(model.apply({'params': p}, batch) ** 2)
    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    if not scan:
      grads = {'layers': jax.tree.map(lambda *xs: jnp.stack(xs),
                                      *[grads[f'layers_{i}'] for i in range(2)]),
               **{k: v for k, v in grads.items() if not k.startswith('layers_')}}
    results.append((value, grads))
  for value, grads in results[1:]:
    np.testing.assert_allclose(value, results[0][0], rtol=1e-5)
    # float32 sums in another order: each leaf agrees to ~1e-6 of its largest entry
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        a, b, rtol=1e-4, atol=1e-5 * float(jnp.abs(b).max())), grads, results[0][1])



def test_a_group_of_layers_rematerialises_one_layer_at_a_time():
  """Three patterned layers (one scanned PatternGroup) hold what three plain layers hold in
  the train step the TPU compiler builds (v5p, AOT) with remat full: each layer of a group
  is recomputed alone, not the group's three at once (six layers held 1.7x the temporaries
  when the group was the rematerialised unit; a wide MLP and long rows make the working set
  the MLP's)."""
  def temporaries(pattern):
    config = helpers.tiny_config(num_layers=3, d_model=256, num_heads=2, num_kv_heads=2,
                                 mlp_dim=8192, max_length=2048, remat='full')
    config.model.attention.update(pattern=pattern, kernel='xla')
    config.data.seq_len, config.train.batch_size, config.mesh.data = 2048, 4, 4
    run = run_lib.resolve(helpers.validate(config))
    with jax.default_matmul_precision('default'):  # a TPU's bf16 passes, as training runs
      out = compiled.compile_step(run, topology.devices(topology.parse('v5p-8')),
                                  scan_corrected_cost=False)
    return out['per_device_bytes']['temporaries']

  plain, grouped = temporaries(''), temporaries('GGG')
  assert grouped < 1.1 * plain, (grouped, plain)
