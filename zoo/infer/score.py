"""Log-likelihood scoring of continuations under a decoder: what multiple-choice accuracy
reads, in the zoo's task eval (zoo/infer/task_eval.py) and in the lm-eval adapter
(zoo/infer/harness.py), so both score a choice the same way.

Rows run in batches of `batch_size` padded to a power-of-two length (one compile per
length); a context too long for the model (`max_length`, the length it trained at) keeps
its last tokens.

Glossary: B batch, L length, V vocab.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np

MIN_BUCKET = 16  # shortest padded length: fewer distinct compiles for short requests


def bucket(length, limit):
  return min(limit, max(MIN_BUCKET, 1 << (length - 1).bit_length()))


class Scorer:
  """A decoder's model and variables, scoring (context, continuation) id pairs."""

  def __init__(self, model, variables, max_length, batch_size=8):
    self.model, self.variables = model, variables
    self.max_length, self.batch_size = max_length, batch_size
    self._score_fn = jax.jit(self._score_batch)

  def _score_batch(self, variables, ids_BL, targets_BL, weights_BL):
    """-> (summed log-probability of the weighted targets [B], all of them argmax [B])."""
    segments_BL = (ids_BL >= 0).astype(jnp.int32)
    logits_BLV = self.model.apply(variables, {'inputs': jnp.maximum(ids_BL, 0),
                                              'segment_ids': segments_BL})
    log_probs_BLV = jax.nn.log_softmax(logits_BLV.astype(jnp.float32), axis=-1)
    target_BL = jnp.take_along_axis(log_probs_BLV, targets_BL[..., None], axis=-1)[..., 0]
    greedy_BL = jnp.argmax(logits_BLV, axis=-1) == targets_BL
    return (jnp.sum(target_BL * weights_BL, axis=-1),
            jnp.all(greedy_BL | (weights_BL == 0), axis=-1))

  def score(self, pairs):
    """[(context ids, continuation ids)] -> [(log-probability of the continuation given the
    context, whether greedy decoding gives it)]; the context is cut from the left to fit."""
    rows = []
    for context, continuation in pairs:
      tokens = [*context, *continuation][-(self.max_length + 1):]
      rows.append((tokens[:-1], tokens[1:], min(len(continuation), len(tokens) - 1)))
    results = [None] * len(rows)
    by_length = collections.defaultdict(list)
    for index, (inputs, _, _) in enumerate(rows):
      by_length[bucket(len(inputs), self.max_length)].append(index)
    for length, indices in by_length.items():
      for start in range(0, len(indices), self.batch_size):
        chunk = indices[start:start + self.batch_size]
        ids = np.full((self.batch_size, length), -1, np.int32)
        targets = np.zeros((self.batch_size, length), np.int32)
        weights = np.zeros((self.batch_size, length), np.float32)
        for row, index in enumerate(chunk):
          inputs, outputs, scored = rows[index]
          ids[row, :len(inputs)], targets[row, :len(outputs)] = inputs, outputs
          weights[row, len(outputs) - scored:len(outputs)] = 1.0
        sums, greedy = jax.device_get(self._score_fn(self.variables, ids, targets, weights))
        for row, index in enumerate(chunk):
          results[index] = (float(sums[row]), bool(greedy[row]))
    return results
