"""Fused attention on NVIDIA GPUs: cuDNN through `jax.nn.dot_product_attention`.

The causal flag and the sliding window go to cuDNN as mask types (it skips the masked
blocks); segment ids (packing, padding) go as a boolean mask. cuDNN runs bfloat16/float16
only; float32 falls back to the XLA reference (zoo.kernels says so).

Glossary: B batch, L query length, S key length, H heads, G kv heads, K head dim.
"""

import jax
import jax.numpy as jnp

from zoo.kernels import mask as mask_lib

DTYPES = (jnp.bfloat16, jnp.float16)


def keys_of(mask):
  """[B, 1, L, S] boolean: the segment part of `mask` as cuDNN gets it, where a padding query
  (segment 0) attends every key. cuDNN's backward returns NaN for a query that attends no key
  (docs/contracts.md, Known problems); a padding query's output reaches no loss and no other
  token (padding keys are never attended), so its keys change no gradient."""
  segments = mask_lib.segment_mask(mask.q_segment_ids, mask.kv_segment_ids)
  return segments | (mask.q_segment_ids == 0)[:, None, :, None]


def attention(q_BLHK, k_BSGK, v_BSGK, mask, bias=None, scale=None, implementation='cudnn'):
  """`implementation='xla'` runs the same call through XLA (how CPU tests check it)."""
  segments = keys_of(mask)
  window = None
  if mask.window:  # (keys back, keys ahead), each end included
    window = (mask.window - 1, 0) if mask.causal else (mask.window, mask.window)
  return jax.nn.dot_product_attention(
      q_BLHK, k_BSGK, v_BSGK, bias=None if bias is None else bias.astype(q_BLHK.dtype),
      mask=segments, scale=scale, is_causal=mask.causal, local_window_size=window,
      implementation=implementation).astype(q_BLHK.dtype)
