"""The training loop, top to bottom: setup, data, state, loop (log, eval, checkpoint)."""

import os
import signal
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from zoo import kernels
from zoo import models
from zoo import sharding
from zoo.config import ConfigError
from zoo.data import pipeline
from zoo.data import streams
from zoo.data import tokenizer as tokenizer_lib
from zoo.plan import analytic
from zoo.train import checkpoint
from zoo.train import metrics as metrics_lib
from zoo.train import optim
from zoo.train import state as state_lib
from zoo.train import step as step_lib


class TrainingError(RuntimeError):
  """Training cannot go on (e.g. repeated NaN/Inf); the message says why."""


class Setup:
  """Everything both train and eval need, built in one pass before anything compiles."""

  def __init__(self, config, workdir):
    self.config, self.workdir = config, workdir
    # --- mesh: fails on a device-count or batch mismatch before any compile
    self.mesh = sharding.make_mesh(config.mesh)
    self.num_streams = config.data.num_streams or jax.process_count()
    batch_size = config.train.batch_size
    sharding.check_batch(batch_size, self.mesh, self.num_streams)
    sharding.check_divisible(config, dict(self.mesh.shape))
    self.rules = sharding.rules(config)
    # --- attention kernel: what runs here, or a one-line error before any compile
    try:
      self.kernel = kernels.resolve(
          config.model.attention.kernel, config.model.position in ('t5_bias', 'alibi'),
          jnp.dtype(config.model.dtype), (config.data.seq_len, config.data.seq_len))
    except ValueError as e:
      raise ConfigError(str(e)) from None
    self.streams = streams.local_streams(sharding.process_rows(self.mesh, batch_size),
                                         batch_size, self.num_streams)
    self.stream_rows = batch_size // self.num_streams
    self.local_batch_size = self.stream_rows * len(self.streams)

    # --- data: documents -> tokenizer -> token arrays, split once and for all
    documents = pipeline.read_documents(config.data)
    train_docs, eval_docs = pipeline.split_documents(
        documents, config.data.eval_fraction, config.data.split_seed)
    self.tokenizer = tokenizer_lib.load_or_train(config.data.tokenizer, train_docs, workdir)
    room = config.model.vocab_size - config.data.reserved_ids
    if self.tokenizer.vocab_size > room:
      raise ConfigError(f'the tokenizer has {self.tokenizer.vocab_size} pieces but '
                        f'model.vocab_size={config.model.vocab_size} minus '
                        f'data.reserved_ids={config.data.reserved_ids} leaves {room}; '
                        'raise model.vocab_size or use a smaller tokenizer')
    self.train_tokens = pipeline.tokenize(train_docs, self.tokenizer)
    self.eval_tokens = pipeline.tokenize(eval_docs, self.tokenizer)

    # --- model, optimizer, and the abstract sharded state
    self.model = models.build(config.model)
    self.learning_rate_fn = optim.schedule(config.optim, config.train.steps)
    self.optimizer = optim.make(config.optim, config.train.steps)
    self.init_fn, self.abstract_state, self.state_shardings = state_lib.make(
        self.model, self.optimizer, config, self.mesh)
    self.checkpointer = checkpoint.Checkpointer(
        os.path.join(workdir, 'checkpoints'), config.train.keep_checkpoints)

  def initial_params(self):
    """train.init_params, restored onto this mesh."""
    try:
      return checkpoint.restore_params(self.config.train.init_params,
                                       self.abstract_state['params'])
    except FileNotFoundError as e:
      raise ConfigError(str(e)) from None

  def restore_variables(self, mode):
    """For --mode=`mode`: the newest checkpoint's model variables, else train.init_params'
    (an imported model before any training; selection biases, if any, start at zero)
    -> (step, variables)."""
    restored = self.checkpointer.restore(self.abstract_state)
    self.checkpointer.close()
    if restored:
      return restored[0], step_lib.model_variables(restored[1])
    if not self.config.train.init_params:
      raise ConfigError(f'--mode={mode}: no checkpoint in {self.workdir}/checkpoints; train '
                        'first or pass the workdir of a trained run')
    variables = {'params': self.initial_params()}
    for key in step_lib.model_variables(self.abstract_state).keys() - {'params'}:
      variables[key] = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype, device=a.sharding),
                                    self.abstract_state[key])
    return 0, variables

  def datasets(self, train):
    """{stream: grain dataset} for this process's streams."""
    return {s: pipeline.make_dataset(
        self.train_tokens if train else self.eval_tokens, self.config.data, self.stream_rows,
        train=train, seed=self.config.train.seed, stream=s, num_streams=self.num_streams,
        tokenizer=self.tokenizer) for s in self.streams}

  def to_global(self, local_batch):
    return sharding.to_global(local_batch, self.mesh, self.config.train.batch_size)

  def jit(self, fn, in_shardings, out_shardings, donate_argnums=()):
    """jit with explicit shardings, traced under the mesh and the logical-axis rules."""
    jitted = jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings,
                     donate_argnums=donate_argnums)

    def call(*args):
      with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
        return jitted(*args)
    return call

  def evaluator(self):
    """-> evaluate(model variables) -> mean eval loss over the first train.eval_batches
    batches."""
    eval_step = self.jit(step_lib.make_eval_step(self.model, self.config),
                         (step_lib.model_variables(self.state_shardings),
                          sharding.batch_sharding(self.mesh)),
                         sharding.replicated(self.mesh))
    limit = self.config.train.eval_batches

    batches = streams.eval_batches(self.datasets(train=False), limit)
    count = len(batches)
    if jax.process_count() > 1:  # every process runs as many steps as the longest
      count = int(multihost_utils.process_allgather(np.int32(count)).max())
    batches += [streams.padding(batches[0])] * (count - len(batches))

    def evaluate(variables):
      loss_sum = weight_sum = 0.0
      for batch in batches:
        out = jax.device_get(eval_step(variables, self.to_global(batch)))
        loss_sum, weight_sum = loss_sum + out['loss_sum'], weight_sum + out['weight_sum']
      return float(loss_sum / max(weight_sum, 1.0))
    return evaluate


def _describe(setup, params, start_step):
  """The run header: what runs where, with the derived batch numbers (printed and logged)."""
  config, mesh = setup.config, setup.mesh
  header = {
      'event': 'start', 'step': start_step, 'processes': jax.process_count(),
      'devices': jax.device_count(), 'device_kind': jax.devices()[0].device_kind,
      'mesh': dict(mesh.shape), 'params': state_lib.param_count(params),
      'batch_global': config.train.batch_size, 'batch_per_process': setup.local_batch_size,
      'streams': f'{setup.streams[0]}..{setup.streams[-1]} of {setup.num_streams}',
      'batch_per_device': config.train.batch_size // sharding.batch_shards(mesh),
      'seq_len': config.data.seq_len, 'vocab': setup.tokenizer.vocab_size,
      'attention_kernel': setup.kernel[0], 'attention_kernel_why': setup.kernel[1],
      'train_documents': len(setup.train_tokens),
  }
  print(' '.join(f'{k}={v}' for k, v in header.items()), flush=True)
  return header


def train(config, workdir):
  """Trains (or resumes) per config; returns the last train metrics row."""
  setup = Setup(config, workdir)
  t = config.train
  is_main = jax.process_index() == 0

  # --- state: resume from the newest readable checkpoint, else initialise sharded
  data_iter = streams.TrainBatches(setup.datasets(train=True), setup.num_streams)
  restored = setup.checkpointer.restore(setup.abstract_state, data_iter)
  if restored:
    start_step, state = restored
  else:
    start_step = 0
    state = setup.jit(setup.init_fn, None, setup.state_shardings)(jax.random.PRNGKey(t.seed))
    if t.init_params:  # an imported model: its weights, fresh optimizer state
      state['params'] = setup.initial_params()
  if start_step >= t.steps:
    print(f'already trained: checkpoint at step {start_step} >= train.steps={t.steps}')
    setup.checkpointer.close()
    return None

  train_step = setup.jit(
      step_lib.make_train_step(setup.model, setup.optimizer, setup.learning_rate_fn, config),
      (setup.state_shardings, sharding.batch_sharding(setup.mesh)),
      (setup.state_shardings, sharding.replicated(setup.mesh)), donate_argnums=(0,))
  evaluate = setup.evaluator()
  writer = metrics_lib.Writer(workdir, enabled=is_main)
  writer.write(_describe(setup, state['params'], start_step))
  flops_per_token = metrics_lib.flops_per_token(  # MoE: the parameters a token uses
      config, analytic.active_params(analytic.abstract_params(config), config.model.moe)
      if config.model.moe.num_experts else state_lib.param_count(state['params']))
  tokens_per_step = t.batch_size * config.data.seq_len

  collapse = metrics_lib.CollapseWatch(config.model.moe)
  preempted = []
  previous_handler = signal.signal(signal.SIGTERM, lambda *_: preempted.append(True))

  # --- loop: dispatch step n, then read step n-1's metrics while n runs
  last_row, pending = None, None
  window_start, window_steps, run_start = time.time(), 0, time.time()

  def finish(step, metrics):
    nonlocal last_row, window_start, window_steps
    metrics = jax.device_get(metrics)
    window_steps += 1
    if metrics['nonfinite_streak'] >= t.max_nonfinite_steps:
      raise TrainingError(
          f'{int(metrics["nonfinite_streak"])} updates in a row had a NaN/Inf loss or gradient '
          f'(last at step {step}); weights are unchanged since; lower optim.learning_rate or '
          'check the data')
    if step % t.log_every and step not in (1, t.steps):  # step 1 shows the initial loss
      return
    elapsed = time.time() - window_start
    tokens_per_sec = window_steps * tokens_per_step / elapsed
    row = {'step': step, **{k: metrics[k] for k in ('loss', 'learning_rate', 'grad_norm')},
           'tokens_per_sec': tokens_per_sec,
           'mfu': metrics_lib.mfu(tokens_per_sec * flops_per_token, jax.devices()),
           'nonfinite_total': metrics['nonfinite_total']}
    if t.z_loss:
      row['z_loss'] = metrics['z_loss']
    if 'nsp_loss' in metrics:
      row['nsp_loss'] = metrics['nsp_loss']
    if 'moe_load' in metrics:
      row.update({k: metrics[k] for k in ('moe_aux_loss', 'moe_z_loss', 'moe_dropped_fraction')})
      row['moe_load'] = metrics['moe_load'].round(4).tolist()  # [MoE layer][expert]
      collapse.check(step, metrics['moe_load'])
    writer.write(row)
    eta = (t.steps - step) * elapsed / window_steps
    print(f'step {step}/{t.steps} loss {row["loss"]:.4f} lr {row["learning_rate"]:.2e} '
          f'grad_norm {row["grad_norm"]:.3f} tokens/s {tokens_per_sec:,.0f} '
          f'eta {eta:,.0f}s', flush=True)
    last_row, window_start, window_steps = row, time.time(), 0

  try:
    for step in range(start_step + 1, t.steps + 1):
      batch = setup.to_global(next(data_iter))
      state, metrics = train_step(state, batch)
      if pending:
        finish(*pending)
      pending = (step, metrics)

      if step % t.eval_every == 0 or step == t.steps:
        finish(*pending)
        pending = None
        eval_start = time.time()
        eval_loss = evaluate(step_lib.model_variables(state))
        writer.write({'step': step, 'eval_loss': eval_loss})
        print(f'step {step} eval_loss {eval_loss:.4f}', flush=True)
        window_start += time.time() - eval_start  # tokens/s counts training time only
      if step % t.checkpoint_every == 0 or step == t.steps or preempted:
        setup.checkpointer.save(step, state, data_iter)
      if preempted:
        print(f'SIGTERM: saved a checkpoint at step {step}; exiting', flush=True)
        break
    if pending:
      finish(*pending)
  finally:
    signal.signal(signal.SIGTERM, previous_handler)
    setup.checkpointer.close()
    writer.close()
  print(f'done in {time.time() - run_start:.0f}s', flush=True)
  return last_row


def evaluate(config, workdir):
  """--mode=eval: the newest checkpoint's eval loss, printed and logged."""
  setup = Setup(config, workdir)
  step, variables = setup.restore_variables('eval')
  eval_loss = setup.evaluator()(variables)
  if jax.process_index() == 0:
    writer = metrics_lib.Writer(workdir)
    writer.write({'step': step, 'eval_loss': eval_loss, 'mode': 'eval'})
    writer.close()
  print(f'step {step} eval_loss {eval_loss:.4f}', flush=True)
  return eval_loss
