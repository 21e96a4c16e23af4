"""Two towers for image-text training (SigLIP, Zhai et al. 2023; CLIP, Radford et al.
2021): the vision tower (zoo/models/vision.py) pools an image, a text tower pools a text,
and each pooled state, L2 normalised, is that input's embedding; a pair's logit is
e^t <image, text> + b with the learned log temperature t and bias b.

SigLIP's text tower: token and learned position tables, the zoo's encoder blocks (every
position attending every other, padding included, as the released model was trained on
texts padded to a fixed length), a final norm, and the last position's state through a
linear head. Both towers take the model's shape fields (SigLIP's published towers have one
width, depth and head count each).

Glossary: B batch, T text length, D d_model, Y image rows, X image columns, C channels.
"""

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.kernels import mask as mask_lib
from zoo.models import layers
from zoo.models import lora
from zoo.models import transformer
from zoo.models import vision

INITIAL_TEMPERATURE, INITIAL_BIAS = 10.0, -10.0  # SigLIP's t' = log 10, b = -10 (Sec. 3.2)


def normalised(x_BD):
  """x / |x| in float32, per row."""
  x_BD = x_BD.astype(jnp.float32)
  return x_BD * jax.lax.rsqrt(jnp.sum(jnp.square(x_BD), axis=-1, keepdims=True))


class TextTower(nn.Module):
  """ids [B, T] -> the last position's final state through the head: [B, D]."""
  config: Any
  adapters: lora.Spec = lora.Spec()

  @nn.compact
  def __call__(self, ids_BT, train=False):
    m = self.config
    positions_BT = jnp.broadcast_to(jnp.arange(ids_BT.shape[1]), ids_BT.shape)
    x_BTD = layers.Embed(m.vocab_size, m.d_model, init_std=m.embed_init_std,
                         name='token_embed', **transformer.dtypes(m))(ids_BT)
    x_BTD = transformer.Embeddings(m, name='embeddings')(x_BTD, positions_BT,
                                                         jnp.zeros_like(ids_BT), train)
    everyone_BT = jnp.ones_like(ids_BT)
    x_BTD, _ = transformer.stack(m, train, m.num_layers, 'layers', self, self.adapters)(
        x_BTD, mask_lib.Mask(everyone_BT, everyone_BT), positions_BT)
    x_BTD = layers.Norm(m.norm, m.norm_eps, use_bias=m.use_bias, name='final_norm',
                        **transformer.dtypes(m))(x_BTD)
    return layers.DenseGeneral(m.d_model, ('embed', 'mlp'), use_bias=True,
                               init_std=m.kernel_init_std or 0.02, name='head',
                               **transformer.dtypes(m))(x_BTD[:, -1])


class ImageTextModel(nn.Module):
  """batch {'pixels': [B, Y, X, C], 'inputs': [B, T]} -> {'image_embeds', 'text_embeds':
  [B, D] float32 of unit length, 'log_temperature', 'bias': the learned scalars}."""
  config: Any
  adapters: lora.Spec = lora.Spec()

  @nn.compact
  def __call__(self, batch, train=False, head=True):
    del head  # no vocabulary to project to
    m = self.config
    v = m.vision
    image_BD = vision.VisionTower(m, v.image_size, v.patch_size, v.position, v.pool,
                                  self.adapters, name='vision')(batch['pixels'], train)['pooled']
    text_BD = TextTower(m, self.adapters, name='text')(batch['inputs'], train)
    scalar = lambda value: nn.with_logical_partitioning(nn.initializers.constant(value), ())
    return {'image_embeds': normalised(image_BD), 'text_embeds': normalised(text_BD),
            'log_temperature': self.param('log_temperature', scalar(math.log(
                INITIAL_TEMPERATURE)), (), jnp.float32),
            'bias': self.param('bias', scalar(INITIAL_BIAS), (), jnp.float32)}
