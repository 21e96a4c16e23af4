"""What the families' losses are made of: token cross-entropy (whole or over chunks of
the sequence), the model run with its sown MoE statistics, and the MoE terms. A family's
`loss` composes these into a `Loss`.

Microbatches (train.microbatches): a family's `counts(batch)` are the whole batch's
normalisers; a loss given them (`whole`) returns its microbatch's share of the whole
batch's loss, metrics included, so the shares of all microbatches add up to it exactly.

Glossary: B batch, L length, C chunk length, N chunks, D d_model, V vocab.
"""

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo import models
from zoo.models import head as head_lib
from zoo.models import moe as moe_lib

AUTO_CHUNK_MIN_VOCAB = 32768  # train.loss_chunk_len=-1 chunks from this vocabulary size up
AUTO_CHUNK_LEN = 512  # ... in chunks of at most this many positions


class Loss(NamedTuple):
  """One batch's loss, as every family returns it."""
  total: jax.Array  # what the optimizer minimises
  metrics: dict  # rows for the metrics log: 'loss' (mean token NLL) and any the family adds
  state: dict  # model collections the step moved (models.STATE_COLLECTIONS); {} when none
  nll_sum: jax.Array  # summed token NLL and weight, so eval batches combine exactly
  weight_sum: jax.Array
  predictions: jax.Array | None = None  # a label head's, per row (zoo/families/tasks.py)
  # model.attention.log_max_logit: the 'logits' collection, each attention's max logit
  # per head (a scanned stack's [layers, H]); microbatches take the max, not the sum
  max_logits: dict | None = None
  # sums an eval pass adds over its batches and divides by weight_sum (or by the sum
  # NAME_count, where given), logged as eval_NAME (a preference objective's accuracy)
  eval_sums: dict | None = None


def cross_entropy(logits_BLV, targets_BL, weights_BL, z_loss=0.0):
  """Weighted sums in float32: (negative log-likelihood, z-loss, weight)."""
  logits_BLV = logits_BLV.astype(jnp.float32)
  log_z_BL = jax.nn.logsumexp(logits_BLV, axis=-1)
  target_logit_BL = jnp.take_along_axis(logits_BLV, targets_BL[..., None], axis=-1)[..., 0]
  weights_BL = weights_BL.astype(jnp.float32)
  return (jnp.sum((log_z_BL - target_logit_BL) * weights_BL),
          jnp.sum(z_loss * jnp.square(log_z_BL) * weights_BL),
          jnp.sum(weights_BL))


def moe_stats(collection):
  """The 'moe' collection sown by every MoE layer (its sums, models.moe.SUMS) -> means over
  layers of their statistics, per-layer load."""
  found = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(collection)[0]:
    name = next(k.key for k in reversed(path) if hasattr(k, 'key'))
    found.setdefault(name, []).append(leaf)
  per_expert = ('pairs_per_expert', 'probs')
  sums = {k: jnp.concatenate([v.reshape(-1, *v.shape[v.ndim - (k in per_expert):])
                              for v in found[k]]) for k in found}
  per_layer = moe_lib.statistics(sums)
  return {'moe_aux_loss': jnp.mean(per_layer['balance_loss']),
          'moe_z_loss': jnp.mean(per_layer['z_loss']),
          'moe_dropped_fraction': jnp.mean(per_layer['dropped_fraction']),
          'moe_load': per_layer['load']}


def chunk_len(config, length):
  """Positions per chunk of the memory-lean loss for a target `length`; 0 = unchunked."""
  chunk = config.train.loss_chunk_len
  if chunk == -1:
    if config.model.vocab_size < AUTO_CHUNK_MIN_VOCAB:
      return 0
    chunk = max(c for c in range(1, min(length, AUTO_CHUNK_LEN) + 1) if length % c == 0)
  return 0 if chunk >= length else chunk


def chunked_cross_entropy(project, x_BLD, targets_BL, weights_BL, z_loss, chunk):
  """cross_entropy(project(x), ...) computed `chunk` positions at a time (over_chunks)."""
  def term(x_BCD, targets_BC, weights_BC):
    return cross_entropy(vocab_logits(project, x_BCD), targets_BC, weights_BC, z_loss)
  zero = jnp.zeros((), jnp.float32)
  return over_chunks(term, (x_BLD, targets_BL, weights_BL), chunk, (zero, zero, zero))


def vocab_logits(project, x_BCD):
  """A chunk's logits [B, C, V], split over the vocabulary as the head's."""
  return nn.with_logical_constraint(project(x_BCD), ('batch', 'length', 'vocab'))


def over_chunks(term, inputs, chunk, zeros):
  """The sums term(one chunk of each input) returns, added over the sequence's chunks of
  `chunk` positions: a scan whose body is rematerialised, so neither pass holds more than
  one chunk's logits [B, C, V]. inputs: arrays [B, L, ...]."""
  B, L = inputs[0].shape[:2]
  split = lambda a: a.reshape(B, L // chunk, chunk, *a.shape[2:]).swapaxes(0, 1)

  @jax.checkpoint
  def body(sums, chunk_inputs):
    return tuple(a + b for a, b in zip(sums, term(*chunk_inputs))), None

  sums, _ = jax.lax.scan(body, zeros, tuple(split(a) for a in inputs))
  return sums


class Applied(NamedTuple):
  """What one run of the model on a batch gives the loss."""
  outputs: jax.Array  # logits [B, L, V], or with head=False the hidden states [B, L, D]
  moe: dict | None  # moe_stats of the MoE layers, None without experts
  state: dict  # the state collections it moved
  mtp: list  # multi-token prediction's hidden states [B, L, D], one per depth
  max_logits: dict | None  # the 'logits' collection (model.attention.log_max_logit)
  indexer: dict | None = None  # the 'indexer' collection (model.mla.index_heads)


def apply(model, variables, batch, rng=None, head=True):
  """The model on a batch (training, with dropout, when `rng` is given) -> Applied.
  head=False: the outputs hold the hidden states the vocabulary projection reads, not
  logits (the chunked loss)."""
  train = rng is not None
  rngs = {'dropout': rng} if train else None
  m = model.config
  sown = (['moe'] * bool(m.moe.num_experts) + ['mtp'] * bool(m.mtp.depth) +
          ['logits'] * (m.attention.log_max_logit and train) +
          ['indexer'] * bool(m.mla.kv_lora_rank and m.mla.index_heads))
  if not sown:
    return Applied(model.apply(variables, batch, train=train, head=head, rngs=rngs), None, {},
                   [], None)
  moved = [k for k in models.STATE_COLLECTIONS if train and k in variables]
  outputs, collections = model.apply(variables, batch, train=train, head=head, rngs=rngs,
                                     mutable=[*sown, *moved])
  mtp = collections.get('mtp', {})
  return Applied(outputs, moe_stats(collections['moe']) if 'moe' in collections else None,
                 {k: collections[k] for k in moved},
                 [mtp[f'depth_{k}'][0] for k in range(1, len(mtp) + 1)],
                 collections.get('logits'), collections.get('indexer'))


def token_loss(outputs, targets_BL, weights_BL, config, variables, tokens, chunk=0):
  """Token cross-entropy (plus z_loss x log(Z)^2) over the weighted tokens, divided by
  `tokens` (the whole batch's weight). outputs: logits [B, L, V], or with `chunk` the
  hidden states [B, L, D] projected `chunk` positions at a time."""
  z_loss = config.train.z_loss
  if chunk:
    project = lambda x_BCD: head_lib.project(config.model, variables['params'], x_BCD)
    nll, z, weight = chunked_cross_entropy(project, outputs, targets_BL, weights_BL, z_loss,
                                           chunk)
  else:
    nll, z, weight = cross_entropy(outputs, targets_BL, weights_BL, z_loss)
  mean = jnp.maximum(tokens, 1.0)
  metrics = {'loss': nll / mean}
  if z_loss:
    metrics['z_loss'] = z / mean
  return Loss((nll + z) / mean, metrics, {}, nll, weight)


def add(loss, name, value):
  """`loss` with `value` added to the total and logged as `name`."""
  return loss._replace(total=loss.total + value, metrics={**loss.metrics, name: value})


def with_indexer(loss, sown, share=1.0):
  """Adds DeepSeek Sparse Attention's indexer loss (zoo/kernels/sparse.py), its KL per real
  query over the layers, to the total (it trains the indexer alone) and logs it as
  'indexer_kl'; `loss` unchanged without an indexer. share: as with_moe's."""
  if not sown:
    return loss
  sums = {'kl': 0.0, 'queries': 0.0}
  for path, leaf in jax.tree_util.tree_flatten_with_path(sown)[0]:
    name = next(k.key for k in reversed(path) if hasattr(k, 'key'))
    sums[name] = sums[name] + jnp.sum(leaf)
  return add(loss, 'indexer_kl', share * sums['kl'] / jnp.maximum(sums['queries'], 1.0))


def with_max_logits(loss, max_logits):
  """`loss` carrying the attention max logits (None when not logged)."""
  return loss if max_logits is None else loss._replace(max_logits=max_logits)


def with_moe(loss, stats, state, moe_config, share=1.0):
  """Adds the balance and router z-losses (means over the MoE layers), logs the statistics
  and carries the moved state; `loss` unchanged for a dense model. share: this batch's
  part of the whole (a microbatch's rows / the batch's rows) that terms and metrics take."""
  if stats is None:
    return loss
  total = (loss.total + share * (moe_config.balance_loss * stats['moe_aux_loss'] +
                                 moe_config.z_loss * stats['moe_z_loss']))
  stats = {k: share * v for k, v in stats.items()}
  return loss._replace(total=total, metrics={**loss.metrics, **stats}, state=state)
