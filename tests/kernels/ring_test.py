"""Ring attention on 8 simulated devices (context 4 x data 2) against the reference kernel
on the whole sequence: forward and gradients, causal (load-balanced layout), packed
documents with padding, GQA and MQA, sliding windows, bidirectional; and the models on a
context mesh (the ring inside them) against the same models on one device."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from zoo import config as config_lib
from zoo import families
from zoo import sharding
from zoo.kernels import mask as mask_lib
from zoo.kernels import reference
from zoo.kernels import ring

B, L, H, K, N = 2, 32, 4, 8, 4  # N devices on the ring


def _inputs(kv_heads, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  q = jax.random.normal(keys[0], (B, L, H, K))
  k = jax.random.normal(keys[1], (B, L, kv_heads, K))
  v = jax.random.normal(keys[2], (B, L, kv_heads, K))
  # row 0: three packed documents; row 1: one document then padding
  segments = jnp.asarray([[1] * 10 + [2] * 13 + [3] * 9, [1] * 27 + [0] * 5], jnp.int32)
  weights = jax.random.normal(keys[3], (B, L, H, K)) * (segments > 0)[..., None, None]
  return q, k, v, segments, weights


def _reference(q, k, v, segments, causal, window):
  dense = mask_lib.Mask(segments, segments, causal=causal, window=window).dense()
  return reference.dot_product_attention(q, k, v, mask=dense)


def _ring(q, k, v, segments, causal, window):
  mesh = jax.make_mesh((2, N), ('data', 'context'), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  slots = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
  spread = lambda x: ring.balance(x, N)
  rows, heads = P('data', 'context'), P('data', 'context', None, None)
  local = jax.jit(jax.shard_map(
      lambda *a: ring.ring_attention(*a, axis='context', causal=causal, window=window),
      mesh=mesh, in_specs=(heads, heads, heads, rows, rows, rows, rows), out_specs=heads,
      check_vma=False))
  out = local(*map(spread, (q, k, v, slots, slots, segments, segments)))
  return ring.unbalance(out, N)


CASES = {'causal_gqa': (2, True, 0), 'causal_mqa_window': (1, True, 6),
         'bidirectional_mha': (4, False, 0), 'window_gqa': (2, True, 3)}


@pytest.mark.parametrize('name', CASES)
def test_ring_attention_equals_the_reference_forward_and_backward(name):
  kv_heads, causal, window = CASES[name]
  q, k, v, segments, weights = _inputs(kv_heads)
  real = (segments > 0)[..., None, None]
  np.testing.assert_allclose(np.where(real, _ring(q, k, v, segments, causal, window), 0),
                             np.where(real, _reference(q, k, v, segments, causal, window), 0),
                             atol=2e-5, rtol=2e-5)
  loss = lambda fn: lambda q, k, v: jnp.sum(fn(q, k, v, segments, causal, window) * weights)
  got = jax.grad(loss(_ring), argnums=(0, 1, 2))(q, k, v)
  want = jax.grad(loss(_reference), argnums=(0, 1, 2))(q, k, v)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, atol=2e-5, rtol=2e-5)


def test_balance_gives_each_device_an_early_and_a_late_chunk():
  order = ring.balance(jnp.arange(16)[None], 4)[0]
  # 8 chunks of 2; device i (4 slots each) holds chunks i and 7 - i
  np.testing.assert_array_equal(order.reshape(4, 4), [[0, 1, 14, 15], [2, 3, 12, 13],
                                                      [4, 5, 10, 11], [6, 7, 8, 9]])
  np.testing.assert_array_equal(ring.unbalance(order[None], 4)[0], np.arange(16))


def test_a_mask_with_slots_is_the_in_order_mask_laid_out_like_its_tokens():
  segments = jnp.asarray([[1] * 5 + [2] * 11], jnp.int32)
  slots = ring.balance(jnp.arange(16, dtype=jnp.int32)[None], 4)
  spread = lambda m: ring.balance(ring.balance(m, 4, axis=2), 4, axis=3)
  for window in (0, 3):
    in_order = mask_lib.Mask(segments, segments, causal=True, window=window).dense()
    laid_out = ring.balance(segments, 4)
    got = mask_lib.Mask(laid_out, laid_out, causal=True, window=window, slots=slots).dense()
    np.testing.assert_array_equal(got, spread(in_order))


def _model(family, window):
  c = config_lib.base()
  c.model.update(family=family, vocab_size=64, d_model=32, num_layers=2, num_heads=4,
                 num_kv_heads=2, mlp_dim=64, max_length=64,
                 position='rope' if family == 'decoder' else 'learned')
  c.model.attention.window = window
  return c, families.build(c.model)


MODEL_BATCH = {
    'inputs': jnp.asarray(np.random.default_rng(0).integers(4, 64, (4, 16)), jnp.int32),
    'segment_ids': jnp.asarray([[1] * 5 + [2] * 7 + [3] * 4, [1] * 16, [1] * 12 + [0] * 4,
                                [1] * 3 + [2] * 13], jnp.int32),
    'positions': jnp.asarray([[*range(5), *range(7), *range(4)], [*range(16)],
                              [*range(12), *range(4)], [*range(3), *range(13)]], jnp.int32)}


# (the decoder without a window: the 5-step losses in tests/sharding_test.py)
@pytest.mark.parametrize('family,window', [('decoder', 5), ('encoder', 0)])
def test_a_model_on_a_context_mesh_gives_the_one_device_outputs_and_gradients(family, window):
  """RoPE at each token's position, packed documents, GQA, a window; context 4 x data 2."""
  config, model = _model(family, window)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), MODEL_BATCH)
  loss = lambda p: jnp.sum(jax.tree.leaves(model.apply(p, MODEL_BATCH))[0] ** 2)
  want, want_grads = model.apply(params, MODEL_BATCH), jax.grad(loss)(params)
  mesh = sharding.make_mesh(dict(data=2, fsdp=1, tensor=1, expert=1, context=4))
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.rules(config)):
    apply = jax.jit(model.apply)
    assert 'collective_permute' in apply.lower(params, MODEL_BATCH).as_text()  # the ring ran
    got, got_grads = apply(params, MODEL_BATCH), jax.jit(jax.grad(loss))(params)
  for g, w in zip(jax.tree.leaves(got) + jax.tree.leaves(got_grads),
                  jax.tree.leaves(want) + jax.tree.leaves(want_grads)):
    # float32 sums in another order: within 2e-5 of each array's largest value
    np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * float(np.abs(w).max()))
