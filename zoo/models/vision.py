"""Vision towers: images -> patch tokens -> the zoo's encoder blocks -> pooled states
(ViT, Dosovitskiy et al. 2020; SigLIP, Zhai et al. 2023).

A patch embedding is a convolution whose stride is its size, so it is one matmul over each
patch's pixels: its kernel [P, D] is a convolution's [patch, patch, C, D] flattened (an
imported Conv2d weight [D, C, patch, patch] is a transpose and a reshape). The blocks are
`transformer.stack`'s (the zoo's attention kernels and sharding rules), every patch
attending every other, pre-norm as ViT's. ImageModel is the vision family's model: the
tower as model.vision configures it, over a batch's pixels.

Glossary: B batch, Y image rows, X image columns, C channels, P pixels of one patch
(patch x patch x C), L patches (+ the class token), D d_model, H heads, K head dim.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from zoo.kernels import mask as mask_lib
from zoo.models import attention
from zoo.models import dims
from zoo.models import layers
from zoo.models import lora
from zoo.models import transformer

# the class token's state, attention pooling, the mean; 'none': the patches' states alone
# (a decoder's tower: zoo/models/multimodal.py)
POOLED = ('token', 'map', 'gap')
POOLS = POOLED + ('none',)
POSITIONS = ('learned', 'sincos2d')


def patches(images_BYXC, patch):
  """[B, Y, X, C] -> [B, L, P]: patches row by row, each patch's pixels row by row with
  their channels innermost (as a [patch, patch, C, D] kernel flattened reads them)."""
  B, Y, X, C = images_BYXC.shape
  rows, cols = Y // patch, X // patch
  grid = images_BYXC.reshape(B, rows, patch, cols, patch, C).transpose(0, 1, 3, 2, 4, 5)
  return grid.reshape(B, rows * cols, patch * patch * C)


def sincos_2d(rows, cols, features, temperature=10_000.0):
  """Fixed 2D positions [rows x cols, features] (big_vision's ViT): a quarter of the
  features each for sin and cos of the column and of the row, at frequencies
  temperature^(-i / (features / 4 - 1))."""
  if features % 4:
    raise ValueError(f'sincos2d positions need d_model divisible by 4, got {features}')
  quarter = features // 4
  frequencies = 1.0 / temperature ** (np.arange(quarter) / max(quarter - 1, 1))
  row, col = np.mgrid[:rows, :cols]
  angle_row = row.reshape(-1, 1) * frequencies
  angle_col = col.reshape(-1, 1) * frequencies
  table = np.concatenate([np.sin(angle_col), np.cos(angle_col), np.sin(angle_row),
                          np.cos(angle_row)], axis=1)
  return jnp.asarray(table, jnp.float32)


def resize_positions(table_LD, grid):
  """A learned [rows x cols, D] table trained at one square grid, resized to `grid`
  (rows, cols) for another resolution, as an image of D channels is."""
  side = int(round(table_LD.shape[0] ** 0.5))
  if side * side != table_LD.shape[0]:
    raise ValueError(f'a position table of {table_LD.shape[0]} rows is not a square grid')
  if (side, side) == tuple(grid):
    return table_LD
  square = table_LD.reshape(side, side, -1).astype(jnp.float32)
  resized = jax.image.resize(square, (*grid, square.shape[-1]), method='bilinear')
  return resized.reshape(grid[0] * grid[1], -1).astype(table_LD.dtype)


class AttentionPool(nn.Module):
  """SigLIP's multi-head attention pooling (MAP): a learned probe attends over every patch,
  then a residual MLP after a norm -> [B, D]."""
  config: Any

  @nn.compact
  def __call__(self, x_BLD):
    m = self.config
    probe_11D = self.param('probe', nn.with_logical_partitioning(
        nn.initializers.xavier_uniform(), (None, None, 'embed')), (1, 1, m.d_model),
                           jnp.dtype(m.param_dtype))
    probe_B1D = jnp.broadcast_to(probe_11D, (x_BLD.shape[0], 1, m.d_model)).astype(x_BLD.dtype)
    pooled_B1D = attention.MultiHeadAttention(
        m.num_heads, m.num_heads, dims.head_dim(m), use_bias=True,
        kernel='xla', name='attention', **transformer.dtypes(m))(probe_B1D, x_BLD)
    h_B1D = layers.Norm(m.norm, m.norm_eps, name='norm', **transformer.dtypes(m))(pooled_B1D)
    pooled_B1D += layers.MLP(m.mlp_dim, m.activation, use_bias=True, name='mlp',
                             **transformer.dtypes(m))(h_B1D)
    return pooled_B1D[:, 0]


class VisionTower(nn.Module):
  """images [B, Y, X, C] (normalised pixels) -> {'hidden': [B, L, D] after the final norm,
  'pooled': [B, D] (unless pool 'none')}, and with model.num_labels 'label_logits'
  [B, num_labels]. `image_size` is the resolution the learned table is made for (with a
  row for the class token, as ViT's); another size resizes the table's grid and recomputes
  fixed positions."""
  config: Any  # frozen model config: the blocks' fields (d_model, heads, mlp, norm, ...)
  image_size: int = 224
  patch_size: int = 16
  position: str = 'learned'  # POSITIONS
  pool: str = 'token'  # POOLS
  adapters: lora.Spec = lora.Spec()

  @nn.compact
  def __call__(self, images_BYXC, train=False):
    m = self.config
    if self.pool not in POOLS or self.position not in POSITIONS:
      raise ValueError(f'pool={self.pool!r}, position={self.position!r}: the tower pools by '
                       f'one of {POOLS} with positions one of {POSITIONS}')
    B, Y, X, _ = images_BYXC.shape
    if min(Y, X) < self.patch_size:
      raise ValueError(f'images of {Y} x {X} pixels are smaller than one patch of '
                       f'{self.patch_size}; resize them to a multiple of it')
    grid = (Y // self.patch_size, X // self.patch_size)
    # the rows and columns past the last whole patch are dropped, as a convolution whose
    # stride is its size drops them (SigLIP so400m/14 at 384: 27 patches, 6 pixels left)
    images_BYXC = images_BYXC[:, :grid[0] * self.patch_size, :grid[1] * self.patch_size]
    x_BLD = layers.DenseGeneral(m.d_model, (None, 'embed'), use_bias=True, name='patch_embed',
                                **transformer.dtypes(m))(patches(images_BYXC, self.patch_size))
    if self.position == 'sincos2d':  # the patches' fixed positions; a class token has none
      x_BLD += sincos_2d(*grid, m.d_model).astype(x_BLD.dtype)[None]
    tokens = int(self.pool == 'token')
    if tokens:
      token_11D = self.param('class_token', nn.with_logical_partitioning(
          nn.initializers.zeros, (None, None, 'embed')), (1, 1, m.d_model),
                             jnp.dtype(m.param_dtype))
      x_BLD = jnp.concatenate([jnp.broadcast_to(token_11D, (B, 1, m.d_model)).astype(
          x_BLD.dtype), x_BLD], axis=1)
    if self.position == 'learned':
      x_BLD += self._learned_positions(grid, tokens).astype(x_BLD.dtype)[None]
    x_BLD = nn.Dropout(m.dropout_rate)(x_BLD, deterministic=not train)
    x_BLD = nn.with_logical_constraint(x_BLD, ('batch', 'length', 'activation_embed'))
    everyone_BL = jnp.ones(x_BLD.shape[:2], jnp.int32)
    positions_BL = jnp.broadcast_to(jnp.arange(x_BLD.shape[1]), x_BLD.shape[:2])
    x_BLD, _ = transformer.stack(m, train, m.num_layers, 'layers', self, self.adapters)(
        x_BLD, mask_lib.Mask(everyone_BL, everyone_BL), positions_BL)
    x_BLD = layers.Norm(m.norm, m.norm_eps, use_bias=m.use_bias, name='final_norm',
                        **transformer.dtypes(m))(x_BLD)
    if self.pool == 'none':
      return {'hidden': x_BLD}
    pooled_BD = {'token': lambda: x_BLD[:, 0], 'gap': lambda: jnp.mean(x_BLD, axis=1),
                 'map': lambda: AttentionPool(m, name='pool')(x_BLD)}[self.pool]()
    outputs = {'hidden': x_BLD, 'pooled': pooled_BD}
    if m.num_labels:
      outputs['label_logits'] = transformer.label_head(m, pooled_BD, use_bias=True)
    return outputs

  def _learned_positions(self, grid, tokens):
    """[tokens + patches, D]: a row for the class token (if any), then the patch grid's
    table trained at image_size, resized to `grid`."""
    m = self.config
    trained = self.image_size // self.patch_size
    table_LD = self.param('position_embed', nn.with_logical_partitioning(
        nn.initializers.normal(0.02), (None, 'embed')), (tokens + trained * trained,
                                                         m.d_model), jnp.dtype(m.param_dtype))
    return jnp.concatenate([table_LD[:tokens], resize_positions(table_LD[tokens:], grid)])


class ImageModel(nn.Module):
  """The vision family's model: batch {'pixels': [B, Y, X, C]} -> the tower's outputs,
  the tower as model.vision says (its resolution, patches, positions and pooling)."""
  config: Any
  adapters: lora.Spec = lora.Spec()

  @nn.compact
  def __call__(self, batch, train=False, head=True):
    del head  # the label head is the tower's; there is no vocabulary to project to
    v = self.config.vision
    return VisionTower(self.config, v.image_size, v.patch_size, v.position, v.pool,
                       self.adapters, name='tower')(batch['pixels'], train)
