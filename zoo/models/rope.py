"""Rotary position embeddings and their scalings, each as transformers computes it
(modeling_rope_utils): channel pairs (i, i + K/2) rotate by position x frequency i.

A scaling is a tuple from the config (dims.rope_scaling), () for none:
  ('llama3', factor, low_freq_factor, high_freq_factor, original_max_length)  Llama 3.1
  ('linear', factor)                                     positions / factor (Gemma 3 global)
  ('dynamic', factor, max_length)                        NTK: the base grows with the longest
                                                         position of the call past max_length
  ('yarn', factor, original_max_length, beta_fast, beta_slow, attention_factor, truncate)

Glossary: B batch, L length, H heads, K head dim.
"""

import math

import jax.numpy as jnp
import numpy as np


def frequencies(head_dim, theta, scaling=(), positions=None):
  """-> (K/2 frequencies (float32; a traced array under 'dynamic', which reads the longest
  of `positions`), the factor cos and sin are multiplied by (YaRN's attention scale, else 1))."""
  exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
  freq = theta ** -exponents
  kind = scaling[0] if scaling else 'none'
  if kind == 'llama3':
    factor, low, high, original = scaling[1:]
    turns = original * freq / (2 * np.pi)  # over the original context
    if high > low:
      blend = np.clip((turns - low) / (high - low), 0.0, 1.0)
    else:  # no smoothing band (Llama 4 Scout: low = high = 1): each kept or divided
      blend = (turns > low).astype(np.float64)
    freq = (1 - blend) * freq / factor + blend * freq
  elif kind == 'linear':
    freq = freq / scaling[1]
  elif kind == 'dynamic':
    factor, max_length = scaling[1:]
    length = jnp.maximum(jnp.max(positions) + 1, max_length).astype(jnp.float32)
    base = theta * (factor * length / max_length - (factor - 1)) ** (head_dim / (head_dim - 2))
    return base ** -jnp.asarray(exponents, jnp.float32), 1.0
  elif kind == 'yarn':
    return _yarn(freq, head_dim, theta, *scaling[1:])
  return freq.astype(np.float32), 1.0


def _yarn(freq, head_dim, theta, factor, original, beta_fast, beta_slow, attention_factor,
          truncate):
  """YaRN (Peng et al. 2023): dimensions that turn fewer than beta_slow times over the
  original context are interpolated (/ factor), more than beta_fast times kept, a linear
  ramp between."""
  def dimension(rotations):  # the dimension that turns `rotations` times over `original`
    return head_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))
  low, high = dimension(beta_fast), dimension(beta_slow)
  if truncate:
    low, high = math.floor(low), math.ceil(high)
  low, high = max(low, 0), min(high, head_dim - 1)
  high = high + 0.001 if low == high else high
  ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
  kept = 1 - ramp  # the share of each frequency extrapolated (kept as it is)
  freq = freq / factor * (1 - kept) + freq * kept
  return freq.astype(np.float32), attention_factor


def yarn_attention_factor(factor, mscale=0.0, mscale_all_dim=0.0):
  """transformers' default YaRN attention scale: 0.1 ln(factor) + 1 (or the ratio of the two
  with DeepSeek's mscale and mscale_all_dim)."""
  scale = lambda m: 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
  if mscale and mscale_all_dim:
    return scale(mscale) / scale(mscale_all_dim)
  return scale(1.0)


def apply(x_BLHK, positions_BL, theta, scaling=(), fraction=1.0):
  """x rotated by its positions (in float32), cos and sin scaled as the scaling says; with
  `fraction` < 1 (partial rotary: Qwen3-Next's 0.25) only the first fraction x K channels
  rotate, as a head of that size, and the rest pass."""
  dim = int(x_BLHK.shape[-1] * fraction)
  half = dim // 2
  freq, attention_factor = frequencies(dim, theta, scaling, positions_BL)
  angles_BLk = positions_BL[..., None].astype(jnp.float32) * freq[None, None]
  sin_BL1k = (jnp.sin(angles_BLk) * attention_factor)[:, :, None]
  cos_BL1k = (jnp.cos(angles_BLk) * attention_factor)[:, :, None]
  x = x_BLHK.astype(jnp.float32)
  x1, x2, rest = x[..., :half], x[..., half:dim], x[..., dim:]
  rotated = jnp.concatenate([x1 * cos_BL1k - x2 * sin_BL1k, x2 * cos_BL1k + x1 * sin_BL1k,
                             rest], -1)
  return rotated.astype(x_BLHK.dtype)
