"""Attention over serving's pages: the XLA path equals a float64 numpy reference (causal,
a sliding window, a soft cap; prefill and decode rows, padding, rows that share pages);
so does the Pallas path's packing of the rows around JAX's reference of the ragged kernel
(which JAX's interpreters cannot run on a CPU); and the engine's step with the kernel
compiles for a TPU chip through libtpu."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas.ops.tpu import ragged_paged_attention as rpa

from zoo.kernels import mask as mask_lib
from zoo.kernels import paged

N, T, G, H, K = 12, 4, 2, 4, 128
ROWS = [(0, 5), (9, 1), (3, 4), (0, 0)]  # (start, tokens fed): prefill, decode, more, none
L, P = 5, 4


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  pool = rng.normal(size=(N, T, 2 * G, K)).astype(np.float32)
  table = np.array([[1, 2, 0, 0], [3, 4, 5, 0], [1, 6, 0, 0], [0, 0, 0, 0]], np.int32)
  valid = np.zeros((len(ROWS), L), np.int32)
  positions = np.zeros((len(ROWS), L), np.int32)
  for r, (start, n) in enumerate(ROWS):
    valid[r, :n] = 1
    positions[r, :n] = np.arange(start, start + n)
  ends = np.array([s + n for s, n in ROWS], np.int32)
  q = rng.normal(size=(len(ROWS), L, H, K)).astype(np.float32)
  return pool, table, valid, positions, ends, q


def _mask(table, valid, positions, ends, window=0):
  S = P * T
  pages = mask_lib.Pages(jnp.asarray(table), jnp.asarray(positions), None, T, N)
  return mask_lib.Mask(jnp.asarray(valid), jnp.asarray((np.arange(S)[None] < ends[:, None])
                                                      .astype(np.int32)),
                       causal=True, window=window, kv_cache=True, pages=pages)


def _numpy(pool, table, valid, positions, ends, q, scale, window, softcap):
  out = np.zeros(q.shape, np.float64)
  for r in range(q.shape[0]):
    keys = pool[table[r]].reshape(P * T, G, 2, K).astype(np.float64)
    for l in np.flatnonzero(valid[r]):
      p = positions[r, l]
      seen = [s for s in range(ends[r]) if s <= p and (not window or s > p - window)]
      for h in range(H):
        logits = keys[seen, h // (H // G), 0] @ q[r, l, h].astype(np.float64) * scale
        if softcap:
          logits = softcap * np.tanh(logits / softcap)
        w = np.exp(logits - logits.max())
        out[r, l, h] = (w / w.sum()) @ keys[seen, h // (H // G), 1]
  return out


@pytest.mark.parametrize('window, softcap', [(0, 0.0), (3, 0.0), (0, 20.0)])
def test_the_xla_path_and_the_packing_around_the_kernels_reference_equal_numpy(window, softcap):
  pool, table, valid, positions, ends, q = _inputs()
  mask = _mask(table, valid, positions, ends, window)
  scale = K ** -0.5
  want = _numpy(pool, table, valid, positions, ends, q, scale, window, softcap)
  real = valid[:, :, None, None] > 0
  xla = paged.attention(jnp.asarray(q), jnp.asarray(pool), mask, scale, softcap)
  np.testing.assert_allclose(np.where(real, xla, 0), want, atol=2e-5)
  reference = lambda *args, num_kv_pages_per_block, num_queries_per_block, **options: \
      rpa.ref_ragged_paged_attention(*args, **options)
  packed = paged.ragged(reference, jnp.asarray(q), jnp.asarray(pool), mask, scale, softcap)
  np.testing.assert_allclose(np.where(real, packed, 0), want, atol=2e-5)
  assert not np.any(np.where(real, 0, packed))  # padding's outputs are zeros


def test_writes_land_at_each_tokens_page_slot_and_padding_in_page_0():
  pool, table, valid, positions, ends, _ = _inputs()
  rng = np.random.default_rng(1)
  k, v = (rng.normal(size=(len(ROWS), L, G, K)).astype(np.float32) for _ in range(2))
  pages = mask_lib.Pages(jnp.asarray(table), jnp.asarray(positions), None, T, N)
  out = np.asarray(paged.write(jnp.asarray(pool), k, v, pages, jnp.asarray(valid) > 0))
  want = pool.copy()
  for r, (start, n) in enumerate(ROWS):
    for l in range(n):
      p = start + l
      want[table[r, p // T], p % T, 0::2] = k[r, l]
      want[table[r, p // T], p % T, 1::2] = v[r, l]
  np.testing.assert_array_equal(out[1:], want[1:])  # page 0 took the padding's writes
  keys, values = paged.gather(jnp.asarray(out), jnp.asarray(table))
  np.testing.assert_array_equal(keys[1, 9], k[1, 0])  # row 1's position 9: page 5, slot 1
  np.testing.assert_array_equal(values[1, 9], v[1, 0])


def test_the_engines_step_with_the_pallas_kernel_compiles_for_a_tpu_chip():
  from tests import helpers  # pylint: disable=g-import-not-at-top
  from zoo import families  # pylint: disable=g-import-not-at-top
  from zoo import sharding  # pylint: disable=g-import-not-at-top
  from zoo.plan import topology  # pylint: disable=g-import-not-at-top
  from zoo.serve import sampling  # pylint: disable=g-import-not-at-top
  from zoo.serve import step as step_lib  # pylint: disable=g-import-not-at-top
  from zoo.train import runtime  # pylint: disable=g-import-not-at-top
  config = helpers.tiny_config(d_model=256, num_heads=4, num_kv_heads=2, head_dim=128,
                               position='rope', dtype='bfloat16')
  config.model.attention.window = 32  # the kernel's sliding window
  model = families.build(config.model)
  shapes = step_lib.Shapes(16, 64, 8, 5, kernel='pallas')
  fn, decoding, _ = step_lib.make(model, shapes)
  devices = topology.devices(topology.parse('v5e-1'))
  mesh = sharding.make_mesh(config.mesh, devices)
  place = runtime.Placement(mesh, sharding.rules(config), None)
  replicated = sharding.replicated(mesh)
  variables = jax.eval_shape(lambda: {'params': decoding.init(
      jax.random.PRNGKey(0), families.example_batch(config.model, 1, 16))['params']})
  pool = jax.eval_shape(lambda: step_lib.empty_pool(decoding, shapes))
  on = lambda tree: jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype,
                                                                sharding=replicated), tree)
  for rows, length in ((4, 1), (2, 16)):  # decode and prefill
    feed = step_lib.empty_feed(rows, length, 8)
    feed.update(sampling.host_arrays([], rows))
    jitted = step_lib.compiled(place, fn, jax.tree.map(lambda _: replicated, variables),
                               jax.tree.map(lambda _: replicated, pool))
    with jax.set_mesh(mesh), nn.logical_axis_rules(place.rules):
      lowered = jitted.jitted.lower(on(variables), on(pool), on(feed))
      assert 'ragged_paged_attention' in lowered.as_text()
      lowered.compile()
