"""The training loop, top to bottom: setup, state, loop (log, eval, checkpoint).

It knows no family: the loss (zoo/families) says what the metrics rows hold, and the log
writes whatever rows the train step returns.
"""

import contextlib
import dataclasses
import signal
import time
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from zoo import counting
from zoo import phases as phases_lib
from zoo import progress
from zoo import sharding
from zoo.data import pipeline
from zoo.train import actions as actions_lib
from zoo.train import canary as canary_lib
from zoo.train import evaluate as evaluate_lib
from zoo.train import faults
from zoo.train import goodput as goodput_lib
from zoo.train import local_tier as local_tier_lib
from zoo.train import metrics as metrics_lib
from zoo.train import profile as profile_lib
from zoo.train import run_config
from zoo.train import runtime
from zoo.train import spikes as spikes_lib
from zoo.train import state as state_lib
from zoo.train import stop as stop_lib
from zoo.train import teacher as teacher_lib
from zoo.train import watchdog as watchdog_lib


class TrainingError(RuntimeError):
  """Training cannot go on (e.g. repeated NaN/Inf); the message says why."""


def _describe(run, workdir, place, streams, corpus, params, start_step, cache, init, notes,
              teacher):
  """The run header (written to metrics.jsonl whole, with the compile's seconds added) and a
  few lines for people: model, mesh, batch (and phases), attention kernel, workdir, fresh or
  resumed, the frozen teacher or reference, then `notes` (what changed since the last
  start)."""
  config = run.config
  header = {
      'event': 'start', 'step': start_step, 'workdir': workdir,
      'processes': jax.process_count(),
      'devices': jax.device_count(), 'device_kind': jax.devices()[0].device_kind,
      'mesh': dict(place.mesh.shape), 'params': counting.param_count(params),
      'batch_global': config.train.batch_size, 'batch_per_process': streams.local_batch_size,
      'streams': f'{streams.local[0]}..{streams.local[-1]} of {streams.num_streams}',
      'batch_per_device': config.train.batch_size // sharding.batch_shards(place.mesh),
      'seq_len': config.data.seq_len, 'vocab': corpus.tokenizer and corpus.tokenizer.vocab_size,
      'attention_kernel': place.kernel[0], 'attention_kernel_why': place.kernel[1],
      'train_documents': corpus.train_documents(), 'compile_cache': cache or 'off',
  }
  header.update(_optional_fields(run, params, init))
  frozen = teacher_lib.describe(config, teacher) if teacher else ({}, None)
  header.update(frozen[0])
  lines = _lines(run, workdir, header, start_step)
  progress.say('\n'.join(lines + ([frozen[1]] if frozen[1] else []) + notes))
  return header


def _optional_fields(run, params, init):
  """The header's fields for what only some runs have: LoRA, quantized matmuls, a task or
  span corruption, phases, pretrained weights."""
  config, fields = run.config, {}
  trains = state_lib.trainable(config, params)  # LoRA, or an indexer's warm-up
  if trains is not None:
    fields['params_trainable'] = sum(x.size for x, t in zip(jax.tree.leaves(params),
                                                            jax.tree.leaves(trains)) if t)
  if config.model.quant.mode != 'none':
    fields['quant'] = config.model.quant.mode
  if config.data.task.kind:
    fields.update(task=config.data.task.kind, num_labels=config.model.num_labels)
  elif run.span_lengths:
    fields['span_lengths'] = dict(zip(('raw', 'inputs', 'targets'), run.span_lengths))
  if len(run.phases) > 1:
    fields['phases'] = [[p.last, p.batch_size, p.seq_len] for p in run.phases]
  if init:
    fields.update(init_params=config.train.init_params, init_params_held=len(init.held),
                  new_params=','.join(init.new) or 'none',
                  dropped_params=','.join(init.dropped) or 'none')
  return fields


def _lines(run, workdir, h, start_step):
  """The header for people: model, mesh, kernel, data, workdir."""
  config, phases, m, lora = run.config, run.phases, run.config.model, run.config.train.lora
  mesh = sharding.describe(h['mesh'])
  processes = f', {h["processes"]} processes' if h['processes'] > 1 else ''
  return [
      f'model   {m.family}, {h["params"]:,} parameters' +
      (f' ({h["params_trainable"]:,} train: LoRA rank {lora.rank} on {lora.targets})'
       if lora.rank else '') +
      (f'; {h["quant"]} matmuls' if 'quant' in h else '') +
      f'; {config.optim.name}, {config.train.steps} steps of {h["batch_global"]} x '
      f'{h["seq_len"]} tokens' +
      (f' (first {phases_lib.describe(phases[:-1])})' if len(phases) > 1 else ''),
      f'mesh    {mesh + " on " if mesh else ""}{h["devices"]} {h["device_kind"]} device'
      f'{"s" if h["devices"] > 1 else ""}{processes}; {h["batch_per_device"]} sequences '
      'per device',
      f'kernel  {h["attention_kernel"]} attention ({h["attention_kernel_why"]})',
      f'data    {h["train_documents"]:,} train documents, '
      + (f'a {h["vocab"]:,}-piece tokenizer' if h['vocab'] else 'no tokenizer')
      + (f'; task {h["task"]}' if 'task' in h else '')
      + (f'; span corruption of {h["span_lengths"]["raw"]}-token pieces -> '
         f'{h["span_lengths"]["inputs"]} inputs, {h["span_lengths"]["targets"]} targets'
         if 'span_lengths' in h else ''),
      f'workdir {workdir}: ' + (f'resumed from step {start_step}' if start_step else 'fresh')
      + (f', weights from {h["init_params"]}' if 'init_params' in h else ''),
  ] + ([_muon_rates(config.optim)] if config.optim.name == 'muon' else [])


def _muon_rates(o):
  """Muon's two peak rates, the AdamW leaves' as the share optim.muon.adamw_rate says."""
  return (f'optim   muon at peak {o.learning_rate:g} on the hidden matrices, AdamW at '
          f'{o.learning_rate * o.muon.adamw_rate:g} on the rest (optim.muon.adamw_rate='
          f'{o.muon.adamw_rate:g} x optim.learning_rate)')


class _Log:
  """Reads each step's metrics (one step late), stops on NaN/Inf streaks, finds loss spikes
  (a `spike` row, or spikes.Rollback under train.spike.action=rollback), and every
  train.log_every steps writes a row: the step's metrics plus throughput and MFU (from the
  median of the recent step times, so an eval or a save does not move them), and for a
  mixture the real tokens each source gave the steps since the last row, this one's included
  (tokens_NAME, all processes)."""

  def __init__(self, run, writer, goodput, watchdog, sources=()):
    config = run.config
    self.run, self.t, self.writer, self.goodput = run, config.train, writer, goodput
    self.watchdog, self.sources = watchdog, sources
    self.spikes = spikes_lib.Detector(config.train.spike)
    self.source_tokens = np.zeros(len(sources), np.int64)
    # MFU's FLOPs, counted (the model traced once more) only where the devices' peak is known
    known = metrics_lib.mfu(1.0, jax.devices()) is not None
    self.flops_per_token = counting.flops_per_token(config) if known else None
    self.alarms = metrics_lib.Alarms(config)
    self.last_row, self.pending, self.start = None, None, None

  def hold(self, step, metrics, source_tokens=None):
    """The step's metrics, read once its successor is dispatched (flush)."""
    self.pending = (step, metrics, source_tokens)
    self.start = self.start or time.time()  # the first step's time runs from its dispatch

  def flush(self):
    if self.pending:
      pending, self.pending = self.pending, None
      self(*pending)

  def pause(self, seconds):
    """Time spent outside training (an eval) is not counted in the first step's time."""
    self.start = self.start and self.start + seconds

  def __call__(self, step, metrics, source_tokens=None):
    t = self.t
    metrics = jax.device_get(metrics)  # the step has completed
    self.watchdog.beat(step)
    if source_tokens is not None:  # the real tokens of this step's batch, per source
      self.source_tokens += source_tokens
    if metrics['nonfinite_streak'] >= t.max_nonfinite_steps:
      raise TrainingError(
          f'{int(metrics["nonfinite_streak"])} updates in a row had a NaN/Inf loss or gradient '
          f'(last at step {step}); weights are unchanged since; lower optim.learning_rate or '
          'check the data')
    spike = self.spikes.check(step, metrics)
    if spike and t.spike.action == 'rollback':
      raise spikes_lib.Rollback(spike)
    if spike:
      self.writer.write({'step': step, 'event': 'spike', **spike.row()})
      progress.say(f'spike: {spike.describe()}; training on (train.spike.action=log)')
    if step % t.log_every and step not in (1, t.steps):  # step 1 shows the initial loss
      return
    # this phase's tokens over the median recent step time (none before a step is timed)
    median = self.watchdog.median_seconds()
    tokens_per_sec = median and self.run.phase_at(step).tokens_per_step / median
    row = {'step': step, 'tokens_per_sec': tokens_per_sec,
           'mfu': median and self.flops_per_token and metrics_lib.mfu(
               tokens_per_sec * self.flops_per_token, jax.devices())}
    row.update({k: np.round(v, 4).tolist() if np.ndim(v) else v for k, v in metrics.items()})
    if self.sources:
      counts = self.source_tokens
      if jax.process_count() > 1:  # each process counted its own streams
        counts = multihost_utils.process_allgather(counts).sum(0)
      row.update({f'tokens_{name}': int(c) for name, c in zip(self.sources, counts)})
      self.source_tokens = np.zeros_like(self.source_tokens)
    row.update(self.goodput.window_row())
    row.update(self.watchdog.window_row())
    self.alarms.check(step, metrics)
    self.writer.write(row)
    left = self.run.total_tokens - phases_lib.tokens_before(self.run.phases, step)
    pace = (f' tokens/s {tokens_per_sec:,.0f} eta {left / tokens_per_sec:,.0f}s' if median else
            f' first step {time.time() - self.start:.1f}s' if self.last_row is None else '')
    progress.say(f'step {step}/{t.steps} loss {row["loss"]:.4f} lr '
                 f'{row["learning_rate"]:.2e} grad_norm {row["grad_norm"]:.3f}{pace}')
    self.last_row = row


@dataclasses.dataclass
class _Built:
  """What setup made; a rollback moves `step`, `state`, `data_iter` and `rollbacks`."""
  place: runtime.Placement
  cache: str | None  # the persistent compilation cache's directory
  streams: runtime.Streams
  corpus: Any
  parts: runtime.ModelState
  init: runtime.InitPlan | None  # what train.init_params gave
  saved: Any  # the persistent checkpoint tier (zoo/train/checkpoint.py)
  local: Any  # the local tier (zoo/train/local_tier.py), or None
  notes: list  # what changed since the last start, for the header
  rollbacks: list
  data_iter: Any
  step: int
  state: dict
  teacher: dict | None  # train.teacher's variables, read once


def _build(run, workdir, place):
  """Setup (data, model state, checkpoint tiers; each fails with one line before any
  compile), then the state: the newest readable checkpoint, else initialised sharded."""
  config = run.config
  runtime.check_workdir(config, workdir)
  previous = run_config.read(workdir)  # the last start's config, if any
  changed = run_config.changes(previous, config)
  cache = runtime.compile_cache(config)
  streams = runtime.input_streams(config, place.mesh)
  corpus = runtime.corpus(config, workdir)
  parts = runtime.model_state(run, place.mesh)
  if parts.teacher:
    teacher_lib.check_tokenizer(config, workdir, parts.teacher.config)
  run_config.check_shapes(changed, workdir, parts.abstract['params'])  # before a restore
  init = runtime.init_plan(config, parts)
  saved, local = runtime.checkpointer(config, workdir), runtime.local_tier(config)
  rollbacks = spikes_lib.read(workdir)
  data_iter = runtime.train_batches(run, streams, corpus,
                                    spikes_lib.skips(run.data_skips, rollbacks))
  step, state = _start(config, place, parts, saved, local, data_iter)
  run_config.write(config, workdir)
  return _Built(place, cache, streams, corpus, parts, init, saved, local,
                run_config.describe(changed, previous, run, step), rollbacks, data_iter, step,
                state, parts.teacher and teacher_lib.restore(parts.teacher))


def _start(config, place, state, saved, local, data_iter):
  """The newest readable checkpoint of either tier (data position included), else a fresh
  sharded state (train.init_params' weights, if set) -> (step, state)."""
  restored = local_tier_lib.restore_newest(saved, local, state.abstract, data_iter)
  if restored:
    return restored
  fresh = place.jit(state.init_fn, None, state.shardings)(
      jax.random.PRNGKey(config.train.seed))
  if config.train.init_params:  # pretrained weights, fresh optimizer state (and new heads)
    fresh['params'] = runtime.initial_params(config, state, fresh['params'])
    fresh.update(runtime.initial_collections(config, state))  # DeepSeek-V3's routing biases
  return 0, fresh


def _roll_back(spike, run, workdir, b, writer):
  """train.spike.action=rollback: back to the newest checkpoint at least rollback_steps
  before the spike (the fresh state when there is none), the newer ones moved aside, the
  next skip_batches batches dropped; `b` moves there."""
  config = run.config
  s = config.train.spike
  too_many = spikes_lib.too_many(spike.step, b.rollbacks, s)
  if too_many:
    raise TrainingError(too_many)
  for tier in filter(None, (b.saved, b.local)):
    tier.set_aside_after(max(spike.step - s.rollback_steps, 0),
                         f'rolled-back-{spike.step}-{int(time.time())}')
  skips = spikes_lib.skips(run.data_skips, b.rollbacks)
  b.data_iter = runtime.train_batches(run, b.streams, b.corpus, skips)
  b.step, b.state = _start(config, b.place, b.parts, b.saved, b.local, b.data_iter)
  first, last = spikes_lib.skipped_range(b.step, s.skip_batches, skips)
  b.rollbacks = spikes_lib.record(workdir, b.rollbacks, {
      'spike_step': spike.step, 'restored_step': b.step, 'skipped_batches': [first, last],
      **spike.row()})
  b.data_iter.skips = spikes_lib.skips(run.data_skips, b.rollbacks)
  writer.write({'step': spike.step, 'event': 'rollback', 'restored_step': b.step,
                'skipped_batches': [first, last], **spike.row()})
  recent = sum(r['spike_step'] > spike.step - s.rollback_window for r in b.rollbacks)
  progress.say(f'spike: {spike.describe()}; rolled back to step {b.step}, skipping batches '
               f'{first}..{last} (rollback {recent} of at most {s.max_rollbacks} in '
               f'{s.rollback_window} steps)')


def _canary(config, place, state, batch):
  """zoo/train/canary.py where the mesh wants it -> (placement to train with, lines)."""
  if not canary_lib.wanted(config.train.canary, place.mesh):
    return place, []
  try:
    place, line = canary_lib.check(config, place, state, batch)
  except canary_lib.Mismatch as e:
    raise TrainingError(str(e)) from None
  return place, [line] if line else []


def _next_batch(run, place, data_iter, step):
  """-> (step's global batch, a mixture's real tokens per source in this process's part of
  it, or None)."""
  local = data_iter.batch(step)
  tokens = local.pop(pipeline.SOURCE_TOKENS, None)
  return sharding.to_global(local, place.mesh, run.phase_at(step).batch_size), tokens


class _Steps:
  """The train step compiled once per batch shape (one per phase's shape), each ahead of its
  first use, its seconds charged to compile and kept out of the throughput."""

  def __init__(self, jitted, goodput, log, cache):
    self.jitted, self.goodput, self.log, self.cache = jitted, goodput, log, cache
    self.compiled, self.seconds = {}, 0.0

  def __call__(self, state, batch):
    shape = tuple(sorted((k, v.shape) for k, v in batch.items()))
    if shape not in self.compiled:
      with self.goodput.charge('step'):
        self.log.flush()  # the step in flight is timed before the compile, not across it
      with self.goodput.charge('compile'), self.log.watchdog.paused():
        # rows x length (an image row: x its pixels and channels; a pair row: x 2 x length)
        dims = ' x '.join(map(str, next(iter(batch.values())).shape))
        progress.say(f'compiling the train step for {dims} (compile cache: '
                     f'{self.cache or "off"})')
        start = time.perf_counter()
        with progress.heartbeat('compiling the train step'):
          self.compiled[shape] = self.jitted.compile(state, batch)
        seconds = time.perf_counter() - start
        progress.say(f'compiled in {seconds:.1f} s')
      self.seconds += seconds
    return self.compiled[shape]


def _first_step(run, workdir, b, log, goodput, writer, task_eval):
  """The first batch, the canary, the evaluator, the run header, and the train step
  compiled ahead of the first step (so the header can say how long) -> (steps, evaluate,
  first batch)."""
  config = run.config
  with goodput.charge('data'):
    batch = _next_batch(run, b.place, b.data_iter, b.step + 1)
  with goodput.charge('compile'):  # the mesh's first step against one device's
    b.place, canary = _canary(config, b.place, b.state, batch[0])
  with goodput.charge('setup'):
    evaluate = evaluate_lib.evaluator(config, b.place, b.streams, b.corpus, b.parts, task_eval,
                                      b.teacher)
  header = _describe(run, workdir, b.place, b.streams, b.corpus, b.state['params'], b.step,
                     b.cache, b.init, b.notes + canary, b.parts.teacher)
  steps = _Steps(b.parts.jit_train_step(b.place, config, b.teacher, donate=True), goodput,
                 log, b.cache)
  steps(b.state, batch[0])
  writer.write({**header, 'compile_seconds': round(steps.seconds, 2)})
  return steps, evaluate, batch


def train(run, workdir, task_eval=None, place=None):
  """Trains (or resumes) the resolved run (zoo/run); returns the last train metrics row.
  task_eval: the factory of a task's eval metrics (zoo/infer/task_eval.make; the launcher
  passes it); place: the run's runtime.placement, when the caller made it. SIGINT or
  SIGTERM: the current step finishes and is saved, then stop.Interrupted."""
  with stop_lib.Signals() as signals:
    return _train(run, workdir, task_eval, place or runtime.placement(run), signals)


def _train(run, workdir, task_eval, place, signals):
  t, goodput = run.config.train, goodput_lib.Goodput()
  # --- build and restore: each part fails with one line before any compile
  with goodput.charge('setup'):
    b = _build(run, workdir, place)
  if b.step >= t.steps:
    progress.say(f'already trained: checkpoint at step {b.step} >= train.steps={t.steps}')
    b.saved.close()
    return None
  start_step = b.step
  with contextlib.ExitStack() as closing:
    with goodput.charge('setup'):
      writer = metrics_lib.Writer(workdir, enabled=jax.process_index() == 0)
    for close in (writer.close, b.saved.close, b.local and b.local.close):
      if close:
        closing.callback(close)
    watchdog = watchdog_lib.Watchdog(t.hang, workdir)
    closing.callback(watchdog.close)
    log = _Log(run, writer, goodput, watchdog, b.corpus.sources)
    steps, evaluate, batch = _first_step(run, workdir, b, log, goodput, writer,
                                         task_eval)
    profiler = profile_lib.Profiler(t.profile_steps, workdir, b.step)
    closing.callback(profiler.close)
    stop = actions_lib.Stop(signals)
    actions = [actions_lib.Evaluate(t.eval_every, t.steps, evaluate, writer, log), stop,
               actions_lib.Save(b.saved, t.checkpoint_every, t.steps, stop,
                                t.fault.kill_in_save)]
    if b.local:
      actions.append(actions_lib.Save(b.local, t.local_tier.every))
    # --- for each step: dispatch it, read the previous step's metrics, the actions due
    last = b.step if stop.signum else t.steps
    while b.step < last:
      b.step += 1
      try:
        if batch is None:
          with goodput.charge('data'):
            batch = _next_batch(run, b.place, b.data_iter, b.step)
        train_step = steps(b.state, batch[0])  # a new phase's shape compiles here
        b.state = faults.before_step(t.fault, b.step, b.state, b.rollbacks)
        profiler.start(b.step)
        with goodput.charge('step'):
          b.state, metrics = train_step(b.state, batch[0])
          log.flush()  # the previous step's row, while this one runs
        profiler.stop(b.step, metrics)
        log.hold(b.step, metrics, batch[1])
        batch = None
        actions_lib.run_due(actions, b.step, b.state, b.data_iter, log, goodput, watchdog)
      except spikes_lib.Rollback as rollback:
        with goodput.charge('setup'), watchdog.paused():
          _roll_back(rollback.spike, run, workdir, b, writer)
        log.spikes.rewind(b.step)
        log.pending = batch = None
        continue
      if stop.signum:
        break
    with goodput.charge('step'):
      log.flush()
    end = goodput.final_row()
    writer.write({'event': 'end', 'step': b.step, **end})
  if stop.signum:
    _interrupted(stop.signum, b.step, start_step)
  progress.say(f'done in {end["wall_seconds"]:.0f}s; goodput {end["goodput"]:.1%} (train '
               f'steps), compile {end["time_compile"]:.1f}s, eval {end["time_eval"]:.1f}s, '
               f'checkpoints {end["time_checkpoint"]:.1f}s, data {end["time_data"]:.1f}s')
  return log.last_row


def _interrupted(signum, step, start_step):
  """After a signal's save: every process waits for the others, then stop.Interrupted."""
  if jax.process_count() > 1:  # no process leaves before every part of the save is in
    multihost_utils.sync_global_devices('zoo: stopped after a save')
  saved_at = (f'saved a checkpoint at step {step}' if step > start_step else
              f'no step ran; the checkpoint at step {step} is unchanged' if step else
              'no step ran, nothing saved')
  raise stop_lib.Interrupted(f'{signal.Signals(signum).name}: {saved_at}; run the same '
                             'command to resume', signum, step)
