"""GRPO's host side, numpy only: which prompts a step samples, the prompts left-padded for the
sampler, the sampled tokens cut at the end of the turn and decoded, and the training rows
(prompt + completion, the loss on the completion) with their advantages.

Glossary: P prompts, G completions per prompt, B rows of a batch (P x G), N new tokens, L length.
"""

import numpy as np

from zoo.families import decoding
from zoo.infer import run as infer_run


def prompts_for(step, count, total, seed):
  """The indices of the `count` train prompts step `step` (from 1) samples: a fresh
  permutation of all `total` each epoch, so a resumed run samples what it would have."""
  start = (step - 1) * count
  out = []
  while len(out) < count:
    epoch, at = divmod(start + len(out), total)
    order = np.random.default_rng([seed, epoch]).permutation(total)
    out.extend(order[at:at + count - len(out)])
  return np.asarray(out)


def left_padded(prompt_ids, repeat, pad_id):
  """Each prompt `repeat` times in a row, left-padded -> (ids, segment ids) [B, P]."""
  rows = [list(p) for p in prompt_ids for _ in range(repeat)]
  return tuple(np.asarray(a) for a in decoding.left_pad(rows, pad_id))


def completions(tokens_BN, end_id):
  """Each row's new tokens up to and with the end-of-turn id (all N when it never came)."""
  out = []
  for row in np.asarray(tokens_BN):
    ends = np.flatnonzero(row == end_id)
    out.append(row[:ends[0] + 1] if len(ends) else row)
  return out


def texts(tokenizer, completions_, end_id, data_config):
  """The completions as text, the end-of-turn token left out (ids past the tokenizer as
  generation shows them: zoo/infer/run.py)."""
  return [infer_run.text(tokenizer, [t for t in c if t != end_id], data_config)
          for c in completions_]


def training_rows(prompt_ids, completions_, advantages_B, seq_len, group_size):
  """Rows [B, L] of prompt + completion as next-token inputs and targets, the loss weighting
  the completion's tokens, each row's advantage [B]."""
  B = len(completions_)
  batch = {k: np.zeros((B, seq_len), np.int32)
           for k in ('inputs', 'targets', 'segment_ids', 'positions')}
  batch['loss_weights'] = np.zeros((B, seq_len), np.float32)
  for b, completion in enumerate(completions_):
    prompt = prompt_ids[b // group_size]
    ids = np.concatenate([prompt, completion]).astype(np.int32)[:seq_len + 1]
    n = len(ids) - 1
    batch['inputs'][b, :n], batch['targets'][b, :n] = ids[:-1], ids[1:]
    batch['segment_ids'][b, :n], batch['positions'][b, :n] = 1, np.arange(n)
    batch['loss_weights'][b, len(prompt) - 1:n] = 1.0
  batch['advantages'] = np.asarray(advantages_B, np.float32)
  return batch
