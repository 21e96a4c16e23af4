"""Logit distillation (train.teacher): the student's token distribution pulled toward a
frozen teacher's, as Gemma 2 and 3 trained their small models (Gemma Team 2024, sec. 3.2;
2025, sec. 2.3): the loss mixes the cross-entropy with the KL divergence to the teacher's
softened distribution, over the whole vocabulary or the teacher's top-k ids.

Glossary: B batch, L length, C chunk length, V vocab, k the teacher's top-k.
"""

import jax
import jax.numpy as jnp

from zoo.families import loss as loss_lib
from zoo.models import head as head_lib


def with_teacher(total, outputs, teacher, batch, config, variables, tokens, chunk):
  """`total` (the token loss) with distillation mixed in: (1 - weight) x its cross-entropy
  + weight x the KL term (summed over the weighted tokens, divided by `tokens`: the whole
  batch's), logged as distill_kl. outputs: the student's logits, or with `chunk` its hidden
  states (the teacher's then too, each chunk projected by its own head)."""
  t = config.train.teacher
  teacher_model, teacher_variables = teacher
  taught = loss_lib.apply(teacher_model, teacher_variables, batch, head=not chunk).outputs
  weights_BL = batch['loss_weights']
  if chunk:
    student_head = lambda x: head_lib.project(config.model, variables['params'], x)
    teacher_head = lambda x: head_lib.project(teacher_model.config,
                                              teacher_variables['params'], x)
    term = lambda xs, xt, w: (kl_sum(loss_lib.vocab_logits(student_head, xs),
                                     loss_lib.vocab_logits(teacher_head, xt), w,
                                     t.temperature, t.top_k),)
    kl, = loss_lib.over_chunks(term, (outputs, taught, weights_BL), chunk,
                               (jnp.zeros((), jnp.float32),))
  else:
    kl = kl_sum(outputs, taught, weights_BL, t.temperature, t.top_k)
  kl = kl / jnp.maximum(tokens, 1.0)
  return total._replace(total=total.total + t.weight * (kl - total.metrics['loss']),
                        metrics={**total.metrics, 'distill_kl': kl})


def kl_sum(student_BLV, teacher_BLV, weights_BL, temperature, top_k):
  """Weighted sum over tokens of T^2 KL(p || q) at temperature T, float32: p the teacher's
  softmax(z / T), q the student's. top_k > 0: p over the teacher's k most likely ids,
  renormalised, against the student's log-probabilities of those ids (its softmax over the
  whole vocabulary); the teacher is not differentiated."""
  t = temperature
  log_q_BLV = jax.nn.log_softmax(student_BLV.astype(jnp.float32) / t, axis=-1)
  teacher_BLV = jax.lax.stop_gradient(teacher_BLV).astype(jnp.float32) / t
  if top_k:
    teacher_BLk, ids_BLk = jax.lax.top_k(teacher_BLV, top_k)
    log_p_BLk = jax.nn.log_softmax(teacher_BLk, axis=-1)
    log_q_BLk = jnp.take_along_axis(log_q_BLV, ids_BLk, axis=-1)
  else:
    log_p_BLk, log_q_BLk = jax.nn.log_softmax(teacher_BLV, axis=-1), log_q_BLV
  kl_BL = jnp.sum(jnp.exp(log_p_BLk) * (log_p_BLk - log_q_BLk), axis=-1)
  return t * t * jnp.sum(kl_BL * weights_BL.astype(jnp.float32))
