"""One resolved run: what a run derives from its config, computed once.

    config file --zoo.config.load--> ConfigDict --resolve--> Run --> every mode

`resolve(config)` checks what the fields mean together (zoo/run/checks.py: the family,
the kernels, the model's dimensions, the mesh, each phase) and derives, once, what the
rooms of a run read: the family module, the phases and the config each trains with, the
learning-rate schedule, span corruption's lengths. launch, the loop, plan mode, the sweep,
the preflight, evaluation, generation, export and the harness take the Run (or the part
they need) and derive none of these again.
"""

import dataclasses
import types
from typing import Callable

import ml_collections

from zoo import config as config_lib
from zoo import optim
from zoo import phases as phases_lib
from zoo.errors import ConfigError
from zoo.families import spans
from zoo.run import checks


@dataclasses.dataclass(frozen=True)
class Run:
  config: ml_collections.ConfigDict  # as loaded: locked, each field in its range
  family: types.ModuleType  # zoo/families/NAME.py, the module that owns model.family
  phases: tuple  # phases_lib.Phase per stretch of steps; the last is the run's own shape
  phase_configs: tuple  # the config each phase trains with (the last: `config`)
  schedule: Callable  # step -> learning rate (optim.schedule over the phases)
  span_lengths: tuple | None  # span corruption: (raw, inputs, targets) tokens; else None
  data_skips: tuple  # train.data_skips parsed: ((after step, batches to skip), ...)

  def phase_at(self, step):
    """The phase step `step` (from 1) runs in."""
    return self.phases[phases_lib.at(self.phases, step)]

  def check_phases(self, check):
    """check(phase's config) for each phase before the run's own shape; a ConfigError it
    raises is prefixed with the phase it is about."""
    field = 'train.phases' if self.config.train.phases else 'train.batch_ramp'
    for k, (phase, config) in enumerate(zip(self.phases[:-1], self.phase_configs)):
      try:
        check(config)
      except ConfigError as e:
        raise ConfigError(f'{field}: phase {k + 1} ({phase.batch_size} x {phase.seq_len}, '
                          f'steps {phase.first}..{phase.last}): {e}') from None

  @property
  def total_tokens(self):
    return phases_lib.total_tokens(self.phases)


def resolve(config):
  """The loaded config -> its Run, or a ConfigError naming the first field that cannot
  work (before anything is written or compiled)."""
  family = checks.check(config)
  phases = tuple(phases_lib.resolve(config))
  phase_configs = tuple(phases_lib.config_for(config, p) for p in phases[:-1]) + (config,)
  d = config.data
  run = Run(config=config, family=family, phases=phases, phase_configs=phase_configs,
            schedule=optim.schedule(config.optim, config.train.steps, phases),
            span_lengths=spans.lengths(d) if d.objective == 'span_corruption' else None,
            data_skips=tuple(config_lib.data_skips(config.train.data_skips)))
  run.check_phases(lambda phase_config: _check_phase(config, phase_config))
  return run


def load(spec, overrides=()):
  """'configs/NAME.py[:arg]' (+ 'a.b=value' overrides) -> its Run."""
  return resolve(config_lib.load(spec, overrides))


def _check_phase(config, phase_config):
  """A phase checked as a run of its own shape."""
  if config.data.task.kind and phase_config.data.seq_len != config.data.seq_len:
    raise ConfigError(f'a fine-tuning task trains at data.seq_len={config.data.seq_len} '
                      'throughout and its phases may change the batch only; a pretraining '
                      "recipe's length phases do not carry over: set --config.train.phases=''")
  checks.check(config_lib.check(phase_config))
