"""What the command-line entry points (zoo.launch, zoo.prepare, zoo.bench, zoo.harness)
share: the platform workarounds (zoo/platform.py), --config.a.b=v overrides beside the absl
flags, and no argument silently dropped."""

import sys

from absl import app

from zoo import platform

_OVERRIDE_PREFIX = '--config.'


def split_overrides(argv):
  """--config.a.b=v arguments (for zoo.config.load) apart from the absl flags."""
  overrides = [a[len(_OVERRIDE_PREFIX):] for a in argv if a.startswith(_OVERRIDE_PREFIX)]
  return overrides, [a for a in argv if not a.startswith(_OVERRIDE_PREFIX)]


def start(run):
  """Parses sys.argv's absl flags, then run(overrides); a stray positional argument (e.g.
  train.steps=5, which would otherwise be dropped) ends with one line and exit 2. On a CPU
  host the process first restarts once with platform.SETTING (huge pages)."""
  platform.restart_tuned()
  platform.apply()
  overrides, argv = split_overrides(sys.argv)

  def main(rest):  # rest: argv[0] and what absl left over (it would ignore them)
    if rest[1:]:
      first = rest[1]
      fix = (f'an override is written --config.{first}' if '=' in first
             else 'flags are written --name=value')
      print(f'error: unexpected argument {first!r}: {fix}', file=sys.stderr, flush=True)
      sys.exit(2)
    run(overrides)

  app.run(main, argv=argv)
