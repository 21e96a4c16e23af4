"""The encoder-decoder family (T5 v1.0/v1.1, mT5, Switch): span corruption, text to text.

Glossary: B batch, L decoder length, P prompt (encoder) length, S cache slots, N new
tokens, D d_model, V vocab.
"""

import jax.numpy as jnp
import numpy as np

from zoo.families import decoding
from zoo.families import loss as loss_lib
from zoo.models import encoder_decoder

NAME = 'encoder_decoder'
OBJECTIVES = ('span_corruption',)
LAYER_FIELDS = ('num_encoder_layers', 'num_decoder_layers')
MODEL_INPUTS = ('encoder_inputs', 'decoder_inputs')
POSITIONS = ('t5_bias', 'sinusoidal', 'rope', 'none')
BLOCKS = ('sequential',)  # a parallel block has no place for cross-attention
SLIDING_WINDOW = True  # the encoder's two-sided, the decoder's causal (T5Gemma)
TWO_SIDED_WINDOW = True
# a bidirectional encoder over the inputs, a causal decoder over the targets with
# cross-attention over the inputs (zoo/counting.py counts each on its own tokens)
ATTENTION = 'cross'
LATENT_ATTENTION = PREDICTION_MODULES = False
SEPARATE_ENCODER_EMBED = True  # model.separate_encoder_embed: its own table (T5Gemma)
CONTEXT_CHUNKS = 0  # cross-attention over a split sequence is not built
# data.task.kind values it fine-tunes on (T5: every task as text; a conversation's last
# assistant turn as the targets of the turns before it, as FLAN's mixtures ran)
TASKS = ('text_to_text', 'chat')
PROMPT_JOINT = '\n=> '  # an answer, not a continuation
PENALTIES_COUNT_PROMPT = False  # the prompt is the encoder's input, not the text written
INPUT_SPECIALS = ('eos',)  # around a text it reads: text [EOS]
LABEL_SPECIALS = LABEL_TOKEN = None  # no label head: T5 writes its answers


def build(model_config, adapters):
  """-> the Linen module with encode() and decode(); __call__ = decode(encode())."""
  return encoder_decoder.EncoderDecoder(model_config, adapters)


def batch_spec(data_config, batch_size):
  """span_corruption (and a text_to_text task): examples packed whole (first-fit), encoder
  rows data.seq_len long, decoder rows data.target_seq_len."""
  inputs, targets = (batch_size, data_config.seq_len), (batch_size, data_config.target_seq_len)
  int32, float32 = np.dtype(np.int32), np.dtype(np.float32)
  return {'encoder_inputs': (inputs, int32), 'encoder_segment_ids': (inputs, int32),
          'encoder_positions': (inputs, int32), 'decoder_inputs': (targets, int32),
          'decoder_targets': (targets, int32), 'decoder_segment_ids': (targets, int32),
          'decoder_positions': (targets, int32), 'decoder_loss_weights': (targets, float32)}


def counts(batch):
  """The batch's loss normalisers: rows and weighted decoder target tokens."""
  return {'rows': batch['decoder_targets'].shape[0],
          'tokens': jnp.sum(batch['decoder_loss_weights'])}


def loss(model, config, variables, batch, rng=None, whole=None, step=None):
  """Cross-entropy of the decoder targets (+ z-loss, + MoE terms); whole: the counts of the
  batch this one is a microbatch of."""
  del step  # the train step: only a decoder's multi-token prediction schedule reads it
  whole = whole or counts(batch)
  targets_BL = batch['decoder_targets']
  chunk = loss_lib.chunk_len(config, targets_BL.shape[1])
  applied = loss_lib.apply(model, variables, batch, rng, head=not chunk)
  outputs, moe, state, max_logits = (applied.outputs, applied.moe, applied.state,
                                     applied.max_logits)
  total = loss_lib.token_loss(outputs, targets_BL, batch['decoder_loss_weights'], config,
                              variables, whole['tokens'], chunk)
  total = loss_lib.with_max_logits(total, max_logits)
  return loss_lib.with_moe(total, moe, state, config.model.moe,
                           targets_BL.shape[0] / whole['rows'])


def task_example(kind, example, tokenizer, data_config):
  """A text_to_text example: inputs + EOS to the encoder, targets + EOS decoded (from id 0,
  as in pretraining), each cut to its length (data.seq_len, data.target_seq_len). chat:
  the rendered conversation up to its last assistant turn is the inputs (cut from the
  left), that turn's tokens the targets."""
  d, eos = data_config, tokenizer.eos_id
  if kind == 'chat':
    example = _last_turn(example['ids'], example['mask'])
    example['inputs'] = example['inputs'][max(len(example['inputs']) - d.seq_len + 1, 0):]
  inputs = np.asarray([*example['inputs'][:d.seq_len - 1], eos], np.int32)
  targets = np.asarray([*example['targets'][:d.target_seq_len - 1], eos], np.int32)
  return {'encoder_inputs': inputs, 'decoder_targets': targets,
          'decoder_inputs': np.concatenate([[0], targets[:-1]]).astype(np.int32)}


def _last_turn(ids, mask):
  """-> {'inputs': the ids before the mask's last run of ones, 'targets': that run}."""
  marked = np.flatnonzero(mask > 0)
  end = marked[-1] + 1
  start = end - np.argmin(np.concatenate([mask[:end][::-1] > 0, [False]]))
  return {'inputs': ids[:start], 'targets': ids[start:end]}


def kv_cache_layers(m):
  # a generated token adds keys and values to each decoder layer's self-attention; the
  # cross-attention's come from the encoder output, once per input token
  return m.num_decoder_layers


def hf_model_type(m):
  if m.sandwich_norm:  # Gemma 2's blocks
    return 't5gemma'
  return 'umt5' if m.relative_bias_per_layer else 't5'


# ---------------------------------------------------------------------- generation

def tokenize_prompts(config, tokenizer, prompts, fit=False):
  """Prompts as encoder inputs (pieces + EOS), right-padded -> (ids, segment ids) [B, P].
  fit: each cut to data.seq_len, as a task's training rows are."""
  keep = config.data.seq_len - 1 if fit else None
  rows = [[*p[:keep], tokenizer.eos_id] for p in tokenizer.encode(prompts)]
  return decoding.right_pad(rows, tokenizer.pad_id)


def start_generation(model, variables, ids_BP, segments_BP, max_new_tokens):
  """Encoder inputs (padding anywhere, segment 0) encoded once, the start token decoded ->
  (first logits [B, V], cache, step(token, i, cache))."""
  B, N = ids_BP.shape[0], max_new_tokens
  encoder_batch = {'encoder_inputs': ids_BP, 'encoder_segment_ids': segments_BP}
  Model = encoder_decoder.EncoderDecoder
  encoded_BPD = model.apply(variables, encoder_batch, method=Model.encode)
  # cache slots: the start token, then each new token fed back (the last one unused)
  kv_segments_BS = jnp.ones((B, N + 1), jnp.int32)
  kv_positions_BS = jnp.broadcast_to(jnp.arange(N + 1, dtype=jnp.int32), (B, N + 1))

  def batch_at(token_B, i):
    return {**encoder_batch, 'decoder_inputs': token_B[:, None],
            'decoder_segment_ids': jnp.ones((B, 1), jnp.int32),
            'decoder_positions': jnp.full((B, 1), i, jnp.int32),
            'decoder_kv_segment_ids': kv_segments_BS, 'decoder_kv_positions': kv_positions_BS}

  def run(cache, token_B, i):
    logits_BLV, mutated = model.apply({**variables, 'cache': cache}, encoded_BPD,
                                      batch_at(token_B, i), method=Model.decode,
                                      mutable=['cache'])
    return logits_BLV[:, -1], mutated['cache']

  start_B = jnp.zeros((B,), jnp.int32)  # decoding starts from id 0, as in training
  cache = decoding.empty_cache(model, (encoded_BPD, batch_at(start_B, 0)), method=Model.decode)
  logits_BV, cache = run(cache, start_B, 0)
  return logits_BV, cache, lambda token_B, i, cache: run(cache, token_B, i + 1)
