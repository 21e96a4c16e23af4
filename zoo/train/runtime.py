"""The parts a run is built from, each by its own function, so that every mode builds only
what it uses. Training builds them all; --mode=eval skips nothing but the train data;
--mode=generate reads the tokenizer and the checkpoint, never the corpus.

  compile_cache(config)        the persistent compilation cache, on before anything compiles
  placement(run)               mesh, logical-axis rules, the attention kernel that will run;
                               its jit compiles with platform.compiler_options
  input_streams(config, mesh)  which of the global batch's streams this process reads
  corpus(config, workdir)      the prepared corpus: tokenizer, train and eval documents
                               (or data.task's examples: zoo/data/task.py)
  tokenizer(config, workdir)   the run's existing tokenizer, for generation
  datasets(...)                {stream: grain dataset} of this process's eval streams
  train_batches(...)           this process's train batches, phase by phase
  model_state(run, mesh)       model, optimizer and the abstract sharded train state
  check_workdir(config, workdir)  never a workdir inside train.init_params
  init_plan(config, state)     what train.init_params gives the model
  initial_collections(...)     the state collections it holds (routing biases)
  size_label_head(config)      a classification task's label count, without its tokens
  check_restorable(...)        a checkpoint (or train.init_params) there, before anything else
  restore_variables(...)       the newest checkpoint's model variables
Everything here checks its input before anything compiles (ConfigError, one line).
"""

import dataclasses
import os
import tempfile
from typing import Any, Callable

import filelock
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.experimental.compilation_cache import compilation_cache

from zoo import families
from zoo import kernels
from zoo import models
from zoo import objectives
from zoo import platform
from zoo import sharding
from zoo import storage
from zoo.data import corpus as corpus_lib
from zoo.data import pipeline
from zoo.data import streams as streams_lib
from zoo.data import task as task_lib
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError
from zoo.models import dims
from zoo.train import checkpoint
from zoo.train import local_tier as local_tier_lib
from zoo.train import run_config
from zoo.train import state as state_lib
from zoo.train import step as step_lib
from zoo.train import teacher as teacher_lib


# ------------------------------------------------------------------- compile cache

COMPILE_CACHE_MAX_BYTES = 8 << 30  # least recently used programs go beyond this


def _cache_cap():
  """COMPILE_CACHE_MAX_BYTES, or $JAX_COMPILATION_CACHE_MAX_SIZE where set (-1: no cap)."""
  return int(os.environ.get('JAX_COMPILATION_CACHE_MAX_SIZE', COMPILE_CACHE_MAX_BYTES))


def compile_cache(config):
  """Turns on JAX's persistent compilation cache in train.compile_cache_dir (''= off): a
  second start of the same run, or an eval of it, loads its compiled steps from there.
  A local directory that cannot be written is a ConfigError."""
  directory = config.train.compile_cache_dir
  if not directory:
    _use_compile_cache(False, None)
    return None
  if not storage.is_remote(directory):
    directory = os.path.abspath(os.path.expanduser(directory))
    try:
      os.makedirs(directory, exist_ok=True)
      with tempfile.NamedTemporaryFile(dir=directory):
        pass
    except OSError as e:
      raise ConfigError(f'train.compile_cache_dir={config.train.compile_cache_dir!r} cannot '
                        f'be written ({e.strerror}); point it to a writable directory or set '
                        "it to '' to compile every start") from None
  _use_compile_cache(True, directory)
  if _cache_cap() != -1 and not storage.is_remote(directory):
    _age_unaged_entries(directory)
  return directory


def _age_unaged_entries(directory):
  """JAX's capped cache keeps an access-time file beside each entry and fails every later
  write on an entry without one, which a process without the cap leaves behind
  (docs/contracts.md, Known problems): such entries get the oldest time, evicted first."""
  entry, atime = '-cache', '-atime'  # jax/_src/lru_cache.py's file suffixes
  try:
    with filelock.FileLock(os.path.join(directory, '.lockfile'), timeout=10):  # JAX's lock
      for name in os.listdir(directory):
        path = os.path.join(directory, name.removesuffix(entry) + atime)
        if name.endswith(entry) and not os.path.exists(path):
          with open(path, 'wb') as f:
            f.write((0).to_bytes(8, 'little'))  # JAX's format: nanoseconds, little-endian
  except filelock.Timeout:
    pass  # another process holds the cache; a later start ages what is left


def _use_compile_cache(enabled, directory):
  if (jax.config.jax_enable_compilation_cache, jax.config.jax_compilation_cache_dir) == (
      enabled, directory):
    return
  jax.config.update('jax_enable_compilation_cache', enabled)
  jax.config.update('jax_compilation_cache_dir', directory)
  jax.config.update('jax_compilation_cache_max_size', _cache_cap())
  # JAX decides once per process whether it uses the cache; a process that compiled before
  # (a notebook, a test session) decides again
  compilation_cache.reset_cache()


# ----------------------------------------------------------------------- placement

@dataclasses.dataclass(frozen=True)
class Placement:
  mesh: jax.sharding.Mesh
  rules: tuple  # (logical axis, mesh axes) pairs
  kernel: tuple  # (attention kernel that runs, why)

  def jit(self, fn, in_shardings, out_shardings, donate_argnums=(), rules=None):
    """jit with explicit shardings, traced under the mesh and the logical-axis rules."""
    options = platform.compiler_options(self.mesh.devices.flat[0].platform)
    return Jitted(jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings,
                          donate_argnums=donate_argnums, compiler_options=options),
                  self.mesh, rules or self.rules)


@dataclasses.dataclass(frozen=True)
class Jitted:
  """A jitted function called, or compiled ahead of its first call, under its mesh and
  logical-axis rules."""
  jitted: Callable
  mesh: jax.sharding.Mesh
  rules: tuple

  def __call__(self, *args):
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
      return self.jitted(*args)

  def compile(self, *args):
    """-> the executable for arguments shaped and sharded like args (a jax Compiled)."""
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
      return self.jitted.lower(*args).compile()


def attention_kernel(config, context, on=None):
  """-> (kernel that runs on platform `on` (default: here) with `context` devices on the
  mesh's context axis (mesh.context resolved), why), or a ConfigError."""
  m = config.model
  if m.mla.kv_lora_rank and m.mla.index_heads:
    return 'sparse', ("model.mla.index_heads: DeepSeek Sparse Attention in XLA, "
                      + ('every visible key (the warm-up)' if m.mla.index_stage == 'warmup'
                         else f"the indexer's top {m.mla.index_top_k} keys per query")
                      + ' (zoo/kernels/sparse.py)')
  try:
    if context != 1:  # config.validate allows only what the ring runs
      blocks = 'splash' if _ring_blocks(config, context, on) == 'splash' else 'XLA'
      return 'ring', f'mesh context={context}: ring attention, local blocks in {blocks}'
    return kernels.resolve(m.attention.kernel, dims.has_position_bias(m), jnp.dtype(m.dtype),
                           (config.data.seq_len, config.data.seq_len), on=on,
                           softcap=bool(m.attention.softcap), sinks=bool(m.attention.sinks))
  except ValueError as e:  # e.g. splash chunks of a mesh.context=-1 resolved here
    raise ConfigError(str(e)) from None


def _ring_blocks(config, context, on):
  causal = families.get(config.model).CONTEXT_CHUNKS == 2  # the decoder's balanced layout
  return kernels.ring_blocks(config.model.attention.kernel, causal,
                             config.data.seq_len // context, on=on)


def pallas_attention(config, context, on=None):
  """Whether the attention runs in Pallas kernels on platform `on` (splash, flash_bias, the
  ring's splash blocks): custom calls whose FLOPs the compiler's cost analysis leaves out."""
  kernel, _ = attention_kernel(config, context, on)
  if kernel == 'ring':
    return _ring_blocks(config, context, on) == 'splash'
  return kernel in ('splash', 'flash_bias')


def placement(run):
  """The mesh (fails on a device-count or divisibility mismatch before any compile)."""
  config = run.config
  mesh = sharding.make_mesh(config.mesh)

  def check(shape_config):
    sharding.check_batch(shape_config.train.batch_size, mesh, _num_streams(config))
    sharding.check_divisible(shape_config, dict(mesh.shape), run.family)
  check(config)
  run.check_phases(check)
  return Placement(mesh, sharding.rules(config),
                   attention_kernel(config, mesh.shape.get('context', 1)))


@dataclasses.dataclass(frozen=True)
class Streams:
  num_streams: int  # in the global batch
  local: list  # the streams this process reads, in batch order
  rows: int  # rows per stream

  @property
  def local_batch_size(self):
    return self.rows * len(self.local)


def _num_streams(config):
  return config.data.num_streams or jax.process_count()


def input_streams(config, mesh):
  batch_size, num_streams = config.train.batch_size, _num_streams(config)
  local = streams_lib.local_streams(sharding.process_rows(mesh, batch_size), batch_size,
                                    num_streams)
  return Streams(num_streams, local, batch_size // num_streams)


# --------------------------------------------------------------------------- data

def _check_vocab(config, tokenizer):
  if tokenizer is None:  # an image task reads no text
    return None
  room = config.model.vocab_size - config.data.reserved_ids
  if tokenizer.vocab_size > room:
    raise ConfigError(f'the tokenizer has {tokenizer.vocab_size} pieces but '
                      f'model.vocab_size={config.model.vocab_size} minus '
                      f'data.reserved_ids={config.data.reserved_ids} leaves {room}; '
                      'raise model.vocab_size or use a smaller tokenizer')
  d = config.data
  if d.objective == 'span_corruption' and not d.task.kind and \
      max(tokenizer.sentinel_ids(d.num_sentinels)) >= config.model.vocab_size:
    raise ConfigError(f'the sentinels <extra_id_0..{d.num_sentinels - 1}> of a '
                      f'{tokenizer.vocab_size}-piece tokenizer need ids up to '
                      f'{max(tokenizer.sentinel_ids(d.num_sentinels))}, past model.vocab_size='
                      f'{config.model.vocab_size}; raise it or lower data.num_sentinels')
  return tokenizer


def corpus(config, workdir):
  """data.path (or data.mixture) as prepared corpora (zoo/data/corpus.py): the tokenizer and
  the train and eval documents, read from shards on demand (a plain corpus is prepared on
  first use). With data.task.kind: the task's examples (zoo/data/task.py); model.num_labels
  = 0 becomes the task's label count here, before the model is built."""
  if config.data.task.kind:
    new_tokens = config.train.grpo.max_new_tokens if config.train.objective == 'grpo' else 0
    task = task_lib.open_task(config.data, workdir, config.model.num_labels, new_tokens)
    _check_vocab(config, task.tokenizer)
    config.model.num_labels = task.num_labels
    names = config.model.label_names
    if names and len(names) != task.num_labels:
      raise ConfigError(f'model.label_names has {len(names)} names and the task '
                        f'{task.num_labels} labels; give one name per label, or ()')
    return task
  prepared = corpus_lib.open_corpus(config.data, workdir)
  _check_vocab(config, prepared.tokenizer)
  return prepared


def tokenizer(config, workdir):
  """The tokenizer the run trained with (data.tokenizer.path, a prepared data.path's, else
  WORKDIR/tokenizer)."""
  return _check_vocab(config, tokenizer_lib.load(corpus_lib.tokenizer_path(config.data,
                                                                           workdir)))


def _rows(config, stream, streams, tokens, tokenizer, train, start=0, track_documents=False):
  """One stream's rows (pipeline.make_rows or, for a task, make_task_rows)."""
  family = families.get(config.model)
  kind = config.data.task.kind
  if kind:
    example = lambda e: family.task_example(kind, e, tokenizer, config.data)
    return pipeline.make_task_rows(
        tokens, family.batch_spec(config.data, 1), example, train=train,
        packed=kind in task_lib.PACKED, seed=config.train.seed, stream=stream,
        num_streams=streams.num_streams)
  return pipeline.make_rows(
      tokens, config.data, train=train, seed=config.train.seed, stream=stream,
      num_streams=streams.num_streams, tokenizer=tokenizer, start=start,
      track_documents=track_documents)


def _num_sources(tokens):
  return len(tokens.datasets) if isinstance(tokens, pipeline.Mixture) else 0


def datasets(config, streams, tokens, tokenizer, train):
  """{stream: grain dataset} of this process's streams, batches as the family's spec says
  (eval reads these; training reads train_batches)."""
  spec = families.get(config.model).batch_spec(config.data, streams.rows)
  return {s: pipeline.batched(_rows(config, s, streams, tokens, tokenizer, train), spec,
                              train=train, num_sources=_num_sources(tokens))
          for s in streams.local}


def train_batches(run, streams, corpus, skips=None):
  """This process's train batches, phase by phase, dropping `skips` ({step: batches after
  it}) (zoo/data/streams.py: TrainBatches)."""
  shaped = run.phase_configs
  track = len({p.seq_len for p in run.phases}) > 1  # where each stream starts a new length
  rows = lambda stream, phase, start: _rows(shaped[phase], stream, streams, corpus.train,
                                            corpus.tokenizer, True, start, track)
  specs = [run.family.batch_spec(c.data, c.train.batch_size // streams.num_streams)
           for c in shaped]
  return streams_lib.TrainBatches(rows, specs, run.phases, streams.local, streams.num_streams,
                                  _num_sources(corpus.train), skips)


# -------------------------------------------------------------------------- state

@dataclasses.dataclass(frozen=True)
class ModelState:
  model: nn.Module
  optimizer: Any
  learning_rate_fn: Callable
  init_fn: Callable  # rng -> state, to jit with out_shardings=shardings
  abstract: dict  # the train state as ShapeDtypeStructs with shardings
  shardings: dict
  # train.teacher, or an objective's reference (train.reference): zoo/train/teacher.py's
  # Teacher (nothing read yet)
  teacher: Any = None

  def loss_fn(self, config):
    return objectives.loss_fn(self.model, config)

  def step_teacher(self, config):
    """The frozen model the train step runs (a teacher, a preference reference), or None:
    GRPO's rows carry their reference log-probabilities (zoo/post/grpo.py)."""
    return None if config.train.objective == 'grpo' else self.teacher

  def train_step(self, config):
    """The (unjitted) train step: loss, optimizer, schedule, train.microbatches; with a
    teacher, (state, batch, teacher variables)."""
    teacher = self.step_teacher(config)
    return step_lib.make_train_step(self.loss_fn(config), self.optimizer,
                                    self.learning_rate_fn, config.train.microbatches,
                                    objectives.counts_fn(config),
                                    tuple(config.train.fault.nonfinite),
                                    state_lib.trainable(config, self.abstract['params']),
                                    config.optim.muon.qk_clip,
                                    teacher and teacher.model)

  def jit_train_step(self, place, config, teacher_variables=None, donate=False):
    """The train step jitted on `place`: (state, batch) -> (state, metrics), with the
    teacher's variables (teacher_lib.restore) bound as its third argument."""
    mesh, teacher = place.mesh, self.step_teacher(config)
    in_shardings = (self.shardings, sharding.batch_sharding(mesh))
    if teacher:
      in_shardings += (teacher.shardings,)
    jitted = place.jit(self.train_step(config), in_shardings,
                       (self.shardings, sharding.replicated(mesh)),
                       donate_argnums=(0,) if donate else ())
    return jitted if teacher is None else WithTeacher(jitted, teacher_variables)


@dataclasses.dataclass(frozen=True)
class WithTeacher:
  """A jitted train step called (or compiled) with the teacher's variables appended."""
  jitted: Any
  teacher_variables: dict

  def __call__(self, state, batch):
    return self.jitted(state, batch, self.teacher_variables)

  def compile(self, state, batch):
    compiled = self.jitted.compile(state, batch, self.teacher_variables)
    return lambda state, batch: compiled(state, batch, self.teacher_variables)


def model_state(run, mesh):
  config = run.config
  model = families.build(config.model, config.train.lora)
  optimizer, init_fn, abstract, shardings = state_lib.make(model, config, mesh, run.schedule)
  teacher = teacher_lib.prepare(config, mesh) if teacher_lib.source(config) else None
  return ModelState(model, optimizer, run.schedule, init_fn, abstract, shardings, teacher)


def checkpointer(config, workdir):
  return checkpoint.Checkpointer(os.path.join(workdir, 'checkpoints'),
                                 config.train.keep_checkpoints)


def local_tier(config):
  """The fast checkpoint tier (zoo/train/local_tier.py), or None."""
  tier = config.train.local_tier
  return local_tier_lib.LocalTier(tier.path, tier.keep) if tier.path else None


@dataclasses.dataclass(frozen=True)
class InitPlan:
  """What train.init_params gives the model: parameter names it holds, lacks (initialised
  fresh: a new head) and holds but the model lacks (dropped, train.drop_unused_params)."""
  held: list
  new: list
  dropped: list


def check_workdir(config, workdir):
  """A workdir inside train.init_params' directory is a ConfigError, before anything is
  written: a run never writes into the checkpoint it starts from. So is a local tier path
  this process cannot write."""
  if config.train.local_tier.path:
    storage.check_writable(config.train.local_tier.path, 'train.local_tier.path')
  path = config.train.init_params
  if not path:
    return
  source, run = storage.absolute(path).rstrip('/'), storage.absolute(workdir).rstrip('/')
  if run == source or run.startswith(source + '/'):
    raise ConfigError(f'--workdir={workdir} is inside train.init_params={path!r}; a run '
                      'never writes into the checkpoint it starts from: pick a new --workdir')


def init_plan(config, state):
  """Checks train.init_params against the model before anything compiles: a parameter of
  another shape, or one the model does not use (unless train.drop_unused_params), is a
  ConfigError. None without train.init_params."""
  path = config.train.init_params
  if not path:
    return None
  try:
    _, _, held, new, dropped = checkpoint.init_plan(path, state.abstract['params'])
  except (FileNotFoundError, ValueError) as e:
    raise ConfigError(str(e)) from None
  if dropped and not config.train.drop_unused_params:
    raise ConfigError(f'train.init_params={path!r} holds {len(dropped)} parameters this model '
                      f'does not use ({", ".join(dropped[:4])}{", ..." if len(dropped) > 4 else ""}'
                      '); set train.drop_unused_params=True to drop them, or match the model '
                      'config to the checkpoint')
  check_index_stage(config, path, new)
  return InitPlan(held, new, dropped)


def check_index_stage(config, path, new):
  """DeepSeek-V3.2's stages in order: the sparse stage starts from weights whose indexer the
  dense warm-up trained, not from a checkpoint without one."""
  a = config.model.mla
  untrained = [name for name in new if 'indexer' in name.split('/')]
  if a.kv_lora_rank and a.index_heads and a.index_stage == 'sparse' and untrained:
    raise ConfigError(f"model.mla.index_stage='sparse' starts from train.init_params={path!r}, "
                      f'which holds no indexer ({untrained[0]}): run the dense warm-up first '
                      "(model.mla.index_stage='warmup'; configs/deepseek_v3_2.py:warmup) and "
                      'start the sparse stage from that run')


def initial_params(config, state, fresh_params=None):
  """train.init_params, restored onto the state's shardings; parameters it lacks are taken
  from fresh_params (the random init)."""
  try:
    return checkpoint.restore_params(config.train.init_params, state.abstract['params'],
                                     fresh_params)
  except (FileNotFoundError, ValueError) as e:
    raise ConfigError(str(e)) from None


def initial_collections(config, state):
  """The model's state collections train.init_params holds (a run's moe_bias, an import's
  routing biases), restored onto the state's shardings: {name: tree}, {} when none."""
  out = {}
  for name in models.STATE_COLLECTIONS:
    if name in state.abstract:
      held = checkpoint.restore_collection(config.train.init_params, name,
                                           state.abstract[name])
      if held is not None:
        out[name] = held
  return out


def size_label_head(config):
  """model.num_labels = 0 with a classification task: the task's label count, as training
  sets it (for what reads no task tokens: plan mode, export)."""
  if config.data.task.kind in task_lib.HEADED and not config.model.num_labels:
    with config.unlocked():
      config.model.num_labels = task_lib.label_count(config.data)


def check_restorable(config, workdir, command):
  """`command` ('--mode=eval', '--mode=generate', 'zoo.convert.export', 'zoo.harness')
  reads the newest checkpoint, or train.init_params: a workdir with neither is one
  ConfigError naming the command, before anything is read, prepared or written."""
  if not (config.train.init_params or checkpoint.saved_steps(workdir)):
    raise _no_checkpoint(workdir, command)


def _no_checkpoint(workdir, command):
  return ConfigError(f'{command}: no checkpoint in {workdir}/checkpoints; train first or '
                     'pass the workdir of a trained run')


def check_same_model(config, workdir, state):
  """A command reading the run in `workdir`: a ConfigError, before the tokenizer or a
  checkpoint is read, when the newest checkpoint's parameters are not this model's."""
  run_config.check_shapes(run_config.changes(run_config.read(workdir), config), workdir,
                          state.abstract['params'], reading=True)


def restore_variables(config, workdir, state, command):
  """For `command` (check_restorable's): the newest checkpoint's model variables, else
  train.init_params'
  (an imported model before any training; state collections start at zero)
  -> (step, variables). A checkpoint of other parameter shapes than this config's model is
  a ConfigError naming the changed fields (never moved aside as unreadable)."""
  check_same_model(config, workdir, state)
  saved = checkpointer(config, workdir)
  restored = saved.restore(state.abstract)
  saved.close()
  if restored:
    return restored[0], state_lib.model_variables(restored[1])
  if not config.train.init_params:
    raise _no_checkpoint(workdir, command)
  init_plan(config, state)
  variables = {'params': initial_params(config, state)}
  for key in state_lib.model_variables(state.abstract).keys() - {'params'}:
    variables[key] = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype, device=a.sharding),
                                  state.abstract[key])
  return 0, variables
