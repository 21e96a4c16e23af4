"""Tiny configs and batches shared by the tests (kept small so compiled steps are cheap)."""

import itertools
import json
import os
import re
import signal
import subprocess

import jax
import jax.numpy as jnp
import numpy as np

from zoo import config as config_lib
from zoo import families
from zoo import objectives
from zoo import run as run_lib
from zoo import sharding
from zoo.data import readers
from zoo.data import speakers
from zoo.train import runtime

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBEDDED_CORPUS = os.path.join(REPO, 'zoo', 'data', 'assets', 'tinyshakespeare.txt')


def cpu_env(devices=1):
  """os.environ for a `python -m zoo...` subprocess that sees `devices` CPU devices, with the
  suite's other XLA flags (tests/conftest.py) and this checkout on its path."""
  flags = re.sub(r'--xla_force_host_platform_device_count=\d+',
                 f'--xla_force_host_platform_device_count={devices}', os.environ['XLA_FLAGS'])
  return dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS=flags,
              PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))


def shakespeare(count):
  """The embedded corpus's first `count` documents, as the readers split it."""
  documents = readers.documents([EMBEDDED_CORPUS])
  return [text for text, _ in itertools.islice(documents, count)]


def tokenize(documents, tokenizer):
  """Each document -> int32 [BOS, pieces..., EOS], as the pipeline reads a prepared one."""
  return [tokenizer.document(ids) for ids in tokenizer.encode(documents)]


def config_file(name, arg='smoke'):
  """configs/NAME.py[:arg], as --config takes it."""
  return os.path.join(REPO, 'configs', f'{name}.py') + (f':{arg}' if arg else '')


def smoke(name, *overrides):
  """The loaded :smoke variant of configs/NAME.py, with 'a.b=value' overrides, checked as
  a run (zoo/run)."""
  return load(config_file(name), list(overrides))


def load(spec, overrides=()):
  """config_lib.load, checked as a run (zoo/run.resolve) -> the config."""
  return run_lib.load(spec, overrides).config


def validate(config):
  """A config built in a test, checked as launch checks it (range, then as a run)."""
  return run_lib.resolve(config_lib.check(config)).config


def tiny_config(**model_overrides):
  c = config_lib.base()
  m = c.model
  m.vocab_size, m.d_model, m.num_layers, m.num_heads, m.num_kv_heads = 64, 32, 2, 4, 2
  m.mlp_dim, m.max_length = 64, 64
  for key, value in model_overrides.items():
    m[key] = value
  c.data.seq_len = 16
  c.train.steps, c.train.batch_size, c.optim.warmup_steps = 10, 4, 1
  return validate(c)


def random_ids(shape, vocab=64, seed=0):
  return np.random.default_rng(seed).integers(4, vocab, shape).astype(np.int32)


def batch(ids, **optional):
  """A one-row batch: `inputs` from ids plus any given per-token keys (segment_ids, ...)."""
  rows = {'inputs': jnp.asarray(ids)[None]}
  rows.update({key: jnp.asarray(value)[None] for key, value in optional.items()
               if value is not None})
  return rows


def batch_spec(data_config, rows):
  """The batch spec of the family that data_config.objective trains, for `rows` rows."""
  family = next(f for f in families.FAMILIES.values() if data_config.objective in f.OBJECTIVES)
  return family.batch_spec(data_config, rows)


def family_batch(config, rows, seed=0):
  """A random batch of the family's spec with padding rows (segment 0, no loss weight) and
  uneven loss weights, so a per-row or per-microbatch mean differs from the whole batch's."""
  rng = np.random.default_rng(seed)
  vocab = config.model.vocab_size - config.data.num_sentinels
  batch = {}
  rows_first = lambda a: a.reshape((-1,) + (1,) * (len(shape) - 1))  # [B] -> [B, 1, ...]
  for key, (shape, dtype) in objectives.batch_spec(config, rows).items():
    if key.endswith('segment_ids'):
      value = np.ones(shape)
      value[:3] = 0
    elif key.endswith('positions'):
      value = np.broadcast_to(np.arange(shape[-1]), shape)
    elif key.endswith('loss_weights'):
      value = rng.random(shape) < rows_first(np.linspace(0.1, 0.9, shape[0]))
    elif key.endswith('_logps'):  # GRPO's sampling-time and reference log-probabilities
      value = rng.normal(-4.0, 0.5, shape)
    elif key == 'advantages':
      value = rng.normal(0.0, 1.0, shape)
    elif key in ('token_type_ids', 'next_sentence_labels'):
      value = rng.integers(0, 2, shape)
    elif key == 'pixels':  # normalised pixels (the vision family)
      value = rng.normal(size=shape)
    elif key == 'labels':  # a label head's classes
      value = rng.integers(0, config.model.num_labels, shape)
    else:
      value = rng.integers(4, vocab, shape)
    batch[key] = np.asarray(value, dtype)
  for key in batch:
    if key.endswith('loss_weights'):  # padding attends to nothing: it has no loss
      batch[key] *= batch[key.replace('loss_weights', 'segment_ids')] > 0
  return batch


def train_steps(config, mesh_sizes, steps, state=None):
  """-> (metrics rows, final params, initial state) of `steps` train steps on family_batch
  batches (seeds 0, 1, ...) from `state` (else a fresh one), on a mesh of `mesh_sizes`."""
  config = config.copy_and_resolve_references()
  config.mesh.update(mesh_sizes)
  run = run_lib.resolve(config_lib.check(config))
  devices = int(np.prod(list(mesh_sizes.values())))
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:devices])
  place = runtime.Placement(mesh, sharding.rules(config), None)
  sharding.check_divisible(config, dict(mesh.shape), run.family)
  parts = runtime.model_state(run, mesh)
  if state is None:
    state = jax.jit(parts.init_fn, out_shardings=parts.shardings)(jax.random.PRNGKey(0))
  initial = state
  step = place.jit(parts.train_step(config), (parts.shardings, sharding.batch_sharding(mesh)),
                   (parts.shardings, sharding.replicated(mesh)))
  rows = []
  for seed in range(steps):
    state, metrics = step(state, family_batch(config, config.train.batch_size, seed))
    rows.append(jax.device_get(metrics))
  return rows, jax.device_get(state['params']), initial


def assert_resumes_exactly(dataset, skip, count=5):
  """An iterator restored from its state after `skip` batches yields the same next batches."""
  it = iter(dataset)
  for _ in range(skip):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(count)]
  resumed = iter(dataset)
  resumed.set_state(state)
  for want in expected:
    got = next(resumed)
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])


def kill_after_step(command, step, env):
  """Starts `command` (a zoo.launch run that logs every step) and SIGKILLs it once it has
  logged `step`."""
  process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
  for line in process.stdout:
    if line.startswith(f'step {step}/'):
      break
  process.send_signal(signal.SIGKILL)
  process.communicate()


def rows_by_step(rows):
  """{step: its train row as the last start logged it}."""
  return {row['step']: row for row in rows if 'loss' in row}


def speakers_task(directory, form, train, eval_):
  """A small task of the worked example's two most frequent speakers (zoo/data/speakers.py)
  in `form` ('classification', 'text_to_text', 'prompt_completion' or 'regression': the
  speech's line count / 4), labels alternating 0, 1, ...; -> directory."""
  names, splits = speakers.build(speakers=2)
  os.makedirs(directory, exist_ok=True)
  for split, count in (('train', train), ('eval', eval_)):
    by_label = [[x for x in splits[split] if x[0] == k] for k in (0, 1)]
    balanced = [by_label[k % 2][k // 2] for k in range(count)]
    with open(os.path.join(directory, f'{split}.jsonl'), 'w', encoding='utf-8') as f:
      for label, speech in balanced:
        example = speakers.forms(names, label, speech[:200])
        example['regression'] = {'text': speech[:200], 'label': speech.count('\n') / 4}
        f.write(json.dumps(example[form]) + '\n')
  return directory
