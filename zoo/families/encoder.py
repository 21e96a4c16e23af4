"""The encoder-only family (BERT): masked language modelling, with a next-sentence head.

Glossary: B batch, L length, V vocab.
"""

import jax.numpy as jnp
import numpy as np

from zoo.families import decoder
from zoo.families import loss as loss_lib
from zoo.families import tasks
from zoo.models import transformer

NAME = 'encoder'
OBJECTIVES = ('mlm',)
LAYER_FIELDS = ('num_layers',)
MODEL_INPUTS = ('inputs', 'token_type_ids')
POSITIONS = ('learned', 'sinusoidal', 'rope', 'none')
BLOCKS = ('sequential', 'parallel')
SLIDING_WINDOW = False
TWO_SIDED_WINDOW = False
ATTENTION = 'bidirectional'
LATENT_ATTENTION = PREDICTION_MODULES = SEPARATE_ENCODER_EMBED = False
CONTEXT_CHUNKS = 1  # bidirectional: each device's chunk as it falls
TASKS = ('classification', 'regression')  # data.task.kind values it fine-tunes on
PROMPT_JOINT = None
PENALTIES_COUNT_PROMPT = None
INPUT_SPECIALS = ('bos', 'eos')  # around a text it reads: [CLS] text [SEP]
LABEL_SPECIALS = INPUT_SPECIALS  # a classifier's row
LABEL_TOKEN = 'first'  # the label head reads the pooled [CLS]
# BERT fills in masked tokens; it does not generate (--mode=generate says so).
tokenize_prompts = start_generation = None


def build(model_config, adapters):
  """-> the Linen module: batch -> {'logits': MLM logits [B, L, V], 'nsp_logits': [B, 2]
  with model.nsp_head}."""
  return transformer.Encoder(model_config, adapters)


def batch_spec(data_config, batch_size):
  """mlm: one sentence pair per row ([CLS] A [SEP] B [SEP]), padding is segment 0; a task:
  one example per row with token types and its label."""
  if data_config.task.kind:
    return tasks.headed_spec(data_config, batch_size, per_token=('token_type_ids',))
  spec = decoder.batch_spec(data_config, batch_size)
  int32 = np.dtype(np.int32)
  spec.update(token_type_ids=((batch_size, data_config.seq_len), int32),
              next_sentence_labels=((batch_size,), int32))
  return spec


def counts(batch):
  """The batch's loss normalisers: rows, MLM target tokens (a task's: real rows), real
  (non-padding) rows."""
  if 'labels' in batch:
    return tasks.headed_counts(batch)
  return {**decoder.counts(batch),
          'real_rows': jnp.sum((batch['segment_ids'][:, 0] > 0).astype(jnp.float32))}


def loss(model, config, variables, batch, rng=None, whole=None, step=None):
  """MLM cross-entropy over the chosen tokens, + the next-sentence loss (padding rows
  excluded) with model.nsp_head, + z-loss and MoE terms; whole: the counts of the batch
  this one is a microbatch of. A task: the label head's loss (zoo/families/tasks.py)."""
  del step  # the train step: only a decoder's multi-token prediction schedule reads it
  whole = whole or counts(batch)
  if 'labels' in batch:
    return tasks.label_loss(model, config, variables, batch, rng, whole)
  chunk = loss_lib.chunk_len(config, batch['targets'].shape[1])
  applied = loss_lib.apply(model, variables, batch, rng, head=not chunk)
  outputs, moe, state, max_logits = (applied.outputs, applied.moe, applied.state,
                                     applied.max_logits)
  total = loss_lib.token_loss(outputs['hidden' if chunk else 'logits'], batch['targets'],
                              batch['loss_weights'], config, variables, whole['tokens'], chunk)
  if 'nsp_logits' in outputs:
    real_B = (batch['segment_ids'][:, 0] > 0).astype(jnp.float32)
    nsp_nll, _, _ = loss_lib.cross_entropy(
        outputs['nsp_logits'][:, None], batch['next_sentence_labels'][:, None], real_B[:, None])
    total = loss_lib.add(total, 'nsp_loss', nsp_nll / jnp.maximum(whole['real_rows'], 1.0))
  total = loss_lib.with_max_logits(total, max_logits)
  return loss_lib.with_moe(total, moe, state, config.model.moe,
                           batch['targets'].shape[0] / whole['rows'])


def task_example(kind, example, tokenizer, data_config):
  """A classification or regression example as BERT reads it: [CLS] text [SEP] (text_pair
  [SEP]), token types 0 then 1, the longer text cut first to fit data.seq_len."""
  del kind
  pair = 'text_pair' in example
  first, second = tasks.fit_pair(example['text'], example.get('text_pair', ()),
                                 data_config.seq_len - 2 - pair)
  cls, sep = tokenizer.bos_id, tokenizer.eos_id
  ids = [cls, *first, sep, *((*second, sep) if pair else ())]
  types = [0] * (len(first) + 2) + [1] * (len(ids) - len(first) - 2)
  return tasks.headed_row(ids, example['label'], data_config.task.kind, data_config.seq_len,
                          token_type_ids=types)


def kv_cache_layers(m):
  del m
  return 0  # nothing is decoded


def hf_model_type(m):
  del m
  return 'bert'
