"""Models: `build(config.model)` gives the Linen module for the configured family."""

import jax.numpy as jnp
import ml_collections

from zoo.models import encoder_decoder
from zoo.models import transformer

FAMILY_MODULES = {'decoder': transformer.Decoder, 'encoder': transformer.Encoder,
                  'encoder_decoder': encoder_decoder.EncoderDecoder}


def build(model_config):
  """model config -> flax.linen.Module taking the batch dict and returning float32 logits
  (the encoder: a dict with 'logits' and, with model.nsp_head, 'nsp_logits')."""
  return FAMILY_MODULES[model_config.family](ml_collections.FrozenConfigDict(model_config))


def example_batch(model_config, batch_size, seq_len):
  """All-zero int32 inputs with the keys the family reads; for init and shape tracing."""
  keys = {'decoder': ('inputs',), 'encoder': ('inputs', 'token_type_ids'),
          'encoder_decoder': ('encoder_inputs', 'decoder_inputs')}[model_config.family]
  return {key: jnp.zeros((batch_size, seq_len), jnp.int32) for key in keys}
