"""The training loop, top to bottom: setup, state, loop (log, eval, checkpoint).

It knows no family: the loss (zoo/families) says what the metrics rows hold, and the log
writes whatever rows the train step returns.
"""

import signal
import time

import jax
import numpy as np
from jax.experimental import multihost_utils

from zoo import counting
from zoo import phases as phases_lib
from zoo import sharding
from zoo.data import pipeline
from zoo.families import spans
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
from zoo.train import watchdog as watchdog_lib


class TrainingError(RuntimeError):
  """Training cannot go on (e.g. repeated NaN/Inf); the message says why."""


def _describe(config, workdir, place, streams, corpus, params, start_step, cache, init,
              notes, phases):
  """The run header (written to metrics.jsonl whole, with the compile's seconds added) and a
  few lines for people: model, mesh, batch (and phases), attention kernel, workdir, fresh or
  resumed, then `notes` (what changed since the last start)."""
  header = {
      'event': 'start', 'step': start_step, 'workdir': workdir,
      'processes': jax.process_count(),
      'devices': jax.device_count(), 'device_kind': jax.devices()[0].device_kind,
      'mesh': dict(place.mesh.shape), 'params': counting.param_count(params),
      'batch_global': config.train.batch_size, 'batch_per_process': streams.local_batch_size,
      'streams': f'{streams.local[0]}..{streams.local[-1]} of {streams.num_streams}',
      'batch_per_device': config.train.batch_size // sharding.batch_shards(place.mesh),
      'seq_len': config.data.seq_len, 'vocab': corpus.tokenizer.vocab_size,
      'attention_kernel': place.kernel[0], 'attention_kernel_why': place.kernel[1],
      'train_documents': corpus.train_documents(), 'compile_cache': cache or 'off',
  }
  lora = config.train.lora
  if lora.rank:
    trains = jax.tree.leaves(state_lib.trainable(config, params))
    header['params_trainable'] = sum(x.size for x, t in zip(jax.tree.leaves(params), trains)
                                     if t)
  if config.model.quant.mode != 'none':
    header['quant'] = config.model.quant.mode
  if config.data.task.kind:
    header.update(task=config.data.task.kind, num_labels=config.model.num_labels)
  elif config.data.objective == 'span_corruption':
    header['span_lengths'] = dict(zip(('raw', 'inputs', 'targets'),
                                      spans.lengths(config.data)))
  if len(phases) > 1:
    header['phases'] = [[p.last, p.batch_size, p.seq_len] for p in phases]
  if init:
    header.update(init_params=config.train.init_params, init_params_held=len(init.held),
                  new_params=','.join(init.new) or 'none',
                  dropped_params=','.join(init.dropped) or 'none')
  h, m = header, config.model
  mesh = ' x '.join(f'{a} {n}' for a, n in h['mesh'].items() if n > 1)
  processes = f', {h["processes"]} processes' if h['processes'] > 1 else ''
  lines = [
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
      f'data    {h["train_documents"]:,} train documents, a {h["vocab"]:,}-piece tokenizer'
      + (f'; task {h["task"]}' if 'task' in h else '')
      + (f'; span corruption of {h["span_lengths"]["raw"]}-token pieces -> '
         f'{h["span_lengths"]["inputs"]} inputs, {h["span_lengths"]["targets"]} targets'
         if 'span_lengths' in h else ''),
      f'workdir {workdir}: ' + (f'resumed from step {start_step}' if start_step else 'fresh')
      + (f', weights from {h["init_params"]}' if init else ''),
      *notes,
  ]
  print('\n'.join(lines), flush=True)
  return header


class _Log:
  """Reads each step's metrics (one step late), stops on NaN/Inf streaks, finds loss spikes
  (a `spike` row, or spikes.Rollback under train.spike.action=rollback), and every
  train.log_every steps writes a row: the step's metrics plus throughput and MFU, and for a
  mixture the real tokens each source gave the steps since the last row, this one's included
  (tokens_NAME, all processes)."""

  def __init__(self, config, writer, goodput, phases, watchdog, sources=()):
    self.t, self.writer, self.goodput, self.sources = config.train, writer, goodput, sources
    self.watchdog = watchdog
    self.spikes = spikes_lib.Detector(config.train.spike)
    self.source_tokens = np.zeros(len(sources), np.int64)
    self.flops_per_token = counting.flops_per_token(config)
    self.phases, self.window_tokens = phases, 0
    self.alarms = metrics_lib.Alarms(config)
    self.last_row, self.window_steps, self.window_start = None, 0, time.time()

  def pause(self, seconds):
    """Time spent outside training (eval) is not counted in tokens/s."""
    self.window_start += seconds

  def __call__(self, step, metrics, source_tokens=None):
    t = self.t
    metrics = jax.device_get(metrics)  # the step has completed
    self.watchdog.beat(step)
    if source_tokens is not None:  # the real tokens of this step's batch, per source
      self.source_tokens += source_tokens
    self.window_steps += 1
    self.window_tokens += self.phases[phases_lib.at(self.phases, step)].tokens_per_step
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
      print(f'spike: {spike.describe()}; training on (train.spike.action=log)', flush=True)
    if step % t.log_every and step not in (1, t.steps):  # step 1 shows the initial loss
      return
    elapsed = time.time() - self.window_start
    tokens_per_sec = self.window_tokens / elapsed
    row = {'step': step, 'tokens_per_sec': tokens_per_sec,
           'mfu': metrics_lib.mfu(tokens_per_sec * self.flops_per_token, jax.devices())}
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
    eta = (phases_lib.total_tokens(self.phases) -
           phases_lib.tokens_before(self.phases, step)) / tokens_per_sec
    print(f'step {step}/{t.steps} loss {row["loss"]:.4f} lr {row["learning_rate"]:.2e} '
          f'grad_norm {row["grad_norm"]:.3f} tokens/s {tokens_per_sec:,.0f} '
          f'eta {eta:,.0f}s', flush=True)
    self.last_row, self.window_start = row, time.time()
    self.window_steps = self.window_tokens = 0


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


def _roll_back(spike, config, workdir, tiers, place, parts, streams, corpus, rollbacks,
               writer):
  """train.spike.action=rollback: back to the newest checkpoint at least rollback_steps
  before the spike (the fresh state when there is none), the newer ones moved aside, the
  next skip_batches batches dropped -> (restored step, state, data iterator, rollbacks)."""
  s = config.train.spike
  too_many = spikes_lib.too_many(spike.step, rollbacks, s)
  if too_many:
    raise TrainingError(too_many)
  for tier in filter(None, tiers):
    tier.set_aside_after(max(spike.step - s.rollback_steps, 0),
                         f'rolled-back-{spike.step}-{int(time.time())}')
  skips = spikes_lib.skips(config, rollbacks)
  data_iter = runtime.train_batches(config, streams, corpus, skips)
  step, state = _start(config, place, parts, *tiers, data_iter)
  first, last = spikes_lib.skipped_range(step, s.skip_batches, skips)
  rollbacks = spikes_lib.record(workdir, rollbacks, {
      'spike_step': spike.step, 'restored_step': step, 'skipped_batches': [first, last],
      **spike.row()})
  data_iter.skips = spikes_lib.skips(config, rollbacks)
  writer.write({'step': spike.step, 'event': 'rollback', 'restored_step': step,
                'skipped_batches': [first, last], **spike.row()})
  recent = sum(r['spike_step'] > spike.step - s.rollback_window for r in rollbacks)
  print(f'spike: {spike.describe()}; rolled back to step {step}, skipping batches '
        f'{first}..{last} (rollback {recent} of at most {s.max_rollbacks} in '
        f'{s.rollback_window} steps)', flush=True)
  return step, state, data_iter, rollbacks


def _canary(config, place, state, batch):
  """zoo/train/canary.py where the mesh wants it -> (placement to train with, lines)."""
  if not canary_lib.wanted(config, place.mesh):
    return place, []
  try:
    place, line = canary_lib.check(config, place, state, batch)
  except canary_lib.Mismatch as e:
    raise TrainingError(str(e)) from None
  return place, [line] if line else []


def _next_batch(phases, place, data_iter, step):
  """-> (step's global batch, a mixture's real tokens per source in this process's part of
  it, or None)."""
  local = data_iter.batch(step)
  tokens = local.pop(pipeline.SOURCE_TOKENS, None)
  batch_size = phases[phases_lib.at(phases, step)].batch_size
  return sharding.to_global(local, place.mesh, batch_size), tokens


class _Steps:
  """The train step compiled once per batch shape (one per phase's shape), each ahead of its
  first use, its seconds charged to compile and kept out of the throughput."""

  def __init__(self, jitted, goodput, log, cache):
    self.jitted, self.goodput, self.log, self.cache = jitted, goodput, log, cache
    self.compiled, self.seconds = {}, 0.0

  def __call__(self, state, batch):
    shape = tuple(sorted((k, v.shape) for k, v in batch.items()))
    if shape not in self.compiled:
      with self.goodput.charge('compile'):
        rows, length = next(iter(batch.values())).shape[:2]
        print(f'compiling the train step for {rows} x {length} (compile cache: '
              f'{self.cache or "off"})', flush=True)
        start = time.perf_counter()
        self.compiled[shape] = self.jitted.compile(state, batch)
        seconds = time.perf_counter() - start
        print(f'compiled in {seconds:.1f} s', flush=True)
      self.log.pause(seconds)
      self.seconds += seconds
    return self.compiled[shape]


def train(config, workdir, task_eval=None):
  """Trains (or resumes) per config; returns the last train metrics row. task_eval: the
  factory of a task's eval metrics (zoo/infer/task_eval.make; the launcher passes it).
  SIGINT or SIGTERM: the current step finishes and is saved, then stop.Interrupted."""
  with stop_lib.Signals() as signals:
    return _train(config, workdir, task_eval, signals)


def _train(config, workdir, task_eval, signals):
  t = config.train
  goodput = goodput_lib.Goodput()
  # --- setup: mesh, data, model state; each fails with one line before any compile
  with goodput.charge('setup'):
    runtime.check_workdir(config, workdir)
    previous = run_config.read(workdir)  # the last start's config, if any
    changed = run_config.changes(previous, config)
    place = runtime.placement(config)
    cache = runtime.compile_cache(config)
    streams = runtime.input_streams(config, place.mesh)
    corpus = runtime.corpus(config, workdir)
    parts = runtime.model_state(config, place.mesh)
    run_config.check_shapes(changed, workdir, parts.abstract['params'])  # before a restore
    init = runtime.init_plan(config, parts)
    saved = runtime.checkpointer(config, workdir)
    local = runtime.local_tier(config)
    phases = phases_lib.resolve(config)
    rollbacks = spikes_lib.read(workdir)
    data_iter = runtime.train_batches(config, streams, corpus,
                                      spikes_lib.skips(config, rollbacks))

    # --- state: resume from the newest readable checkpoint, else initialise sharded
    start_step, state = _start(config, place, parts, saved, local, data_iter)
    run_config.write(config, workdir)
  if start_step >= t.steps:
    print(f'already trained: checkpoint at step {start_step} >= train.steps={t.steps}')
    saved.close()
    return None
  with goodput.charge('setup'):
    writer = metrics_lib.Writer(workdir, enabled=jax.process_index() == 0)
  watchdog = watchdog_lib.Watchdog(t.hang, workdir)
  log = _Log(config, writer, goodput, phases, watchdog, corpus.sources)
  with goodput.charge('data'):
    batch, tokens = _next_batch(phases, place, data_iter, start_step + 1)
  with goodput.charge('compile'):  # the mesh's first step against one device's
    place, canary = _canary(config, place, state, batch)
  with goodput.charge('setup'):
    evaluate = evaluate_lib.evaluator(config, place, streams, corpus, parts, task_eval)
  header = _describe(config, workdir, place, streams, corpus, state['params'], start_step,
                     cache, init, run_config.describe(changed, previous, config, start_step)
                     + canary, phases)
  train_steps = _Steps(place.jit(
      parts.train_step(config), (parts.shardings, sharding.batch_sharding(place.mesh)),
      (parts.shardings, sharding.replicated(place.mesh)), donate_argnums=(0,)),
      goodput, log, cache)
  with watchdog.paused():
    train_steps(state, batch)  # ahead of the first step, so the header can say how long
  writer.write({**header, 'compile_seconds': round(train_steps.seconds, 2)})
  profiler = profile_lib.Profiler(t.profile_steps, workdir, start_step)

  # --- loop: dispatch step n, then read step n-1's metrics while n runs
  pending, step = None, start_step
  stopped = signals.agreed()  # a signal during setup or the compile: no step runs
  last = start_step if stopped else t.steps
  try:
    while step < last:
      step += 1
      try:
        if batch is None:
          with goodput.charge('data'):
            batch, tokens = _next_batch(phases, place, data_iter, step)
        with watchdog.paused():
          train_step = train_steps(state, batch)  # a new phase's shape compiles here
        state = faults.before_step(t.fault, step, state, rollbacks)
        profiler.start(step)
        with goodput.charge('step'):
          state, metrics = train_step(state, batch)
          batch = None
          if pending:
            log(*pending)
        profiler.stop(step, metrics)
        pending = (step, metrics, tokens)

        if step % t.eval_every == 0 or step == t.steps:
          with goodput.charge('step'):
            log(*pending)
          pending, eval_start = None, time.time()
          with goodput.charge('eval'), watchdog.paused():
            eval_row = evaluate(state_lib.model_variables(state))
          writer.write({'step': step, **eval_row})
          print(f'step {step} {evaluate_lib.describe(eval_row)}', flush=True)
          log.pause(time.time() - eval_start)
        stopped = signals.agreed()
        persist = step % t.checkpoint_every == 0 or step == t.steps or stopped
        to_local = local and step % t.local_tier.every == 0
        if pending and (persist or to_local):  # a checkpointed step's row is written first:
          with goodput.charge('step'):         # a kill cannot lose it
            log(*pending)
          pending = None
        if persist:
          with goodput.charge('checkpoint'), watchdog.paused():
            saved.save(step, state, data_iter)
          if step == t.fault.kill_in_save:
            faults.kill_while_saving(saved.directory, step)
        if to_local:
          with goodput.charge('checkpoint'), watchdog.paused():
            local.save(step, state, data_iter)
      except spikes_lib.Rollback as rollback:
        with goodput.charge('setup'), watchdog.paused():
          step, state, data_iter, rollbacks = _roll_back(
              rollback.spike, config, workdir, (saved, local), place, parts, streams, corpus,
              rollbacks, writer)
        log.spikes.rewind(step)
        pending = batch = None
        continue
      if stopped:
        break
    if pending:
      with goodput.charge('step'):
        log(*pending)
    end = goodput.final_row()
    writer.write({'event': 'end', 'step': step, **end})
  finally:
    watchdog.close()
    profiler.close()
    if local:
      local.close()
    saved.close()
    writer.close()
  if stopped:
    if jax.process_count() > 1:  # no process leaves before every part of the save is in
      multihost_utils.sync_global_devices('zoo: stopped after a save')
    name = signal.Signals(stopped).name
    saved_at = (f'saved a checkpoint at step {step}' if step > start_step else
                f'no step ran; the checkpoint at step {step} is unchanged' if step else
                'no step ran, nothing saved')
    raise stop_lib.Interrupted(f'{name}: {saved_at}; run the same command to resume',
                               stopped, step)
  print(f'done in {end["wall_seconds"]:.0f}s; goodput {end["goodput"]:.1%} (train steps), '
        f'compile {end["time_compile"]:.1f}s, eval {end["time_eval"]:.1f}s, checkpoints '
        f'{end["time_checkpoint"]:.1f}s, data {end["time_data"]:.1f}s', flush=True)
  return log.last_row
