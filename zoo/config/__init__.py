"""Configs: the schema (`schema.base()`), loading with overrides (`load()`) and the range
checks (`checks.check`).

Every config file in configs/ starts from `base()` and sets the fields of its shape; the
CLI and the Python API load it through `load()`, which applies overrides, checks each
field's range and locks it. `zoo.run.resolve` then checks what the fields mean together
(families, kernels, the mesh) and derives what a run needs, once. A bad value is a
`ConfigError` whose message names the field and the fix. Nothing here imports model code.
"""

import ast
import difflib
import importlib.util
import os

import ml_collections

from zoo import storage
from zoo.config import checks
from zoo.config.checks import check, data_skips
from zoo.config.schema import (DEFAULT_RULES, DEFAULT_TASK_METRICS, DIGITS,  # the values
                               OPTIMIZERS, SPIKE_SIGNALS, TASK_METRICS,  # others read
                               base, text_length)
from zoo.errors import ConfigError  # the error of every layer, raised here the most

__all__ = ['ConfigError', 'DEFAULT_RULES', 'DEFAULT_TASK_METRICS', 'OPTIMIZERS', 'SPIKE_SIGNALS',
           'TASK_METRICS', 'apply_override', 'base', 'check', 'data_skips', 'load',
           'text_length']


def load(spec, overrides=()):
  """'configs/NAME.py[:arg]' (+ 'a.b=value' overrides) -> the locked config, each field in its range
  (zoo/run resolves it: what the fields mean together)."""
  path, _, arg = spec.rpartition(':')
  if not path.endswith('.py'):  # no ':arg' (a gs:// path has a ':' of its own)
    path, arg = spec, ''
  if not storage.isfile(path):
    raise ConfigError(f'--config={spec}: no such file {path!r}; pass a file in configs/')
  local = storage.local_copy(path)  # a workdir's config.py may be in a bucket (zoo.convert.hf)
  module_spec = importlib.util.spec_from_file_location('zoo_config_file', local)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  if local != path:
    os.remove(local)
  try:
    config = module.get_config(arg) if arg else module.get_config()
  except ValueError as e:  # e.g. an unknown variant after the ':'
    raise ConfigError(f'--config={spec}: {e}') from None
  config.lock()
  for override in overrides:
    apply_override(config, override)
  checks.check(config)
  return config


def apply_override(config, override):
  """'train.steps=100' sets that field; the value is a Python literal or a bare string."""
  key, sep, text = override.partition('=')
  if not sep:
    raise ConfigError(f'override {override!r}: write it as --config.{key}=VALUE')
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    value = text
  *parents, leaf = key.split('.')
  node = config
  for i, name in enumerate(parents):
    if not isinstance(node, ml_collections.ConfigDict) or name not in node:
      raise ConfigError(f'unknown config key {".".join(parents[:i + 1])!r} in --config.{key}'
                        + _did_you_mean(node, parents[:i], name))
    node = node[name]
  if not isinstance(node, ml_collections.ConfigDict) or leaf not in node:
    raise ConfigError(f'unknown config key {key!r}'
                      + (_did_you_mean(node, parents, leaf) or
                         '; check the spelling against the config file'))
  if isinstance(node[leaf], float) and isinstance(value, int):
    value = float(value)
  try:
    node[leaf] = value
  except TypeError as e:
    kind = type(node[leaf]).__name__
    raise ConfigError(f'--config.{key}={text}: wrong type ({e}); expected '
                      f'{"an" if kind[0] in "aeiou" else "a"} {kind}') from None


def _did_you_mean(node, parents, name):
  """'; did you mean --config.train.steps?' for the closest key beside `name`, or ''."""
  if not isinstance(node, ml_collections.ConfigDict):
    return ''
  close = difflib.get_close_matches(name, list(node.keys()), n=1, cutoff=0.6)
  return f'; did you mean --config.{".".join([*parents, close[0]])}?' if close else ''
