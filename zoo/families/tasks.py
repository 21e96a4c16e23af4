"""What fine-tuning tasks (zoo/data/task.py) make of the families' batches: rows holding one
example and its label for a label head (classification, regression), that head's loss,
and the row of a prompt and its completion.

Glossary: B batch, L length, K labels (1 for regression).
"""

import jax
import jax.numpy as jnp
import numpy as np

from zoo.families import loss as loss_lib


def label_dtype(kind):
  return np.dtype(np.float32 if kind == 'regression' else np.int32)


def headed_spec(data_config, batch_size, per_token=()):
  """One example per row (padding: segment 0) and a label per row."""
  rows = (batch_size, data_config.seq_len)
  int32 = np.dtype(np.int32)
  keys = ('inputs', 'segment_ids', 'positions', *per_token)
  return {**{key: (rows, int32) for key in keys},
          'labels': ((batch_size,), label_dtype(data_config.task.kind))}


def fit_pair(first, second, room):
  """Both texts cut, the longer first, until together they fit `room` ids."""
  first, second = list(first), list(second)
  while len(first) + len(second) > room:
    (first if len(first) >= len(second) else second).pop()
  return first, second


def headed_row(ids, label, kind, seq_len, **per_token):
  """A row of one example, padded to seq_len, with its label."""
  pad = lambda x: np.pad(np.asarray(x, np.int32), (0, seq_len - len(ids)))
  return {'inputs': pad(ids), 'segment_ids': pad(np.ones(len(ids))),
          'positions': pad(np.arange(len(ids))),
          **{key: pad(value) for key, value in per_token.items()},
          'labels': np.asarray(label, label_dtype(kind))}


def completion_row(prompt, completion, tokenizer, seq_len):
  """[BOS] prompt completion [EOS] as next-token inputs and targets, the loss weighting
  only the completion's targets (and its EOS); the prompt is cut from the left (the
  completion from the right) to fit seq_len."""
  head = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
  completion = list(completion)[:seq_len + 1 - len(head) - 1]
  prompt = list(prompt)[max(0, len(prompt) + len(head) + len(completion) + 1 - seq_len - 1):]
  tokens = np.asarray([*head, *prompt, *completion, tokenizer.eos_id], np.int32)
  weights = np.zeros(len(tokens) - 1, np.float32)
  weights[max(len(head) + len(prompt) - 1, 0):] = 1.0
  return {'inputs': tokens[:-1], 'targets': tokens[1:], 'loss_weights': weights}


def chat_row(ids, mask):
  """A tokenized conversation as next-token inputs and targets, the loss weighting the
  targets the template marks as the assistant's."""
  return {'inputs': ids[:-1], 'targets': ids[1:], 'loss_weights': mask[1:]}


def pair_spec(data_config, batch_size):
  """A preference pair per row: [B, 2, L] leaves, chosen at 0 and rejected at 1."""
  rows = (batch_size, 2, data_config.seq_len)
  int32, float32 = np.dtype(np.int32), np.dtype(np.float32)
  return {'inputs': (rows, int32), 'targets': (rows, int32), 'segment_ids': (rows, int32),
          'positions': (rows, int32), 'loss_weights': (rows, float32)}


def pair_row(example, seq_len):
  """A tokenized pair as two padded rows (segment 0 past each), stacked [2, L]."""
  def row(side):
    ids, mask = example[f'{side}_ids'], example[f'{side}_mask']
    pad = lambda x, dtype: np.pad(np.asarray(x, dtype), (0, seq_len - len(ids) + 1))
    return {'inputs': pad(ids[:-1], np.int32), 'targets': pad(ids[1:], np.int32),
            'segment_ids': pad(np.ones(len(ids) - 1), np.int32),
            'positions': pad(np.arange(len(ids) - 1), np.int32),
            'loss_weights': pad(mask[1:], np.float32)}
  chosen, rejected = row('chosen'), row('rejected')
  return {k: np.stack([chosen[k], rejected[k]]) for k in chosen}


def headed_counts(batch):
  """Rows and real (non-padding) rows: a label head's loss normalisers."""
  return {'rows': batch['labels'].shape[0],
          'tokens': jnp.sum((batch['segment_ids'][:, 0] > 0).astype(jnp.float32))}


def label_loss(model, config, variables, batch, rng, whole):
  """Cross-entropy of the class logits (classification) or squared error of the one
  predicted value (regression) over the real rows, + MoE terms; the predictions ride along
  for the eval metrics."""
  applied = loss_lib.apply(model, variables, batch, rng)
  outputs, moe, state = applied.outputs, applied.moe, applied.state
  logits_BK = outputs['label_logits']
  real_B = (batch['segment_ids'][:, 0] > 0).astype(jnp.float32)
  if config.data.task.kind == 'regression':
    predictions = logits_BK[:, 0]
    per_row_B = jnp.square(predictions - batch['labels'])
  else:
    predictions = logits_BK
    per_row_B = (jax.nn.logsumexp(logits_BK, axis=-1) -
                 jnp.take_along_axis(logits_BK, batch['labels'][:, None], axis=-1)[:, 0])
  summed, weight = jnp.sum(per_row_B * real_B), jnp.sum(real_B)
  mean = summed / jnp.maximum(whole['tokens'], 1.0)
  total = loss_lib.Loss(mean, {'loss': mean}, {}, summed, weight, predictions)
  return loss_lib.with_moe(total, moe, state, config.model.moe,
                           batch['labels'].shape[0] / whole['rows'])
