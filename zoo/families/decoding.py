"""What the generating families share to start decoding: prompt padding and an empty cache.

Glossary: B batch, P prompt length.
"""

import jax
import jax.numpy as jnp
import numpy as np


def left_pad(prompts, pad_id, length=None):
  """Token lists -> (ids [B, P], segment ids [B, P]: 1 for tokens, 0 for padding), each row
  ending at P (decoder-only: every row's next token goes to the same cache slot); P is
  `length`, or the longest prompt's."""
  length = length or max(len(p) for p in prompts)
  ids = np.full((len(prompts), length), pad_id, np.int32)
  segments = np.zeros((len(prompts), length), np.int32)
  for row, prompt in enumerate(prompts):
    ids[row, length - len(prompt):] = prompt
    segments[row, length - len(prompt):] = 1
  return ids, segments


def right_pad(prompts, pad_id):
  """Token lists -> (ids [B, P], segment ids [B, P]), each row starting at 0."""
  length = max(len(p) for p in prompts)
  ids = np.full((len(prompts), length), pad_id, np.int32)
  for row, prompt in enumerate(prompts):
    ids[row, :len(prompt)] = prompt
  lengths_B1 = np.array([[len(p)] for p in prompts])
  return ids, (np.arange(length)[None] < lengths_B1).astype(np.int32)


def empty_cache(model, args, method=None):
  """Zeros shaped like the 'cache' collection a call with `args` creates."""
  shapes = jax.eval_shape(
      lambda: model.init(jax.random.PRNGKey(0), *args, method=method)['cache'])
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
