"""What the command-line entry points (zoo.launch, zoo.prepare, zoo.bench, zoo.harness)
share: the platform workarounds (zoo/platform.py), --config.a.b=v overrides beside the absl
flags, and no argument silently dropped."""

import sys

from absl import app
from absl import logging

from zoo import platform

_OVERRIDE_PREFIX = '--config.'


def split_overrides(argv):
  """--config.a.b=v arguments (for zoo.config.load) apart from the absl flags."""
  overrides = [a[len(_OVERRIDE_PREFIX):] for a in argv if a.startswith(_OVERRIDE_PREFIX)]
  return overrides, [a for a in argv if not a.startswith(_OVERRIDE_PREFIX)]


def _forgotten_prefix(argv):
  """The line for a config field written as a flag (--train.steps=5: no absl flag has a dot
  in its name, so absl would stop with a two-line FATAL), or None."""
  for arg in argv[1:]:
    name = arg[2:].split('=', 1)[0] if arg.startswith('--') else ''
    if '.' in name:
      return (f'error: unknown flag --{name}: a config field is written '
              f'{_OVERRIDE_PREFIX}{arg[2:]}')
  return None


def start(run):
  """Parses sys.argv's absl flags, then run(overrides); a stray positional argument (e.g.
  train.steps=5, which would otherwise be dropped) or a config field written without the
  config. prefix ends with one line and exit 2. On a CPU host the process first restarts
  once with platform.SETTING (huge pages)."""
  platform.restart_tuned()
  platform.apply()
  overrides, argv = split_overrides(sys.argv)
  forgotten = _forgotten_prefix(argv)
  if forgotten:
    print(forgotten, file=sys.stderr, flush=True)
    sys.exit(2)

  def main(rest):  # rest: argv[0] and what absl left over (it would ignore them)
    if rest[1:]:
      first = rest[1]
      fix = (f'an override is written --config.{first}' if '=' in first
             else 'flags are written --name=value')
      print(f'error: unexpected argument {first!r}: {fix}', file=sys.stderr, flush=True)
      sys.exit(2)
    if not any(a.startswith(('-v', '--verbosity')) for a in argv):
      # orbax and grain log every save at INFO, jax each backend it could not start
      logging.set_verbosity(logging.WARNING)
    run(overrides)

  app.run(main, argv=argv)
