"""Training phases: the global batch and sequence length each stretch of steps runs at.

A run trains at train.batch_size x data.seq_len; before that it may run other shapes,
given one of two ways:

  train.phases = 'UNTIL:BATCH:SEQ_LEN,...'  each phase runs BATCH sequences of SEQ_LEN
      tokens until UNTIL (PaLM: '50000:512:2048,115000:1024:2048'; BERT: '900000:256:128');
  train.batch_ramp = 'START:INCREMENT:UNTIL'  the batch grows from START by INCREMENT in
      equal slices of UNTIL until it reaches train.batch_size (Megatron's
      --rampup-batch-size; GPT-3's ramp, Brown et al. 2020 App. B).

UNTIL is a step (an integer: the phase's last step) or a token count ('4Btokens',
'375Mtokens', '2.6e11tokens': the phase ends at the first step whose tokens, counted from
the start of the run, reach it). The last phase, train.batch_size x data.seq_len, runs to
train.steps. The loop compiles one step per shape (zoo/train/loop.py); the streams change
batch and length at a boundary without losing or repeating a row (zoo/data/streams.py); the
schedule's tokens (optim.warmup_tokens, optim.decay_tokens) and plan mode's totals follow
the phases.
"""

import dataclasses
import math
import re

import jax.numpy as jnp
import numpy as np

from zoo.errors import ConfigError
from zoo.families import spans

_UNTIL = re.compile(r'^(?:(\d+)|(\d+(?:\.\d*)?(?:e\+?\d+)?)([KMBT]?)tokens)$')
_SCALE = {'': 1, 'K': 1e3, 'M': 1e6, 'B': 1e9, 'T': 1e12}


@dataclasses.dataclass(frozen=True)
class Phase:
  first: int  # first step (steps count from 1)
  last: int  # last step
  batch_size: int  # global, in sequences
  seq_len: int
  tokens_before: int  # tokens the steps before `first` trained on

  @property
  def tokens_per_step(self):
    return self.batch_size * self.seq_len

  @property
  def tokens(self):
    return (self.last - self.first + 1) * self.tokens_per_step


def _until(field, text):
  """'123' -> ('steps', 123); '4Btokens' -> ('tokens', 4e9)."""
  match = _UNTIL.match(text.strip())
  if not match:
    raise ConfigError(f'{field}: {text.strip()!r} is not a step (an integer) or a token count '
                      "(e.g. '4Btokens', '2.6e11tokens')")
  if match.group(1):
    return 'steps', int(match.group(1))
  return 'tokens', float(match.group(2)) * _SCALE[match.group(3)]


def _integers(field, parts, item, form):
  try:
    values = [int(p) for p in parts]
  except ValueError:
    values = []
  if len(values) != len(parts) or min(values) <= 0:
    raise ConfigError(f'{field}: {item.strip()!r} is not {form} with positive integers')
  return values


def _requested(t, seq_len):
  """-> [(until, batch, seq_len)] before the run's own shape, as the config writes them."""
  if t.phases and t.batch_ramp:
    raise ConfigError('train.phases and train.batch_ramp are both set; write the ramp as '
                      'phases, or set one of them to \'\'')
  if t.phases:
    out = []
    for item in t.phases.split(','):
      parts = item.split(':')
      if len(parts) != 3:
        raise ConfigError(f'train.phases: {item.strip()!r} is not UNTIL:BATCH:SEQ_LEN, e.g. '
                          "'50000:512:2048' or '4Btokens:256:128'")
      batch, length = _integers('train.phases', parts[1:], item, 'UNTIL:BATCH:SEQ_LEN')
      out.append((_until('train.phases', parts[0]), batch, length))
    return out
  if t.batch_ramp:
    parts = t.batch_ramp.split(':')
    if len(parts) != 3:
      raise ConfigError(f'train.batch_ramp={t.batch_ramp!r} is not START:INCREMENT:UNTIL, '
                        "e.g. '16:16:4Btokens'")
    start, increment = _integers('train.batch_ramp', parts[:2], t.batch_ramp,
                                 'START:INCREMENT:UNTIL')
    unit, until = _until('train.batch_ramp', parts[2])
    if start >= t.batch_size or (t.batch_size - start) % increment:
      raise ConfigError(f'train.batch_ramp={t.batch_ramp!r}: START={start} must be below '
                        f'train.batch_size={t.batch_size} and INCREMENT={increment} divide '
                        f'their difference ({t.batch_size - start})')
    slices = (t.batch_size - start) // increment
    return [((unit, until * (k + 1) / slices), start + k * increment, seq_len)
            for k in range(slices)]
  return []


def resolve(config):
  """-> [Phase] covering steps 1..train.steps (one phase when the run has none); bad input
  is a ConfigError naming train.phases or train.batch_ramp."""
  t, seq_len = config.train, config.data.seq_len
  field = 'train.phases' if t.phases else 'train.batch_ramp'
  phases, last, tokens = [], 0, 0
  for (unit, until), batch, length in _requested(t, seq_len):
    end = int(until) if unit == 'steps' else last + max(
        1, math.ceil((until - tokens) / (batch * length)))
    if end <= last or end >= t.steps:
      where = f'{until:.4g} tokens (step {end})' if unit == 'tokens' else f'step {end}'
      raise ConfigError(f'{field}: a phase ends at {where}, not after the '
                        f'previous phase (step {last}) and before train.steps={t.steps}; '
                        'boundaries must increase and leave the run its own last phase')
    phases.append(Phase(last + 1, end, batch, length, tokens))
    tokens += (end - last) * batch * length
    last = end
  phases.append(Phase(last + 1, t.steps, t.batch_size, seq_len, tokens))
  return phases


def at(phases, step):
  """The index of the phase step `step` (from 1) runs in."""
  return next((k for k, p in enumerate(phases) if step <= p.last), len(phases) - 1)


def total_tokens(phases):
  return sum(p.tokens for p in phases)


def tokens_before(phases, step):
  """Tokens the steps 1..step trained on (numpy or jax `step`: the schedule's count)."""
  xp = np if isinstance(step, (int, np.integer, np.ndarray)) else jnp
  firsts = np.array([p.first for p in phases])
  lengths = np.array([p.last - p.first + 1 for p in phases])
  per_step = np.array([p.tokens_per_step for p in phases], np.float64 if xp is np else
                      np.float32)
  return xp.sum(xp.clip(step - firsts + 1, 0, lengths) * per_step)


def config_for(config, phase):
  """A copy of the config with the phase's shape as its own (train.batch_size,
  data.seq_len; span corruption's data.target_seq_len from its raw pieces) and no phases:
  what each phase is checked and compiled as."""
  out = config.copy_and_resolve_references()
  out.train.batch_size, out.train.phases, out.train.batch_ramp = phase.batch_size, '', ''
  if phase.seq_len != config.data.seq_len:
    out.data.seq_len = phase.seq_len
    if config.data.objective == 'span_corruption':
      out.data.target_seq_len = spans.lengths(out.data)[2]
  return out


def describe(phases):
  """'512 x 2048 to step 50,000, ...' for the run header."""
  return ', '.join(f'{p.batch_size} x {p.seq_len} to step {p.last:,}' for p in phases)
