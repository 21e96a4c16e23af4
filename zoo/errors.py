"""The error every layer raises for input that cannot work (zoo.config re-exports it)."""


class ConfigError(ValueError):
  """A config value that cannot work; the message names the field and the fix."""
