"""Encoder-decoder (T5): `encode()`, `decode()`, and `__call__` = decode(encode()).

Glossary: B batch, L decoder length, S encoder length, D d_model, H heads, V vocab.
With tied embeddings (T5 v1.0) the decoder output is scaled by d_model^-0.5
(model.scale_tied_logits) before the shared table; untied (v1.1) heads are a dense layer.
model.separate_encoder_embed (T5Gemma): the encoder reads its own token table, the decoder
(and a tied head) the other. Gemma 2's blocks (T5Gemma) bring their switches: patterned
local/global layers whose window is two-sided in the encoder (|q - k| <= window) and causal
in the decoder, soft-capping, sandwich norms (cross-attention's too), embed_scale.
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from zoo import kernels
from zoo.kernels import bias as bias_lib
from zoo.kernels import mask as mask_lib
from zoo.models import attention
from zoo.models import head as head_lib
from zoo.models import layers
from zoo.models import lora
from zoo.models import transformer


class _Stack(nn.Module):
  """Embedded tokens -> a stack of blocks -> final norm. T5's relative bias: one table for
  the stack, or (model.relative_bias_per_layer, umT5) a PositionBias without a table that
  each Block completes with its own."""
  config: Any
  decoder: bool
  adapters: lora.Spec = lora.Spec()  # train.lora's (zoo.families.build)

  @nn.compact
  def __call__(self, x_BLD, segment_ids_BL, positions_BL, train, encoded_BSD=None,
               encoder_segment_ids_BS=None, cache_slots=None):
    """cache_slots: (segment ids, positions) [B, S] of the decoder's cache when decoding."""
    m = self.config
    kv_segment_ids_BS, kv_positions_BS = cache_slots or (segment_ids_BL, positions_BL)
    mask = mask_lib.Mask(segment_ids_BL, kv_segment_ids_BS, causal=self.decoder,
                          window=m.attention.window, kv_cache=cache_slots is not None)
    bias = None
    if m.position == 't5_bias' and m.relative_bias_per_layer:  # each Block adds its table
      bias = bias_lib.PositionBias(positions_BL, kv_positions_BS, None,
                                   bidirectional=not self.decoder,
                                   max_distance=m.relative_max_distance)
    elif m.position == 't5_bias':
      bias = kernels.prepare_bias(m.attention.kernel, attention.RelativePositionBias(
          m.num_heads, bidirectional=not self.decoder, num_buckets=m.relative_buckets,
          max_distance=m.relative_max_distance, name='relative_bias')(
              positions_BL, kv_positions_BS), jnp.dtype(m.dtype), cache_slots is not None)
    cross_mask = None
    if encoded_BSD is not None:
      cross_mask = mask_lib.Mask(segment_ids_BL, encoder_segment_ids_BS)
    x_BLD = nn.Dropout(m.dropout_rate)(x_BLD, deterministic=not train)
    num_layers = m.num_decoder_layers if self.decoder else m.num_encoder_layers
    x_BLD, _ = transformer.stack(m, train, num_layers, 'layers', self, self.adapters)(
        x_BLD, mask, positions_BL, bias, encoded_BSD, cross_mask)
    if m.norm_position == 'pre':
      x_BLD = layers.Norm(m.norm, m.norm_eps, use_bias=m.use_bias, name='final_norm',
                          **transformer.dtypes(m))(x_BLD)
    return nn.Dropout(m.dropout_rate)(x_BLD, deterministic=not train)


class EncoderDecoder(nn.Module):
  """batch {encoder_inputs, decoder_inputs, *_segment_ids?, *_positions?} -> logits [B,L,V]."""
  config: Any
  adapters: lora.Spec = lora.Spec()  # train.lora's (zoo.families.build)

  def setup(self):
    m = self.config
    self.token_embed = layers.Embed(m.vocab_size, m.d_model, init_std=m.embed_init_std,
                                    **transformer.dtypes(m))
    if m.separate_encoder_embed:
      self.encoder_embed = layers.Embed(m.vocab_size, m.d_model, init_std=m.embed_init_std,
                                        **transformer.dtypes(m))
    self.encoder = _Stack(m, decoder=False, adapters=self.adapters)
    self.decoder = _Stack(m, decoder=True, adapters=self.adapters)
    self.logits = head_lib.Head(m, use_bias=m.use_bias)

  def _embed(self, ids_BL, positions_BL, table):
    x_BLD = table(ids_BL)
    if self.config.embed_scale:  # Gemma: x sqrt(d_model), rounded to the compute dtype
      x_BLD = x_BLD * jnp.asarray(self.config.d_model ** 0.5, x_BLD.dtype)
    if self.config.position == 'sinusoidal':
      x_BLD += layers.sinusoidal(positions_BL, self.config.d_model).astype(x_BLD.dtype)
    return x_BLD

  def encode(self, batch, train=False):
    """-> encoder output [B, S, D]."""
    segment_ids_BS, positions_BS = transformer.default_positions(
        batch, 'encoder_inputs', 'encoder_positions', 'encoder_segment_ids')
    table = self.encoder_embed if self.config.separate_encoder_embed else self.token_embed
    return self.encoder(self._embed(batch['encoder_inputs'], positions_BS, table),
                        segment_ids_BS, positions_BS, train)

  def decode(self, encoded_BSD, batch, train=False, head=True):
    """Encoder output + decoder inputs -> float32 logits [B, L, V] (head=False: the hidden
    states [B, L, D] the vocabulary projection reads, zoo/models/head.py). Decoding
    (zoo/infer) adds decoder_kv_segment_ids and decoder_kv_positions [B, S] for the cache."""
    segment_ids_BL, positions_BL = transformer.default_positions(
        batch, 'decoder_inputs', 'decoder_positions', 'decoder_segment_ids')
    encoder_segment_ids_BS, _ = transformer.default_positions(
        batch, 'encoder_inputs', 'encoder_positions', 'encoder_segment_ids')
    cache_slots = None
    if 'decoder_kv_segment_ids' in batch:
      cache_slots = (batch['decoder_kv_segment_ids'], batch['decoder_kv_positions'])
    x_BLD = self.decoder(self._embed(batch['decoder_inputs'], positions_BL, self.token_embed),
                         segment_ids_BL, positions_BL, train, encoded_BSD,
                         encoder_segment_ids_BS, cache_slots)
    m = self.config
    if m.tie_embeddings and m.scale_tied_logits:
      x_BLD = x_BLD * m.d_model ** -0.5
    if not head:
      return x_BLD
    logits_BLV = self.logits(x_BLD, self.token_embed.embedding if m.tie_embeddings else None)
    return nn.with_logical_constraint(logits_BLV, ('batch', 'length', 'vocab'))

  def __call__(self, batch, train=False, head=True):
    return self.decode(self.encode(batch, train), batch, train, head)
