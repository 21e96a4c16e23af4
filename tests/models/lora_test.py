"""LoRA (train.lora): adapters that start at the base model, merge into its kernels, and
are all a step moves and all the optimizer keeps state for."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tests import helpers
from zoo import families
from zoo.models import lora

TARGETS = 'query,key,value,out,wi_0,wi_1,wo'


def _config(**lora_fields):
  c = helpers.tiny_config()
  c.train.lora.update(rank=4, targets=TARGETS, **lora_fields)
  c.data.num_sentinels = 0  # helpers.family_batch draws tokens below vocab - sentinels
  return c


def _logits(config, params, lora_config=None):
  model = families.build(config.model, lora_config)
  return model.apply({'params': params}, helpers.batch(helpers.random_ids(16)))


def test_adapters_start_at_the_base_model_and_merge_into_its_kernels():
  c = _config()
  model = families.build(c.model, c.train.lora)
  params = nn.unbox(model.init(jax.random.PRNGKey(0), helpers.batch(helpers.random_ids(16)))
                    ['params'])
  adapters = [p for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]
              if lora.NAME in str(p)]
  assert len(adapters) == 2 * 7  # a and b for each target, the layers stacked
  base = lora.merge(params, c.train.lora.alpha / 4)  # b = 0: the kernels as they were
  np.testing.assert_array_equal(_logits(c, params, c.train.lora), _logits(c, base))

  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
  moved = treedef.unflatten([jax.random.normal(k, x.shape) * 0.1 if x.ndim and
                             np.all(np.asarray(x) == 0) else x for k, x in zip(keys, leaves)])
  adapted = _logits(c, moved, c.train.lora)
  merged = _logits(c, lora.merge(moved, c.train.lora.alpha / 4))
  assert np.abs(adapted - _logits(c, base)).max() > 1e-2  # the adapters do something
  np.testing.assert_allclose(merged, adapted, rtol=1e-5, atol=1e-5)


def test_a_lora_step_moves_only_the_adapters_which_alone_hold_optimizer_state():
  c = _config(dropout=0.1)
  _, params, initial = helpers.train_steps(c, {}, 2)
  moved, frozen = 0, 0
  for (path, new), old in zip(jax.tree_util.tree_flatten_with_path(params)[0],
                              jax.tree.leaves(initial['params'])):
    if lora.NAME in str(path):
      moved += int(not np.array_equal(new, old))
    else:
      np.testing.assert_array_equal(new, old, err_msg=str(path))
      frozen += 1
  assert moved == 2 * 7 and frozen > 0
  adapter_size = sum(x.size for p, x in jax.tree_util.tree_flatten_with_path(params)[0]
                     if lora.NAME in str(p))
  state_size = sum(x.size for x in jax.tree.leaves(initial['opt_state']) if x.ndim)
  assert state_size == 2 * adapter_size  # AdamW's two moments, the adapters' only


def test_merging_stacked_layers_is_each_layers_own_product():
  rng = np.random.default_rng(0)
  kernel = rng.normal(size=(3, 5, 2, 4)).astype(np.float32)  # [layers, in, heads, dim]
  a, b = rng.normal(size=(3, 5, 2)), rng.normal(size=(3, 2, 2, 4))
  merged = lora.merge({'kernel': kernel, 'lora': {'a': a, 'b': b}}, 0.5)
  assert set(merged) == {'kernel'}
  for layer in range(3):
    want = kernel[layer] + 0.5 * np.einsum('ir,rhd->ihd', a[layer], b[layer])
    np.testing.assert_allclose(merged['kernel'][layer], want, rtol=1e-5)


def test_a_lora_run_on_a_mesh_gives_the_one_device_losses():
  c = _config()
  one = [r['loss'] for r in helpers.train_steps(c, {}, 3)[0]]
  mesh = [r['loss'] for r in helpers.train_steps(c, {'data': 2, 'fsdp': 2, 'tensor': 2},
                                                   3)[0]]
  np.testing.assert_allclose(mesh, one, rtol=1e-5)
