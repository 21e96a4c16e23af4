"""Chunked attention (Llama 4: each query attends its own chunk of its document, causally)
as every kernel runs it, a causal window of the chunk over chunk-refined segment ids
(mask.Mask.chunked), forward and backward against a float64 numpy reference that cuts
each packed document into chunks by its own positions: the reference, the CPU causal
blocks, splash and both rings on a context x tensor mesh (with gpt-oss's sinks too), and
cuDNN's call through XLA."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.kernels import ring_splash_test
from tests.kernels import sinks_test
from zoo import kernels
from zoo.kernels import gpu
from zoo.kernels import mask as mask_lib
from zoo.kernels import ring

CHUNK = 128


def _positions(segments):
  """Each token's position in its document (packed rows restart at 0)."""
  segments = np.asarray(segments)
  out = np.zeros_like(segments)
  for b, row in enumerate(segments):
    for j in range(1, len(row)):
      out[b, j] = out[b, j - 1] + 1 if row[j] == row[j - 1] else 0
  return jnp.asarray(out)


def want(segments):
  """[B, 1, L, L]: same document, causal, same chunk of the document's positions."""
  seg, pos = np.asarray(segments), np.asarray(_positions(segments))
  same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] > 0)
  causal = np.tril(np.ones((seg.shape[1],) * 2, bool))[None]
  return (same & causal & (pos[:, :, None] // CHUNK == pos[:, None, :] // CHUNK))[:, None]


def chunked(segments, slots=None, spread=lambda x: x):
  ids = mask_lib.chunk_segments(segments, _positions(segments), CHUNK)
  return mask_lib.Mask(spread(segments), spread(segments), causal=True, slots=slots,
                       chunk=CHUNK, q_chunk_ids=spread(ids), kv_chunk_ids=spread(ids)).chunked()


def test_a_chunked_mask_cuts_each_packed_document_by_its_own_positions():
  segments = jnp.asarray([[1] * 5 + [2] * 7], jnp.int32)
  ids = mask_lib.chunk_segments(segments, _positions(segments), 4)
  mask = mask_lib.Mask(segments, segments, causal=True, chunk=4, q_chunk_ids=ids,
                       kv_chunk_ids=ids).chunked()
  dense = np.asarray(mask.dense())[0, 0]
  # document 2 starts at slot 5: its chunks are slots 5-8 and 9-11, not 4-7 and 8-11
  assert dense[8].tolist() == [False] * 5 + [True] * 4 + [False] * 3
  assert dense[9].tolist() == [False] * 9 + [True] + [False] * 2
  assert dense[4].tolist() == [False] * 4 + [True] + [False] * 7  # document 1's second chunk


def _check(run, sinks=True):
  q, k, v, segments, weights = ring_splash_test._inputs(2)
  H = q.shape[2]
  sinks_H = sinks_test._sinks(H) if sinks else jnp.full((H,), -1e4)  # -1e4: none
  sinks_test._check(lambda q, k, v, s: run(q, k, v, segments, s), q, k, v, sinks_H, segments,
                    weights, want(segments), q.shape[-1] ** -0.5)


@pytest.mark.parametrize('kernel', ['xla', 'splash'])
def test_the_reference_the_causal_blocks_and_splash_attend_within_chunks_with_sinks(kernel):
  def run(q, k, v, segments, sinks):
    mask = chunked(segments)
    if kernel == 'xla':
      assert kernels.causal.supports(mask, q.shape[1], q.shape[1])  # the CPU blocks run
    return kernels.attention(q, k, v, mask, kernel=kernel, block_sizes=(128, 128),
                             sinks=sinks)
  _check(run)


def test_cudnns_call_takes_the_chunks_as_a_window_and_segments():
  _check(lambda q, k, v, segments, _: gpu.attention(q, k, v, chunked(segments),
                                                    implementation='xla'), sinks=False)


@pytest.mark.parametrize('kernel', ['xla', 'splash'])
def test_both_rings_take_sinks_and_chunks_with_heads_over_tensor(kernel):
  """gpt-oss's sinks split over tensor with their heads, on Llama 4's chunked mask (a window
  over chunk-refined segment ids) round a context ring."""
  q, k, v, segments, weights = ring_splash_test._inputs(2)
  N, L = ring_splash_test.N, ring_splash_test.L
  sinks = sinks_test._sinks(q.shape[2])
  mesh = jax.make_mesh((N, 2), ('context', 'tensor'), devices=jax.devices()[:2 * N],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  spread = lambda x: ring.balance(x, N)
  slots = spread(jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), segments.shape))
  ringed = chunked(segments, slots, spread)
  run = lambda q, k, v, s: ring.unbalance(kernels.attention(
      *map(spread, (q, k, v)), ringed, kernel=kernel, block_sizes=(128, 128), sinks=s), N)
  assert kernels.ring_blocks(kernel, True, L // N) == kernel
  sinks_test._check(run, q, k, v, sinks, segments, weights, want(segments),
         q.shape[-1] ** -0.5, mesh)
