"""Held-out loss: the evaluator the training loop calls, and --mode=eval."""

import jax
import numpy as np
from jax.experimental import multihost_utils

from zoo.train import runtime
from zoo import sharding
from zoo.data import streams as streams_lib
from zoo.train import metrics as metrics_lib
from zoo.train import state as state_lib
from zoo.train import step as step_lib


def evaluator(config, place, streams, corpus, state):
  """-> evaluate(model variables) -> mean eval loss over the first train.eval_batches
  batches of the held-out split (the same batches every call)."""
  eval_step = place.jit(step_lib.make_eval_step(state.loss_fn(config)),
                        (state_lib.model_variables(state.shardings),
                         sharding.batch_sharding(place.mesh)),
                        sharding.replicated(place.mesh))
  datasets = runtime.datasets(config, streams, corpus.eval, corpus.tokenizer,
                              train=False)
  batches = streams_lib.eval_batches(datasets, config.train.eval_batches)
  count = len(batches)
  if jax.process_count() > 1:  # every process runs as many steps as the longest
    count = int(multihost_utils.process_allgather(np.int32(count)).max())
  batches += [streams_lib.padding(batches[0])] * (count - len(batches))
  batch_size = config.train.batch_size

  def evaluate(variables):
    loss_sum = weight_sum = 0.0
    for batch in batches:
      out = jax.device_get(eval_step(variables,
                                     sharding.to_global(batch, place.mesh, batch_size)))
      loss_sum, weight_sum = loss_sum + out['loss_sum'], weight_sum + out['weight_sum']
    return float(loss_sum / max(weight_sum, 1.0))
  return evaluate


def run(config, workdir):
  """--mode=eval: the newest checkpoint's eval loss, printed and logged."""
  runtime.compile_cache(config)
  place = runtime.placement(config)
  streams = runtime.input_streams(config, place.mesh)
  corpus = runtime.corpus(config, workdir)
  state = runtime.model_state(config, place.mesh)
  step, variables = runtime.restore_variables(config, workdir, state, 'eval')
  eval_loss = evaluator(config, place, streams, corpus, state)(variables)
  if jax.process_index() == 0:
    writer = metrics_lib.Writer(workdir)
    writer.write({'step': step, 'eval_loss': eval_loss, 'mode': 'eval'})
    writer.close()
  print(f'step {step} eval_loss {eval_loss:.4f}', flush=True)
  return eval_loss
