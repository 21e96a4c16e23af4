"""GRPO's loop (train.objective='grpo'; the loss: zoo/objectives/grpo.py). Each step:

  sample   train.batch_size / G prompts (a fresh permutation each epoch), each G times, with
           the zoo's cached sampler on the training mesh (generate.temperature, top_k, top_p;
           train.grpo.max_new_tokens), cut at the end of the assistant's turn
  score    the reward on each completion's text and its prompt's example; advantages
           against the prompt's group (zoo/objectives/grpo.py: advantages)
  update   the sampling policy's and the reference's log-probabilities of the completions,
           then train.grpo.updates optimizer steps on those rows (the clipped ratio)

Logged each train.log_every steps: the reward's mean and spread, the loss, KL to the
reference, the clip fraction, the mean completion length, the groups skipped, and the
seconds spent sampling and training apart. Every train.eval_every steps (and at step 0): the
held-out prompts answered greedily, their mean reward (eval_reward) and the share with full
reward (eval_accuracy). Checkpoints as the train loop's (train.checkpoint_every, Ctrl-C and
SIGTERM save the step); a resumed run samples the prompts it would have.

Glossary: P prompts, G group size, B rows of a batch (P x G), L length.
"""

import dataclasses
import signal
import time
from typing import Any

import jax
import numpy as np

from zoo import progress
from zoo import sharding
from zoo.data import chat
from zoo.data import task as task_lib
from zoo.errors import ConfigError
from zoo.infer import generate
from zoo.models import lora
from zoo.objectives import grpo as grpo_lib
from zoo.objectives import preference
from zoo.post import rewards as rewards_lib
from zoo.post import rows as rows_lib
from zoo.train import metrics as metrics_lib
from zoo.train import run_config
from zoo.train import runtime
from zoo.train import state as state_lib
from zoo.train import stop as stop_lib
from zoo.train import teacher as teacher_lib


@dataclasses.dataclass
class _Setup:
  place: Any
  task: Any  # the prompts (zoo/data/task.py: Task; examples {'prompt_ids', 'index'})
  parts: Any  # runtime.ModelState
  saved: Any  # the checkpointer
  reward: Any  # the reward function
  end_id: int  # the id an assistant turn ends with
  prompt_len: int  # every prompt is left-padded to this length (one sampler shape)
  reference: Any  # the reference copy's variables, or None
  fns: dict = None  # the jitted functions (_functions)


class _Position:
  """The data position a checkpoint records: GRPO's prompts follow from the step alone."""

  def get_state(self):
    return {'grpo': 'prompts follow from the step'}


def _setup(run, workdir, place):
  """Everything before the first compile, each part failing with one line."""
  config = run.config
  runtime.check_workdir(config, workdir)
  g = config.train.grpo
  if config.train.batch_size % g.group_size:
    raise ConfigError(f'train.batch_size={config.train.batch_size} must be a multiple of '
                      f'train.grpo.group_size={g.group_size} (completions per step)')
  reward = rewards_lib.load(g.reward)
  task = runtime.corpus(config, workdir)
  parts = runtime.model_state(run, place.mesh)
  if parts.teacher:
    teacher_lib.check_tokenizer(config, workdir, parts.teacher.config)
  runtime.init_plan(config, parts)
  longest = max(len(e['prompt_ids']) for split in (task.train, task.eval) for e in split)
  return _Setup(place, task, parts, runtime.checkpointer(config, workdir), reward,
                chat.end_of_turn_id(task.template, task.tokenizer), longest,
                parts.teacher and teacher_lib.restore(parts.teacher))


def _functions(config, s):
  """The sampler (the config's sampling, and greedy for eval), the log-probabilities of rows
  under the model and under the reference, and the train step, jitted on the mesh."""
  g, gen, place, parts = config.train.grpo, config.generate, s.place, s.parts
  variables = state_lib.model_variables(parts.shardings)
  replicated, rows = sharding.replicated(place.mesh), sharding.batch_sharding(place.mesh)
  pad = s.task.tokenizer.pad_id

  def sampler(sampling):
    fn = generate.make(parts.model, g.max_new_tokens, sampling, s.end_id, pad)
    return place.jit(fn, (variables, replicated, replicated, replicated), replicated,
                     rules=generate.decode_rules(place.rules))
  logps = lambda model: lambda v, batch: preference.token_logps(model, v, batch)
  if s.reference is not None:
    reference = place.jit(logps(parts.teacher.model), (parts.teacher.shardings, rows), rows)
  else:  # LoRA: the model with its adapters off
    reference = place.jit(lambda v, batch: logps(parts.model)(
        {**v, 'params': lora.switched_off(v['params'])}, batch), (variables, rows), rows)
  return {'sample': sampler({'temperature': gen.temperature, 'top_k': gen.top_k,
                             'top_p': gen.top_p}),
          'greedy': sampler({'temperature': 0.0}),
          'logps': place.jit(logps(parts.model), (variables, rows), rows),
          'reference': reference,
          'train': parts.jit_train_step(place, config, donate=True)}


def _global(batch, mesh):
  """A batch every process holds whole -> global arrays, each process giving its rows."""
  rows = next(iter(batch.values())).shape[0]
  blocks = sharding.process_rows(mesh, rows)
  local = {k: np.concatenate([v[a:b] for a, b in blocks]) for k, v in batch.items()}
  return sharding.to_global(local, mesh, rows)


def _answers(config, s, variables, examples, fn, repeat, rng):
  """Completions of the examples' prompts (each `repeat` times) -> (token lists, texts)."""
  ids, segments = rows_lib.left_padded([e['prompt_ids'] for e in examples], repeat,
                                       s.task.tokenizer.pad_id)
  ids = np.pad(ids, ((0, 0), (s.prompt_len - ids.shape[1], 0)),
               constant_values=s.task.tokenizer.pad_id)
  segments = np.pad(segments, ((0, 0), (s.prompt_len - segments.shape[1], 0)))
  replicated = sharding.replicated(s.place.mesh)
  put = lambda a: jax.device_put(a, replicated)
  tokens = np.asarray(s.fns[fn](variables, put(ids), put(segments), put(rng))
                      .addressable_data(0))
  done = rows_lib.completions(tokens, s.end_id)
  return done, rows_lib.texts(s.task.tokenizer, done, s.end_id, config.data)


def _sampled_batch(config, s, state, step):
  """Sample, score and lay out one step's rows -> (global batch, its statistics), or
  (None, statistics) when every group was skipped."""
  g, task = config.train.grpo, s.task
  picked = rows_lib.prompts_for(step, config.train.batch_size // g.group_size,
                                len(task.train), config.train.seed)
  examples = [task.train[int(i)] for i in picked]
  records = [task.records['train'][int(e['index'])] for e in examples]
  variables = state_lib.model_variables(state)
  rng = jax.random.fold_in(jax.random.PRNGKey(config.train.seed + 1), step)
  done, texts = _answers(config, s, variables, examples, 'sample', g.group_size, rng)
  where = [f"{task_lib.split_path(config.data.task, 'train')}:{int(e['line'])}"
           for e in examples]
  rewards_PG, good_P = rewards_lib.score(
      s.reward, g.reward, texts, [r for r in records for _ in range(g.group_size)], where,
      g.on_bad_reward, g.group_size)
  stats = {'reward_mean': float(rewards_PG[good_P].mean()) if good_P.any() else 0.0,
           'reward_std': float(rewards_PG[good_P].std()) if good_P.any() else 0.0,
           'completion_length': float(np.mean([len(c) for c in done])),
           'skipped_groups': int((~good_P).sum())}
  if not good_P.any():
    return None, stats
  # a skipped group's rewards are NaN: it gets no advantage and no loss weight
  rewards_PG = np.where(good_P[:, None], rewards_PG, 0.0)
  advantages_PG = grpo_lib.advantages(rewards_PG, g.advantages)
  batch = rows_lib.training_rows([e['prompt_ids'] for e in examples], done,
                                 advantages_PG.reshape(-1), config.data.seq_len, g.group_size)
  batch['loss_weights'] *= np.repeat(good_P, g.group_size)[:, None]
  model_rows = _global({k: v for k, v in batch.items() if k != 'advantages'}, s.place.mesh)
  old = s.fns['logps'](variables, model_rows)
  if not g.kl_beta:
    reference = old  # no KL term: the reference is not read
  elif s.reference is not None:
    reference = s.fns['reference'](s.reference, model_rows)
  else:
    reference = s.fns['reference'](variables, model_rows)
  full = {**model_rows, 'old_logps': old, 'ref_logps': reference,
          **_global({'advantages': batch['advantages']}, s.place.mesh)}
  return full, stats


def evaluate(config, s, state):
  """The held-out prompts answered greedily -> {'eval_reward', 'eval_accuracy'} (and
  'eval_skipped': prompts whose reward was bad, under on_bad_reward='skip')."""
  g, task = config.train.grpo, s.task
  count, scores = config.train.batch_size, []
  examples = [task.eval[i] for i in range(len(task.eval))]
  variables = state_lib.model_variables(state)
  for start in range(0, len(examples), count):
    chunk = examples[start:start + count]
    padded = chunk + [chunk[-1]] * (count - len(chunk))  # one sampler shape
    _, texts = _answers(config, s, variables, padded, 'greedy', 1, jax.random.PRNGKey(0))
    records = [task.records['eval'][int(e['index'])] for e in chunk]
    where = [f"{task_lib.split_path(config.data.task, 'eval')}:{int(e['line'])}"
             for e in chunk]
    scored, good = rewards_lib.score(s.reward, g.reward, texts[:len(chunk)], records, where,
                                     g.on_bad_reward, 1)
    scores.extend(scored[good, 0])
  scores = np.asarray(scores)
  row = {'eval_reward': float(scores.mean()) if len(scores) else 0.0,
         'eval_accuracy': float(np.mean(scores >= 1.0)) if len(scores) else 0.0}
  return {**row, 'eval_skipped': len(examples) - len(scores)} if len(scores) < len(
      examples) else row


def run_eval(run, workdir):
  """--mode=eval: the newest checkpoint's held-out reward and accuracy, printed and logged."""
  config = run.config
  runtime.check_restorable(config, workdir, '--mode=eval')
  place = runtime.placement(run)
  s = _setup(run, workdir, place)
  s.saved.close()
  s.fns = _functions(config, s)
  step, variables = runtime.restore_variables(config, workdir, s.parts, '--mode=eval')
  row = evaluate(config, s, variables)
  if jax.process_index() == 0:
    writer = metrics_lib.Writer(workdir)
    writer.write({'step': step, **row, 'mode': 'eval'})
    writer.close()
  progress.say(f'step {step} eval_reward {row["eval_reward"]:.4f} eval_accuracy '
               f'{row["eval_accuracy"]:.4f}')
  return row


def _start(config, s):
  """The newest checkpoint -> (step, state), else step 0 from train.init_params."""
  restored = s.saved.restore(s.parts.abstract)
  if restored:
    return restored
  fresh = s.place.jit(s.parts.init_fn, None, s.parts.shardings)(
      jax.random.PRNGKey(config.train.seed))
  if config.train.init_params:
    fresh['params'] = runtime.initial_params(config, s.parts, fresh['params'])
  return 0, fresh


def _step(config, s, state, step):
  """One GRPO step -> (state, its metrics row)."""
  start = time.perf_counter()
  batch, row = _sampled_batch(config, s, state, step)
  sampled = time.perf_counter()
  metrics = {}
  for _ in range(config.train.grpo.updates if batch is not None else 0):
    state, metrics = s.fns['train'](state, batch)
  metrics = jax.device_get(metrics)
  row.update({k: float(v) for k, v in metrics.items() if np.ndim(v) == 0})
  row.update(step=step, time_sampling=sampled - start,
             time_training=time.perf_counter() - sampled)
  return state, row


def _say(row, steps):
  progress.say(f'step {row["step"]}/{steps} reward {row["reward_mean"]:.3f} '
               f'(std {row["reward_std"]:.3f}) loss {row.get("loss", 0.0):.4f} kl '
               f'{row.get("kl", 0.0):.4f} clip {row.get("clip_fraction", 0.0):.3f} length '
               f'{row["completion_length"]:.1f} sampling {row["time_sampling"]:.2f}s '
               f'training {row["time_training"]:.2f}s')


def train(run, workdir, place=None):
  """Trains (or resumes) a GRPO run; returns the last metrics row. SIGINT or SIGTERM: the
  current step finishes and is saved, then stop.Interrupted."""
  config, t = run.config, run.config.train
  place = place or runtime.placement(run)
  s = _setup(run, workdir, place)
  step, state = _start(config, s)
  run_config.write(config, workdir)
  s.fns = _functions(config, s)
  writer = metrics_lib.Writer(workdir, enabled=jax.process_index() == 0)
  progress.say(f'grpo    {len(s.task.train):,} train prompts, {t.batch_size // t.grpo.group_size}'
               f' a step x {t.grpo.group_size} completions of up to {t.grpo.max_new_tokens} '
               f'tokens; reward {t.grpo.reward}; workdir {workdir}: '
               + (f'resumed from step {step}' if step else 'fresh'))
  frozen = teacher_lib.describe(config, s.parts.teacher) if s.parts.teacher else ({}, None)
  if frozen[1]:
    progress.say(frozen[1])
  if step < t.steps:
    writer.write({'event': 'start', 'step': step, 'workdir': workdir, **frozen[0]})
  row = None
  with stop_lib.Signals() as signals:
    try:
      if step == 0:
        first = evaluate(config, s, state)
        writer.write({'step': 0, **first})
        progress.say(f'step 0 eval_reward {first["eval_reward"]:.4f} eval_accuracy '
                     f'{first["eval_accuracy"]:.4f}')
      while step < t.steps:
        step += 1
        state, row = _step(config, s, state, step)
        if step % t.log_every == 0 or step in (1, t.steps):
          writer.write(row)
          _say(row, t.steps)
        if step % t.eval_every == 0 or step == t.steps:
          scores = evaluate(config, s, state)
          writer.write({'step': step, **scores})
          progress.say(f'step {step} eval_reward {scores["eval_reward"]:.4f} eval_accuracy '
                       f'{scores["eval_accuracy"]:.4f}')
        stopping = signals.agreed()
        if step % t.checkpoint_every == 0 or step == t.steps or stopping:
          s.saved.save(step, state, _Position())
        if stopping:
          s.saved.finish()
          raise stop_lib.Interrupted(f'{signal.Signals(stopping).name}: saved a checkpoint at '
                                     f'step {step}; run the same command to resume',
                                     stopping, step)
    finally:
      s.saved.close()
      writer.close()
  return row
