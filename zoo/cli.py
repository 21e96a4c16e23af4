"""What the command-line entry points (zoo.launch, zoo.prepare, zoo.bench, zoo.harness)
share: --config.a.b=v overrides beside the absl flags, and no argument silently dropped."""

import sys

from absl import app

_OVERRIDE_PREFIX = '--config.'


def split_overrides(argv):
  """--config.a.b=v arguments (for zoo.config.load) apart from the absl flags."""
  overrides = [a[len(_OVERRIDE_PREFIX):] for a in argv if a.startswith(_OVERRIDE_PREFIX)]
  return overrides, [a for a in argv if not a.startswith(_OVERRIDE_PREFIX)]


def stray(rest):
  """-> the one-line error for arguments absl left over (absl ignores them), or None."""
  if not rest:
    return None
  first = rest[0]
  fix = (f'an override is written --config.{first}' if '=' in first and not
         first.startswith('-') else 'flags are written --name=value')
  return f'unexpected argument {first!r}: {fix}'


def start(run):
  """Parses sys.argv's absl flags, then run(overrides); a stray positional argument (e.g.
  train.steps=5, which would otherwise be dropped) ends with one line and exit 2."""
  overrides, argv = split_overrides(sys.argv)

  def main(rest):
    error = stray(rest[1:])
    if error:
      print(f'error: {error}', file=sys.stderr, flush=True)
      sys.exit(2)
    run(overrides)

  app.run(main, argv=argv)
