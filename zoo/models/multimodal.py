"""Images in a decoder's rows (Gemma 3, Team Gemma 2025): a SigLIP tower over each image,
its patch states averaged to model.multimodal.tokens_per_image per image, RMS-normed and
projected to the decoder's width, in place of the row's image_token_id tokens. `Decoder`
is transformer.Decoder with its `images` step filled in.

A row holds I images ([B, I, Y, X, C] pixels) and I x tokens_per_image image tokens, which
take the images' tokens in order (a row with fewer images pads its pixels; those are never
read). Each run of image tokens is one block of the attention mask, whose tokens attend
each other both ways while the text stays causal (zoo/kernels/mask.py).

The tower is the vision family's (zoo/models/vision.py) with model.multimodal's shape and
SigLIP's blocks (pre-LayerNorm with biases, tanh-GELU), not the decoder's.

Glossary: B batch, I images per row, M images of the batch (B x I), Y image rows, X image
columns, C channels, P patches of an image, T tokens of an image, N image tokens of a row
(I x T), L length, D d_model.
"""

import math
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from zoo.config import schema
from zoo.errors import ConfigError
from zoo.kernels import mask as mask_lib
from zoo.models import layers
from zoo.models import transformer
from zoo.models import vision


def enabled(m):
  return m.multimodal.tokens_per_image > 0


def tower_config(m):
  """The tower's model config: SigLIP's blocks at model.multimodal's shape, the decoder's
  dtypes and remat."""
  t = schema.base().model
  mm = m.multimodal
  t.update(family='vision', position='none', norm='layernorm', norm_position='pre',
           activation='gelu_tanh', use_bias=True, d_model=mm.d_model, num_layers=mm.num_layers,
           num_heads=mm.num_heads, mlp_dim=mm.mlp_dim, norm_eps=mm.norm_eps, dtype=m.dtype,
           param_dtype=m.param_dtype, remat=m.remat, dropout_rate=0.0)
  t.vision.update(m.vision.to_dict())
  return ml_collections.FrozenConfigDict(t)


def image_tokens(ids_BL, m):
  """[B, L] bool: the tokens images take."""
  return ids_BL == m.multimodal.image_token_id


def blocks(ids_BL, m):
  """The mask's image blocks [B, L]: each run of image tokens (one image) 1, 2, ..."""
  return mask_lib.contiguous_blocks(image_tokens(ids_BL, m))


class ImageInput(nn.Module):
  """x [B, L, D] (the token embeddings) -> x with the images' tokens at the image tokens."""
  config: Any

  @nn.compact
  def __call__(self, x_BLD, ids_BL, pixels_BIYXC):
    m = self.config
    t = tower_config(m)
    v = m.vision
    B, I = pixels_BIYXC.shape[:2]
    hidden_MPD = vision.VisionTower(t, v.image_size, v.patch_size, v.position, 'none',
                                    name='tower')(pixels_BIYXC.reshape(
                                        B * I, *pixels_BIYXC.shape[2:]))['hidden']
    side = math.isqrt(hidden_MPD.shape[1])
    per_side = math.isqrt(m.multimodal.tokens_per_image)
    k = side // per_side  # the average pool's window and stride
    grid = hidden_MPD.reshape(B * I, per_side, k, per_side, k, t.d_model)
    pooled_MTD = jnp.mean(grid.astype(jnp.float32), axis=(2, 4)).reshape(
        B * I, per_side * per_side, t.d_model)
    normed_MTD = layers.Norm('rmsnorm', t.norm_eps, name='projector_norm',
                             **transformer.dtypes(m))(pooled_MTD)
    images_BND = layers.DenseGeneral(m.d_model, ('mlp', 'embed'), name='projection',
                                     **transformer.dtypes(m))(normed_MTD).reshape(
                                         B, -1, m.d_model)
    taken_BL = image_tokens(ids_BL, m)
    order_BL = jnp.clip(jnp.cumsum(taken_BL, axis=1) - 1, 0, images_BND.shape[1] - 1)
    placed_BLD = jnp.take_along_axis(images_BND, order_BL[..., None], axis=1)
    return jnp.where(taken_BL[..., None], placed_BLD.astype(x_BLD.dtype), x_BLD)


class Decoder(transformer.Decoder):
  """A decoder whose rows hold images: batch adds 'pixels' [B, I, Y, X, C]; a batch
  without them (a text-only prompt) runs as the text decoder."""

  def images(self, x_BLD, batch):
    if 'pixels' not in batch:
      return x_BLD, None
    if 'kv_segment_ids' in batch:  # the cache would need each slot's image block
      raise ValueError('image prompts in cached decoding are not built yet; a cached step '
                       'takes text alone (docs/vision.md)')
    ids_BL = batch['inputs']
    x_BLD = ImageInput(self.config, name='vision')(x_BLD, ids_BL, batch['pixels'])
    return x_BLD, blocks(ids_BL, self.config)


def check(m, context):
  """What the tower, the pooling and the mask need of model.multimodal: a ConfigError naming
  the field."""
  mm, v = m.multimodal, m.vision
  per_side = math.isqrt(mm.tokens_per_image)
  side = v.image_size // v.patch_size
  if per_side * per_side != mm.tokens_per_image or side % per_side:
    raise ConfigError(f'model.multimodal.tokens_per_image={mm.tokens_per_image}: an image of '
                     f'{side} x {side} patches averages to a square grid whose side divides '
                     f'{side}; use one of {[k * k for k in range(1, side + 1) if side % k == 0]}')
  if not 0 <= mm.image_token_id < m.vocab_size:
    raise ConfigError(f'model.multimodal.image_token_id={mm.image_token_id} is not an id of the '
                     f'vocabulary (model.vocab_size={m.vocab_size}); use the tokenizer\'s '
                     'image token')
  if m.attention.kernel != 'xla' or context != 1:
    raise ConfigError(f'model.attention.kernel={m.attention.kernel!r}, mesh.context={context}: '
                     "an image's tokens attend each other both ways, which the xla kernel "
                     'masks on an unsplit sequence alone; set model.attention.kernel=xla and '
                     'mesh.context=1')
