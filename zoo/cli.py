"""What the command-line entry points (zoo.launch, zoo.prepare) share."""

_OVERRIDE_PREFIX = '--config.'


def split_overrides(argv):
  """--config.a.b=v arguments (for zoo.config.load) apart from the absl flags."""
  overrides = [a[len(_OVERRIDE_PREFIX):] for a in argv if a.startswith(_OVERRIDE_PREFIX)]
  return overrides, [a for a in argv if not a.startswith(_OVERRIDE_PREFIX)]
