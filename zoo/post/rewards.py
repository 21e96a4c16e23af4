"""train.grpo.reward: a function named 'module:function', called on each completion's text and
its prompt's example (the JSON line as read) -> a finite number. Loaded before anything
compiles; a call that raises or returns something else is an error naming the prompt's line,
or with train.grpo.on_bad_reward='skip' its group is left out of the step and counted."""

import importlib
import math

import numpy as np

from zoo.errors import ConfigError


class RewardError(RuntimeError):
  """The reward failed on a completion and train.grpo.on_bad_reward='error'."""


def load(spec):
  """'module:function' -> the function; a ConfigError naming the field if it is not one."""
  module_name, _, name = spec.partition(':')
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise ConfigError(f'train.grpo.reward={spec!r}: cannot import {module_name} ({e}); put '
                      'the module on PYTHONPATH or fix the name') from None
  fn = getattr(module, name, None)
  if not callable(fn):
    raise ConfigError(f'train.grpo.reward={spec!r}: {module_name} has no function {name!r}')
  return fn


def _one(fn, text, example):
  """-> (the reward as a float, None) or (nan, why it is not one)."""
  try:
    value = fn(text, example)
  except Exception as e:  # pylint: disable=broad-except
    return math.nan, f'raised {type(e).__name__}: {e}'
  if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
    return math.nan, f'returned {value!r}, not a number'
  if not math.isfinite(value):
    return math.nan, f'returned {value!r}'
  return float(value), None


def score(fn, spec, texts, examples, where, on_bad, group_size):
  """-> (rewards [P, G] float64, which groups are good [P]); texts and examples row by row
  (G rows a prompt), where[p]: the prompt's file:line. A bad reward raises RewardError
  (on_bad 'error') or marks its group bad ('skip')."""
  rewards, good = np.zeros(len(texts)), np.ones(len(texts) // group_size, bool)
  for i, (text, example) in enumerate(zip(texts, examples)):
    rewards[i], why = _one(fn, text, example)
    if why is None:
      continue
    if on_bad == 'error':
      raise RewardError(f'train.grpo.reward={spec!r} {why} on the prompt at '
                        f'{where[i // group_size]} (completion {text[:60]!r}); fix the reward '
                        "or set train.grpo.on_bad_reward='skip'")
    good[i // group_size] = False
  return rewards.reshape(-1, group_size), good
