"""The encoder-only family (BERT): masked language modelling, with a next-sentence head.

Glossary: B batch, L length, V vocab.
"""

import jax.numpy as jnp
import numpy as np

from zoo.families import decoder
from zoo.families import loss as loss_lib
from zoo.models import transformer

NAME = 'encoder'
OBJECTIVES = ('mlm',)
LAYER_FIELDS = ('num_layers',)
MODEL_INPUTS = ('inputs', 'token_type_ids')
POSITIONS = ('learned', 'sinusoidal', 'rope', 'none')
BLOCKS = ('sequential', 'parallel')
SLIDING_WINDOW = False
PROMPT_JOINT = None
# BERT fills in masked tokens; it does not generate (--mode=generate says so).
tokenize_prompts = start_generation = None


def build(model_config):
  """-> the Linen module: batch -> {'logits': MLM logits [B, L, V], 'nsp_logits': [B, 2]
  with model.nsp_head}."""
  return transformer.Encoder(model_config)


def batch_spec(data_config, batch_size):
  """mlm: one sentence pair per row ([CLS] A [SEP] B [SEP]), padding is segment 0."""
  spec = decoder.batch_spec(data_config, batch_size)
  int32 = np.dtype(np.int32)
  spec.update(token_type_ids=((batch_size, data_config.seq_len), int32),
              next_sentence_labels=((batch_size,), int32))
  return spec


def loss(model, config, variables, batch, rng=None):
  """MLM cross-entropy over the chosen tokens, + the next-sentence loss (padding rows
  excluded) with model.nsp_head, + z-loss and MoE terms."""
  outputs, moe, state = loss_lib.apply(model, variables, batch, rng)
  total = loss_lib.token_loss(outputs['logits'], batch['targets'], batch['loss_weights'],
                              config.train.z_loss)
  if 'nsp_logits' in outputs:
    real_B = (batch['segment_ids'][:, 0] > 0).astype(jnp.float32)
    nsp_nll, _, nsp_weight = loss_lib.cross_entropy(
        outputs['nsp_logits'][:, None], batch['next_sentence_labels'][:, None], real_B[:, None])
    total = loss_lib.add(total, 'nsp_loss', nsp_nll / jnp.maximum(nsp_weight, 1.0))
  return loss_lib.with_moe(total, moe, state, config.model.moe)


def kv_cache_layers(m):
  del m
  return 0  # nothing is decoded


def hf_model_type(m):
  del m
  return 'bert'
