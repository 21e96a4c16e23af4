"""The decoder-only family (GPT-2/3, Llama, Mistral, Mixtral, PaLM): causal language models.

Everything the zoo needs to know about the family is here; zoo/families/__init__.py lists
this module under model.family='decoder'. The worked example for adding a family
(docs/families.md).

Glossary: B batch, L length, P prompt length, N new tokens, S cache slots, V vocab, D d_model.
"""

import jax
import jax.numpy as jnp
import numpy as np

from zoo.errors import ConfigError
from zoo.families import decoding
from zoo.families import distill
from zoo.families import loss as loss_lib
from zoo.families import tasks
from zoo.models import head as head_lib
from zoo.models import mtp as mtp_lib
from zoo.models import multimodal
from zoo.models import transformer

NAME = 'decoder'
OBJECTIVES = ('causal_lm',)  # data.objective values that train it
LAYER_FIELDS = ('num_layers',)  # model fields that count its blocks
MODEL_INPUTS = ('inputs',)  # batch keys init needs (the rest default)
# what its model builds (config validation rejects the rest, naming these)
POSITIONS = ('learned', 'sinusoidal', 'rope', 'alibi', 'none')
BLOCKS = ('sequential', 'parallel')
SLIDING_WINDOW = True
TWO_SIDED_WINDOW = False  # its windows are causal
ATTENTION = 'causal'  # its stack's (zoo/counting.py's FLOPs)
LATENT_ATTENTION = True  # model.mla (DeepSeek's latent attention) is built for it
PREDICTION_MODULES = True  # model.mtp (multi-token prediction) is built for it
SEPARATE_ENCODER_EMBED = False  # no encoder
# mesh.context: chunks of the sequence each device holds (causal: an early and a late one,
# balanced); 0 = the sequence cannot be split
CONTEXT_CHUNKS = 2
# data.task.kind values it fine-tunes on (text_to_text: inputs as the prompt, targets as
# the completion)
TASKS = ('classification', 'regression', 'prompt_completion', 'text_to_text', 'chat',
         'preference', 'prompts', 'image_text')
PROMPT_JOINT = ''  # printed between a prompt and its generated continuation
PENALTIES_COUNT_PROMPT = True  # generation penalties count the prompt: it is the text continued
INPUT_SPECIALS = ('bos',)  # around a text it reads: [BOS] text
LABEL_SPECIALS = ('bos', 'eos')  # a classifier's row: [BOS] text [EOS] (the head reads EOS)
LABEL_TOKEN = 'last'  # the label head reads each row's last real token


def build(model_config, adapters):
  """Frozen model config, train.lora's lora.Spec -> the Linen module (batch -> float32
  logits [B, L, V]); with model.multimodal, rows may hold images (Gemma 3)."""
  if multimodal.enabled(model_config):
    return multimodal.Decoder(model_config, adapters)
  return transformer.Decoder(model_config, adapters)


def example_batch(m, batch_size, seq_len):
  """Token ids; with model.multimodal, an image per row too (so init makes the tower)."""
  batch = {'inputs': jnp.zeros((batch_size, seq_len), jnp.int32)}
  if multimodal.enabled(m):
    v = m.vision
    batch['pixels'] = jnp.zeros((batch_size, 1, v.image_size, v.image_size, v.channels),
                                jnp.float32)
  return batch


def check(config):
  """model.multimodal's fields, as the tower and the mask need them (zoo/run/checks.py)."""
  m = config.model
  if multimodal.enabled(m):
    multimodal.check(m, config.mesh.context)
  elif config.data.task.kind == 'image_text':
    raise ConfigError("data.task.kind='image_text' puts an image in each row, which a text "
                      'decoder cannot read; set model.multimodal.tokens_per_image (a tower: '
                      'docs/vision.md)')


def batch_spec(data_config, batch_size):
  """{key: (shape, numpy dtype)} of a batch: what the pipeline yields (causal_lm: packed
  documents; a prompt_completion task: examples packed whole) and the train step takes;
  a classification or regression task: one example per row and its label."""
  if data_config.task.kind in ('classification', 'regression'):
    return tasks.headed_spec(data_config, batch_size)
  if data_config.task.kind == 'preference':
    return tasks.pair_spec(data_config, batch_size)
  rows = (batch_size, data_config.seq_len)
  int32, float32 = np.dtype(np.int32), np.dtype(np.float32)
  spec = {'inputs': (rows, int32), 'targets': (rows, int32), 'segment_ids': (rows, int32),
          'positions': (rows, int32), 'loss_weights': (rows, float32)}
  if data_config.task.kind == 'image_text':  # an image and its caption per row
    size = data_config.image_size
    spec['pixels'] = ((batch_size, 1, size, size, data_config.image_channels), float32)
  return spec


def counts(batch):
  """The batch's loss normalisers: rows and weighted target tokens (families/loss.py), or
  a label head's real rows."""
  if 'labels' in batch:
    return tasks.headed_counts(batch)
  return {'rows': batch['targets'].shape[0], 'tokens': jnp.sum(batch['loss_weights'])}


def loss(model, config, variables, batch, rng=None, whole=None, step=None, teacher=None):
  """Next-token cross-entropy over the weighted tokens (+ z-loss, + MoE terms, + multi-token
  prediction's); whole: the counts of the batch this one is a microbatch of; step: the
  train step (MTP's loss weight schedule; None: its first weight); teacher: (its model,
  its variables) to distil from (train.teacher). A task with a label head: its loss
  (zoo/families/tasks.py)."""
  whole = whole or counts(batch)
  if 'labels' in batch:
    return tasks.label_loss(model, config, variables, batch, rng, whole)
  chunk = loss_lib.chunk_len(config, batch['targets'].shape[1])
  applied = loss_lib.apply(model, variables, batch, rng, head=not chunk)
  total = loss_lib.token_loss(applied.outputs, batch['targets'], batch['loss_weights'], config,
                              variables, whole['tokens'], chunk)
  if teacher is not None:
    total = distill.with_teacher(total, applied.outputs, teacher, batch, config, variables,
                                 whole['tokens'], chunk)
  if applied.mtp:
    total = _with_mtp(total, applied.mtp, batch, config, variables, whole['tokens'], chunk,
                      step)
  if 'pixels' in batch and not chunk:
    total = total._replace(eval_sums=_captions_right(applied.outputs, batch))
  share = batch['targets'].shape[0] / whole['rows']
  total = loss_lib.with_indexer(loss_lib.with_max_logits(total, applied.max_logits),
                                applied.indexer, share)
  return loss_lib.with_moe(total, applied.moe, applied.state, config.model.moe, share)


def _captions_right(logits_BLV, batch):
  """Image rows whose every weighted target is the most likely token: greedy decoding
  after the image writes exactly that caption (and how many rows there are)."""
  weighted_BL = batch['loss_weights'] > 0
  right_BL = (jnp.argmax(logits_BLV, axis=-1) == batch['targets']) | ~weighted_BL
  rows_B = jnp.any(weighted_BL, axis=1)
  return {'caption_accuracy': jnp.sum(jnp.all(right_BL, axis=1) & rows_B),
          'caption_accuracy_count': jnp.sum(rows_B)}


def mtp_weight(config, step):
  """model.mtp's loss weight at train step `step` (None: the first)."""
  t = config.model.mtp
  if step is None:
    return t.loss_weight
  return jnp.where(step >= t.late_from * config.train.steps, t.late_loss_weight, t.loss_weight)


def _with_mtp(total, hidden, batch, config, variables, tokens, chunk, step):
  """`total` + weight / depth x the modules' token losses, each logged as mtp_loss_k (a
  module's loss over the whole batch's token count, as the main loss: DeepSeek-V3's 1/T)."""
  losses = []
  for k, h_BLD in enumerate(hidden, 1):
    weights_BL = (mtp_lib.shifted(batch['loss_weights'], k) *
                  (mtp_lib.segments_at(batch['segment_ids'], k) > 0))
    outputs = h_BLD if chunk else head_lib.project(config.model, variables['params'], h_BLD)
    losses.append(loss_lib.token_loss(outputs, mtp_lib.shifted(batch['targets'], k),
                                      weights_BL, config, variables, tokens, chunk))
  metrics = {**total.metrics,
             **{f'mtp_loss_{k}': part.metrics['loss'] for k, part in enumerate(losses, 1)}}
  mean = sum(part.total for part in losses) / len(losses)
  return total._replace(total=total.total + mtp_weight(config, step) * mean, metrics=metrics)


def task_example(kind, example, tokenizer, data_config):
  """A task example as the decoder reads it. classification, regression: [BOS] text [EOS]
  (text_pair [EOS]) in one row, the head reading the last token; prompt_completion (and
  text_to_text: inputs, targets): [BOS] prompt completion [EOS], the loss on the
  completion; chat: a rendered conversation, the loss on the assistant's tokens;
  preference: its chosen and rejected rows (zoo/families/tasks.py)."""
  if kind == 'chat':
    return tasks.chat_row(example['ids'], example['mask'])
  if kind == 'preference':
    return tasks.pair_row(example, data_config.seq_len)
  if kind == 'image_text':
    return _image_row(example, tokenizer, data_config)
  if kind in ('classification', 'regression'):
    pair = 'text_pair' in example
    head = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
    first, second = tasks.fit_pair(example['text'], example.get('text_pair', ()),
                                   data_config.seq_len - len(head) - 1 - pair)
    ids = [*head, *first, tokenizer.eos_id, *((*second, tokenizer.eos_id) if pair else ())]
    return tasks.headed_row(ids, example['label'], kind, data_config.seq_len)
  prompt, completion = ((example['inputs'], example['targets']) if kind == 'text_to_text'
                        else (example['prompt'], example['completion']))
  return tasks.completion_row(prompt, completion, tokenizer, data_config.seq_len)


def _image_row(example, tokenizer, data_config):
  """[BOS] the image's tokens, then its caption and [EOS], the loss on the caption and EOS,
  padded to data.seq_len (the caption cut to fit); the pixels [1, Y, X, C] beside."""
  L, T = data_config.seq_len, data_config.image_tokens
  head = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
  caption = list(example['text'])[:L + 1 - len(head) - T - 1]
  ids = np.asarray([*head, *[data_config.image_token_id] * T, *caption, tokenizer.eos_id],
                   np.int32)
  weights = np.zeros(len(ids) - 1, np.float32)
  weights[len(head) + T - 1:] = 1.0
  pad = lambda x: np.pad(x, (0, L - len(x)))
  return {'inputs': pad(ids[:-1]), 'targets': pad(ids[1:]), 'loss_weights': pad(weights),
          'segment_ids': pad(np.ones(len(ids) - 1, np.int32)),
          'positions': pad(np.arange(len(ids) - 1, dtype=np.int32)),
          'pixels': example['pixels'][None]}


def kv_cache_layers(m):
  """Layers whose keys and values a generated token adds to the cache (plan mode): all but
  the Gated DeltaNet ones, which keep a fixed-size state."""
  return m.num_layers - delta_layers(m)


def delta_layers(m):
  """How many layers are Gated DeltaNet ('D' in model.attention.pattern)."""
  pattern = m.attention.pattern
  return sum(pattern[i % len(pattern)] == 'D' for i in range(m.num_layers)) if pattern else 0


def hf_model_type(m):
  """The Hugging Face model_type this shape imports from and exports to (zoo/convert)."""
  if m.position == 'learned':
    return 'gpt2'
  if m.mla.kv_lora_rank:
    return 'deepseek_v32' if m.mla.index_heads else 'deepseek_v3'
  if m.attention.sinks:
    return 'gpt_oss'
  if m.moe.gate_input:
    return 'llama4_text'
  if 'D' in m.attention.pattern or m.attention.output_gate:
    return 'qwen3_next'
  if m.sandwich_norm:
    return ('gemma3' if multimodal.enabled(m) else 'gemma3_text') if m.qk_norm else 'gemma2'
  if m.qk_norm:
    return 'qwen3_moe' if m.moe.num_experts else 'qwen3'
  if m.moe.num_experts:
    return 'mixtral'
  return 'mistral' if m.attention.window else 'llama'


# ---------------------------------------------------------------------- generation

def tokenize_prompts(config, tokenizer, prompts, fit=False):
  """Prompts as in training (BOS + pieces), left-padded -> (ids, segment ids) [B, P].
  fit: each cut from the left to leave generate.max_new_tokens within data.seq_len, as a
  task's training rows cut their prompts."""
  rows = [list(tokenizer.document(p)[:-1]) for p in tokenizer.encode(prompts)]
  new_tokens, m = config.generate.max_new_tokens, config.model
  if fit:  # keep the BOS (if any) and the last pieces
    room, head = max(config.data.seq_len - new_tokens, 2), int(tokenizer.bos_id is not None)
    rows = [r[:head] + r[head:][len(r) - room:] if len(r) > room else r for r in rows]
  longest = max(len(r) for r in rows)
  if m.position == 'learned' and longest + new_tokens > m.max_length:
    raise ConfigError(f'the longest prompt ({longest} tokens) + generate.max_new_tokens='
                      f'{new_tokens} exceed model.max_length={m.max_length} of the learned '
                      'position table; lower generate.max_new_tokens or shorten the prompt')
  return decoding.left_pad(rows, tokenizer.pad_id)


def start_generation(model, variables, ids_BP, segments_BP, max_new_tokens):
  """Left-padded prompts prefilled -> (first logits [B, V], cache, step(token, i, cache))."""
  logits_BV, cache, feed = prefill(model, variables, ids_BP, segments_BP, max_new_tokens)
  return logits_BV, cache, lambda token_B, i, cache: last(feed(token_B[:, None], i, cache))


def last(logits_and_cache):
  logits_BLV, cache = logits_and_cache
  return logits_BLV[:, -1], cache


def prefill(model, variables, ids_BP, segments_BP, max_new_tokens, lookahead=0,
            hidden=False):
  """Left-padded prompts prefilled into a cache of P + max_new_tokens slots -> (first logits
  [B, V], cache, feed(ids [B, L], i, cache) -> (logits [B, L, V], cache)), where feed writes
  L new tokens from new-token slot i (the cache index must be at P + i). lookahead: slots a
  local layer's ring keeps beyond its window (speculative decoding's rollbacks). hidden (a
  model with model.mtp, whose module drafts from the final norm's output): feed returns
  that output [B, L, D] too, and the prefill returns (first logits, cache, feed, the
  prompt's outputs [B, P, D], (the cache's segment ids, positions) [B, S])."""
  B, P = ids_BP.shape
  S = P + max_new_tokens
  kv_segments_BS = jnp.concatenate([segments_BP, jnp.ones((B, max_new_tokens), jnp.int32)], 1)
  pads_B1 = P - jnp.sum(segments_BP > 0, axis=1, keepdims=True)
  kv_positions_BS = jnp.maximum(jnp.arange(S)[None] - pads_B1, 0).astype(jnp.int32)
  at = lambda a, start, length: jax.lax.dynamic_slice_in_dim(a, start, length, axis=1)

  def batch_at(ids_BL, start):
    return {'inputs': ids_BL, 'segment_ids': at(kv_segments_BS, start, ids_BL.shape[1]),
            'positions': at(kv_positions_BS, start, ids_BL.shape[1]),
            'kv_segment_ids': kv_segments_BS, 'kv_positions': kv_positions_BS,
            'lookahead': lookahead}

  def run(cache, ids_BL, start):
    logits_BLV, mutated = model.apply({**variables, 'cache': cache}, batch_at(ids_BL, start),
                                      mutable=['cache', 'mtp'] if hidden else ['cache'])
    if hidden:
      return logits_BLV, mutated['cache'], mutated['mtp']['hidden'][0]
    return logits_BLV, mutated['cache']

  empty = decoding.empty_cache(model, (batch_at(ids_BP, 0),))
  feed = lambda ids_BL, i, cache: run(cache, ids_BL, P + i)
  if hidden:
    logits_BPV, cache, hidden_BPD = run(empty, ids_BP, 0)
    return logits_BPV[:, -1], cache, feed, hidden_BPD, (kv_segments_BS, kv_positions_BS)
  logits_BV, cache = last(run(empty, ids_BP, 0))
  return logits_BV, cache, feed
