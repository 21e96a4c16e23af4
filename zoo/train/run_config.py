"""WORKDIR/config.json: the resolved config of a run (base + preset + recipe + overrides),
written at every start, and what a restart may change.

A restart whose model has other parameter shapes than its newest checkpoint is refused
(one line naming the changed model fields) before anything is restored: the checkpoint
would not load, and moving it aside would lose the run. Other changes (batch, length,
mesh, learning rate, ...) are listed and allowed; a changed train.steps or schedule field
says what the learning rate of the remaining steps will be against the run so far.
"""

import json

import jax

from zoo import config as config_lib
from zoo import run as run_lib
from zoo import storage
from zoo.errors import ConfigError
from zoo.train import checkpoint

FILE = 'config.json'
_SCHEDULE_FIELDS = ('train.steps', 'train.phases', 'train.batch_ramp', 'optim.learning_rate',
                    'optim.schedule', 'optim.warmup_steps', 'optim.warmup_tokens',
                    'optim.decay_tokens', 'optim.min_learning_rate_ratio',
                    'optim.decay_fraction')
_SHAPE_FIELDS = ('train.batch_size', 'data.seq_len')  # a schedule in tokens counts them


def as_dict(config):
  """The config as plain JSON values (tuples as lists), as config.json holds it."""
  return json.loads(json.dumps(config.to_dict(), default=str))


def read(workdir):
  """The config.json of the run's previous start, or None."""
  path = storage.join(workdir, FILE)
  return json.loads(storage.read_text(path)) if storage.isfile(path) else None


def load(workdir):
  """The run's config from its config.json (over_base). None when there is none."""
  saved = read(workdir)
  return None if saved is None else over_base(saved)


def over_base(saved):
  """A config.json's values over config.base(): fields added to the zoo since the run
  started take their defaults."""
  config = config_lib.base()
  config.update(saved)
  return config


def resolve(workdir, spec=None, overrides=()):
  """The run a command that reads `workdir` (export, the harness) works on: `spec`'s config
  (configs/NAME.py[:arg]) with `overrides` when given, else the run's own config.json with
  them, so nothing the run was trained with has to be repeated."""
  if spec:
    return run_lib.load(spec, overrides)
  config = load(workdir)
  if config is None:
    raise ConfigError(f'--workdir={workdir} holds no {FILE} (not a run the zoo trained); pass '
                      '--config=configs/NAME.py[:arg] with the overrides the run used')
  for override in overrides:
    config_lib.apply_override(config, override)
  config.lock()
  return run_lib.resolve(config_lib.check(config))


def write(config, workdir):
  if jax.process_index() == 0:
    text = json.dumps(as_dict(config), indent=2, sort_keys=True) + '\n'
    storage.write_bytes(storage.join(workdir, FILE), text.encode())


def changes(previous, config):
  """{dotted field: (before, now)} of every field that differs from the previous start."""
  before, now = _flat(previous or {}), _flat(as_dict(config))
  return {k: (before.get(k), now.get(k)) for k in sorted(before.keys() | now.keys())
          if previous is not None and before.get(k) != now.get(k)}


def check_shapes(changed, workdir, abstract_params, reading=False):
  """A ConfigError when the newest readable checkpoint in `workdir` holds parameters of
  other shapes (or other names) than this model, naming the model fields that changed (a
  command `reading` the run, not training it, also offers the run's own config.json). An
  unreadable checkpoint is left to the restore, which moves it aside."""
  runs = storage.join(workdir, 'checkpoints')
  for step in sorted((int(n) for n in storage.listdir(runs) if n.isdigit()), reverse=True):
    try:
      saved = checkpoint.saved_param_shapes(storage.join(runs, str(step), 'state'))
    except Exception:  # pylint: disable=broad-except
      continue
    problem = _difference(saved, checkpoint.param_shapes(abstract_params))
    if problem:
      fields = [f'{k}={now!r} (was {before!r})' for k, (before, now) in changed.items()
                if k.startswith('model.')] or ['(no model field in config.json changed)']
      fix = ("leave --config out to read the run's own config.json, or restore those "
             'fields' if reading else 'restore those fields to resume or read it, or pass a '
             'new --workdir for a new run')
      raise ConfigError(f'--workdir={workdir} holds a run whose parameters have other '
                        f'shapes ({problem} at step {step}): the config given is not the '
                        f'one it was trained with; changed: {", ".join(fields)}; {fix}')
    return


def _difference(saved, wanted):
  """The first difference between two {name: shape}, in words, or None."""
  for name in sorted(saved.keys() & wanted.keys()):
    if saved[name] != wanted[name]:
      return f'parameter {name} is {saved[name]} there but {wanted[name]} in this model'
  lacking, extra = sorted(wanted.keys() - saved.keys()), sorted(saved.keys() - wanted.keys())
  if lacking:
    return f'the checkpoint lacks {", ".join(lacking[:3])}'
  return f'the model lacks {", ".join(extra[:3])}' if extra else None


def describe(changed, previous, run, step):
  """Lines for a restart of `run` (zoo/run) at `step`: the changed fields, and the learning
  rate the remaining steps follow where the schedule changed."""
  config = run.config
  if not changed or not step:
    return []
  lines = ['changed since the last start: ' + ', '.join(
      f'{k} {before!r} -> {now!r}' for k, (before, now) in changed.items())]
  if any(k in changed for k in _SCHEDULE_FIELDS):
    new = run.schedule
    old = _previous_schedule(previous, config)
    if old is None:
      return lines
    lines.append(
        f'the learning rate schedule changed: step {step + 1} runs at {float(new(step)):.3g} '
        f'(the run so far would have used {float(old(step)):.3g}) and step '
        f'{config.train.steps} at {float(new(config.train.steps - 1)):.3g}')
  return lines


def _previous_schedule(previous, config):
  """The learning rate the previous start's schedule fields gave (this config's elsewhere),
  or None where they make no schedule for this run."""
  old = config.copy_and_resolve_references()
  flat = _flat(previous)
  for field in (*_SCHEDULE_FIELDS, *_SHAPE_FIELDS):
    section, name = field.split('.')
    if field in flat:
      old[section][name] = flat[field]
  try:
    return run_lib.resolve(old).schedule
  except ConfigError:
    return None


def _flat(tree, prefix=''):
  out = {}
  for key, value in tree.items():
    name = f'{prefix}{key}'
    if isinstance(value, dict):
      out.update(_flat(value, name + '.'))
    else:
      out[name] = value
  return out
