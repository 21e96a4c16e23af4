"""Objectives (train.objective): what a train step minimises, as a loss module the family-free
step takes (zoo/train/step.py): the family's own loss ('lm': the language-model or task loss
of zoo/families), or a post-training objective over the family's model:
  dpo, ipo, simpo  preference pairs (preference.py; data.task.kind='preference')
  grpo             sampled completions scored by a reward (grpo.py; zoo/post runs its loop)
Each module defines loss(model, config, variables, batch, rng=None, whole=None, step=None,
teacher=None) -> families.loss.Loss and counts(batch); `teacher` is the frozen reference
model (zoo/train/teacher.py), as (its model, its variables).
"""

import functools

import jax

from zoo import families
from zoo.objectives import grpo
from zoo.objectives import preference

PREFERENCE = preference.KINDS
OBJECTIVES = ('lm', *PREFERENCE, 'grpo')
_MODULES = {**{kind: preference for kind in PREFERENCE}, 'grpo': grpo}


def loss_fn(model, config):
  """-> loss(variables, batch, rng=None, whole=None, step=None, teacher=None)."""
  objective = config.train.objective
  if objective == 'lm':
    return families.loss_fn(model, config)
  return functools.partial(_MODULES[objective].loss, model, config)


def counts_fn(config):
  objective = config.train.objective
  return families.counts_fn(config) if objective == 'lm' else _MODULES[objective].counts


def batch_spec(config, batch_size=None):
  """{key: (shape, dtype)} of the global batch the objective's step takes: the family's,
  and for grpo the sampled rows' log-probabilities and advantages (grpo.extra_spec)."""
  spec = families.batch_spec(config, batch_size)
  if config.train.objective == 'grpo':
    spec.update(grpo.extra_spec(spec['targets'][0]))
  return spec


def abstract_batch(config, sharding=None):
  """The global batch as jax.ShapeDtypeStructs, for tracing and ahead-of-time compiles."""
  return {key: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
          for key, (shape, dtype) in batch_spec(config).items()}


def needs_reference(config):
  """Whether the objective reads a frozen reference model's log-probabilities from a copy
  of its own (zoo/train/teacher.py); with LoRA the reference is the model with its
  adapters switched off, no copy."""
  o = config.train.objective
  if o in ('dpo', 'ipo'):
    return not config.train.lora.rank
  if o == 'grpo':
    return bool(config.train.grpo.kl_beta) and not config.train.lora.rank
  return False
