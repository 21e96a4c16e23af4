"""Held-out loss (and a task's metrics): the evaluator the training loop calls, and
--mode=eval."""

import jax
import numpy as np
from jax.experimental import multihost_utils

from zoo.train import runtime
from zoo import progress
from zoo import sharding
from zoo.data import streams as streams_lib
from zoo.train import metrics as metrics_lib
from zoo.train import state as state_lib
from zoo.train import step as step_lib
from zoo.train import teacher as teacher_lib


def evaluator(config, place, streams, corpus, state, task_eval=None, reference=None):
  """-> evaluate(model variables) -> the eval row: 'eval_loss', the mean loss over the first
  train.eval_batches batches of the held-out split (the same batches every call), an
  objective's eval sums as 'eval_NAME' (a preference accuracy; each over the eval sum
  NAME_count where the loss gives one, else over the loss's weight), and with `task_eval` (a
  factory, zoo/infer/task_eval.make) the task's metrics as 'eval_NAME'. reference: the
  variables of an objective's frozen reference (state.teacher's), read once."""
  teacher = state.teacher if config.train.objective != 'lm' else None
  eval_step = place.jit(step_lib.make_eval_step(state.loss_fn(config), teacher and teacher.model),
                        (state_lib.model_variables(state.shardings),
                         sharding.batch_sharding(place.mesh),
                         *((teacher.shardings,) if teacher else ())),
                        sharding.replicated(place.mesh))
  frozen = (reference,) if teacher else ()
  datasets = runtime.datasets(config, streams, corpus.eval, corpus.tokenizer,
                              train=False)
  batches = streams_lib.eval_batches(datasets, config.train.eval_batches)
  count = len(batches)
  if jax.process_count() > 1:  # every process runs as many steps as the longest
    count = int(multihost_utils.process_allgather(np.int32(count)).max())
  batches += [streams_lib.padding(batches[0])] * (count - len(batches))
  batch_size = config.train.batch_size
  metrics = task_eval and task_eval(config, place, corpus, state)

  def evaluate(variables):
    loss_sum = weight_sum = 0.0
    predicted, labels, sums = [], [], {}
    for batch in batches:
      out = jax.device_get(eval_step(variables,
                                     sharding.to_global(batch, place.mesh, batch_size),
                                     *frozen))
      loss_sum, weight_sum = loss_sum + out['loss_sum'], weight_sum + out['weight_sum']
      for key in (k for k in out if k.startswith('sum_')):
        sums[key[4:]] = sums.get(key[4:], 0.0) + out[key]
      if 'predictions' in out:  # a label head's, on the real rows
        predicted.append(out['predictions'][out['real']])
        labels.append(out['labels'][out['real']])
    row = {'eval_loss': float(loss_sum / max(weight_sum, 1.0)),
           **{f'eval_{k}': float(v / max(sums.get(f'{k}_count', weight_sum), 1.0))
              for k, v in sums.items() if not k.endswith('_count')}}
    if metrics:
      scores = metrics.headed(np.concatenate(predicted) if predicted else None,
                              np.concatenate(labels) if labels else None)
      scores.update(metrics.generated(variables, row['eval_loss']))
      row.update({f'eval_{name}': value for name, value in scores.items()})
    return row
  return evaluate


def describe(row):
  """An eval row as one line: eval_loss 2.3456 eval_accuracy 0.8125 ..."""
  return ' '.join(f'{k} {v:.4f}' for k, v in row.items())


def run(resolved, workdir, task_eval=None):
  """--mode=eval: the newest checkpoint's eval row (loss, and a task's metrics with
  `task_eval`), printed and logged; `resolved`: the run (zoo/run)."""
  config = resolved.config
  runtime.check_workdir(config, workdir)
  runtime.check_restorable(config, workdir, '--mode=eval')
  runtime.compile_cache(config)
  place = runtime.placement(resolved)
  streams = runtime.input_streams(config, place.mesh)
  state = runtime.model_state(resolved, place.mesh)
  runtime.check_same_model(config, workdir, state)  # before a tokenizer is read or made
  corpus = runtime.corpus(config, workdir)
  step, variables = runtime.restore_variables(config, workdir, state, '--mode=eval')
  reference = state.teacher and teacher_lib.restore(state.teacher)
  row = evaluator(config, place, streams, corpus, state, task_eval, reference)(variables)
  if jax.process_index() == 0:
    writer = metrics_lib.Writer(workdir)
    writer.write({'step': step, **row, 'mode': 'eval'})
    writer.close()
  progress.say(f'step {step} {describe(row)}')
  return row
