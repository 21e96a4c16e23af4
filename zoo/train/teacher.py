"""train.teacher: the frozen teacher of logit distillation (zoo/families/distill.py), or
train.reference: the frozen reference of a post-training objective (zoo/objectives), read
from its workdir, checked against the student before anything compiles, and laid out on
the student's mesh by the student's sharding rules.

A teacher workdir is a trained run's (config.json, its newest checkpoint's parameters) or
a Hugging Face import's (zoo.convert.hf: config.py, and the weights its
train.init_params names).
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo import config as config_lib
from zoo import counting
from zoo import families
from zoo import models
from zoo import objectives
from zoo import sharding
from zoo import storage
from zoo.data import corpus as corpus_lib
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError
from zoo.train import checkpoint
from zoo.train import run_config

IMPORTED_CONFIG = 'config.py'  # what zoo.convert.hf writes beside the weights


@dataclasses.dataclass(frozen=True)
class Teacher:
  config: Any  # the teacher's config, on the student's mesh and rules
  model: nn.Module
  abstract: dict  # its model variables as ShapeDtypeStructs with shardings
  shardings: dict
  weights: str  # where its parameters are read: a checkpoint's state or an import


@dataclasses.dataclass(frozen=True)
class Source:
  field: str  # the config field that names it, for messages
  workdir: str
  quant: str


def source(config):
  """Where the frozen model is read from: train.teacher.workdir, else (an objective with a
  reference copy) train.reference, else train.init_params; None when the run has none."""
  t = config.train
  if t.teacher.workdir:
    return Source('train.teacher.workdir', t.teacher.workdir, t.teacher.quant)
  if objectives.needs_reference(config):
    field = 'train.reference' if t.reference else 'train.init_params'
    return Source(field, t.reference or t.init_params, '')
  return None


def _saved_config(t):
  """The config a frozen model's workdir holds (a run's, or an import's)."""
  teacher = run_config.load(t.workdir)
  if teacher is None and storage.exists(storage.join(t.workdir, IMPORTED_CONFIG)):
    teacher = config_lib.load(storage.join(t.workdir, IMPORTED_CONFIG))
  if teacher is None:
    raise ConfigError(f'{t.field}={t.workdir}: no {run_config.FILE} (a trained '
                      f'run) or {IMPORTED_CONFIG} (python -m zoo.convert.hf) there; pass '
                      "the frozen model's workdir")
  return teacher


def config_for(config):
  """The teacher's config (its workdir's; a reference read from train.init_params has the
  student's own model, whose weights those are), checked against the student's: a decoder
  over the same vocabulary and tokenizer; laid out by the student's mesh and sharding
  rules."""
  t = source(config)
  teacher = config if t.field == 'train.init_params' else _saved_config(t)
  if (config.model.family, teacher.model.family) != ('decoder', 'decoder'):
    raise ConfigError(f'{t.field}={t.workdir}: a frozen {teacher.model.family} cannot '
                      f'teach or refer a {config.model.family}; both must be decoders')
  if teacher.model.vocab_size != config.model.vocab_size:
    raise ConfigError(f'{t.field}={t.workdir}: its model.vocab_size='
                      f'{teacher.model.vocab_size} is not the student\'s '
                      f'{config.model.vocab_size}; the two must share a vocabulary')
  teacher = teacher.copy_and_resolve_references()
  with teacher.unlocked():
    teacher.mesh, teacher.sharding = config.mesh, config.sharding
    teacher.data.seq_len = config.data.seq_len
    teacher.model.dropout_rate = 0.0
    teacher.model.attention.log_max_logit = False
    teacher.train.lora.rank = 0
    if t.quant:
      teacher.model.quant.mode = t.quant
  return teacher


def check_tokenizer(config, workdir, teacher_config):
  """A ConfigError unless the teacher read text with the student's tokenizer."""
  t = source(config)
  mine = corpus_lib.tokenizer_path(config.data, workdir)
  theirs = corpus_lib.tokenizer_path(teacher_config.data, t.workdir)
  if not storage.exists(theirs) or not storage.exists(mine):
    return  # one of them makes it on first use from the same corpus settings
  if tokenizer_lib.checksum(mine) != tokenizer_lib.checksum(theirs):
    raise ConfigError(f'{t.field}={t.workdir}: its tokenizer ({theirs}) is not '
                      f"the student's ({mine}); train the student with "
                      f'--config.data.tokenizer.path={theirs}')


def prepare(config, mesh):
  """The teacher, abstract (nothing read): its model and variables' layout on `mesh`."""
  teacher_config = config_for(config)
  model = families.build(teacher_config.model)
  batch = families.example_batch(teacher_config.model, 1, teacher_config.data.seq_len)
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), batch)
  variables = {k: variables[k] for k in ('params', *models.STATE_COLLECTIONS)
               if k in variables}
  specs = nn.get_partition_spec(variables)
  unboxed = nn.unbox(variables)
  shardings = jax.tree.map(
      lambda s, x: sharding.fit(s, x.shape),
      sharding.logical_to_shardings(specs, mesh, sharding.rules(config)), unboxed)
  abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          unboxed, shardings)
  t = source(config)
  weights = t.workdir if checkpoint.saved_steps(t.workdir) else teacher_config.train.init_params
  if not weights:
    raise ConfigError(f'{t.field}={t.workdir}: no checkpoint there to read the '
                      'frozen model from; train it first')
  return Teacher(teacher_config, model, abstract, shardings, weights)


def restore(teacher):
  """The teacher's variables, read onto its shardings (not its optimizer state); a state
  collection it lacks starts at zero."""
  try:
    variables = {'params': checkpoint.restore_params(teacher.weights,
                                                     teacher.abstract['params'])}
  except (FileNotFoundError, ValueError) as e:
    raise ConfigError(f'train.teacher: {e}') from None
  for name in teacher.abstract.keys() - {'params'}:  # DeepSeek-V3's routing biases
    held = checkpoint.restore_collection(teacher.weights, name, teacher.abstract[name])
    variables[name] = held if held is not None else jax.tree.map(
        lambda a: jnp.zeros(a.shape, a.dtype, device=a.sharding), teacher.abstract[name])
  return variables


def describe(config, teacher):
  """The frozen model for the run header -> (its fields for the `start` row, a line for
  people): where it was read, at which step, its size, and (a teacher) how it teaches."""
  t = source(config)
  steps = checkpoint.saved_steps(teacher.weights)
  fields = {'workdir': t.workdir, 'step': steps[0] if steps else 'import',
            'params': counting.param_count(teacher.abstract['params'])}
  read = (f'step {fields["step"]}' if steps else f'import {teacher.weights}')
  if t.field != 'train.teacher.workdir':
    return {'reference': fields}, (f'reference {t.workdir} ({read}, {fields["params"]:,} '
                                   f'parameters, frozen; {t.field})')
  d = config.train.teacher
  fields.update(weight=d.weight, temperature=d.temperature, top_k=d.top_k,
                quant=t.quant or teacher.config.model.quant.mode)
  over = f'its top {d.top_k} ids' if d.top_k else 'the whole vocabulary'
  return {'teacher': fields}, (
      f'teacher {t.workdir} ({read}, {fields["params"]:,} parameters'
      + (f', {fields["quant"]} matmuls' if fields['quant'] != 'none' else '') +
      f'); loss (1 - {d.weight}) x cross-entropy + {d.weight} x KL at temperature '
      f'{d.temperature} over {over}')
