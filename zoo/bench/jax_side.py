"""The zoo's side of a benchmark: the train step the training loop runs (sharded state,
donated, AdamW) and KV-cache generation, fed random tokens; one matmul alone; and the steps
of several trainers timed in turns."""

import time

import jax
import jax.numpy as jnp
import numpy as np

from zoo import sharding
from zoo.infer import generate
from zoo.plan import compiled as compiled_lib
from zoo.train import runtime
from zoo.train import state as state_lib


def random_batch(config, seed=0):
  """A full causal-LM batch of random ids: one document per row, every token weighted."""
  B, L = config.train.batch_size, config.data.seq_len
  ids = np.random.default_rng(seed).integers(0, config.model.vocab_size, (B, L + 1),
                                             dtype=np.int32)
  return {'inputs': ids[:, :-1], 'targets': ids[:, 1:],
          'segment_ids': np.ones((B, L), np.int32),
          'positions': np.broadcast_to(np.arange(L, dtype=np.int32), (B, L)).copy(),
          'loss_weights': np.ones((B, L), np.float32)}


class Trainer:
  """step() runs one train step to completion; compile_seconds, memory (the compiled step's
  bytes on one device, by part), params (float32 numpy, for the other side) and first_loss
  are read after construction."""

  def __init__(self, run, batch):
    config = run.config
    if config.data.objective != 'causal_lm':
      raise ValueError(f'data.objective={config.data.objective!r}: zoo.bench measures '
                       "causal-LM decoders; use a decoder config")
    place = runtime.placement(run)
    parts = runtime.model_state(run, place.mesh)
    self.state = place.jit(parts.init_fn, None, parts.shardings)(jax.random.PRNGKey(0))
    self.params = jax.device_get(self.state['params'])
    self.model, self.config = parts.model, config
    self.batch = sharding.to_global(batch, place.mesh, config.train.batch_size)
    start = time.perf_counter()
    self.step_fn = place.jit(
        parts.train_step(config), (parts.shardings, sharding.batch_sharding(place.mesh)),
        (parts.shardings, sharding.replicated(place.mesh)), donate_argnums=(0,)
    ).compile(self.state, self.batch)
    self.compile_seconds = time.perf_counter() - start
    self.memory = compiled_lib.memory_bytes(self.step_fn.memory_analysis())
    self.first_loss = float(self.step()['loss'])

  def step(self):
    self.state, metrics = self.step_fn(self.state, self.batch)
    return jax.device_get(metrics)

  def variables(self):
    return state_lib.model_variables(self.state)


def alternating_steps(trainers, steps, warmup=3):
  """{name: trainer} -> {name: [seconds of each of `steps` timed steps]}. After `warmup`
  untimed steps each, the trainers take turns one step at a time, so a machine whose speed
  drifts between minutes slows every one alike (the step pairs line up by index)."""
  for trainer in trainers.values():
    for _ in range(warmup):
      trainer.step()
  times = {name: [] for name in trainers}
  for _ in range(steps):
    for name, trainer in trainers.items():
      start = time.perf_counter()
      trainer.step()
      times[name].append(time.perf_counter() - start)
  return times


class Matmul:
  """run() computes one [M, K] x [K, N] product in `dtype`, alone: the speed this device's
  matmul library reaches outside the train step."""

  def __init__(self, shape, dtype):
    M, K, N = shape
    self.flops = 2 * M * K * N
    rng = np.random.default_rng(0)
    dtype = jnp.dtype(dtype)
    self.a = jnp.asarray(rng.standard_normal((M, K), np.float32), dtype)
    self.b = jnp.asarray(rng.standard_normal((K, N), np.float32), dtype)
    self.fn = jax.jit(jnp.matmul).lower(self.a, self.b).compile()

  def run(self):
    return self.fn(self.a, self.b).block_until_ready()


class Decoder:
  """run() greedily generates new_tokens after a prompt_len prompt for `batch` rows, with
  the KV cache, no EOS (every row makes all its tokens)."""

  def __init__(self, model, variables, batch, prompt_len, new_tokens, seed=0):
    self.variables = jax.tree.map(jnp.copy, variables)  # the train step donates its own
    self.ids = np.random.default_rng(seed).integers(
        1, model.config.vocab_size, (batch, prompt_len), dtype=np.int32)
    self.segments = np.ones_like(self.ids)
    fn = jax.jit(generate.make(model, new_tokens, {'temperature': 0.0}, eos_id=-1,
                               pad_id=0))
    start = time.perf_counter()
    self.fn = fn.lower(variables, self.ids, self.segments, jax.random.PRNGKey(0)).compile()
    self.compile_seconds = time.perf_counter() - start

  def run(self):
    return np.asarray(self.fn(self.variables, self.ids, self.segments, jax.random.PRNGKey(0)))

