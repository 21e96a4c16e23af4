"""--mode=generate: the newest checkpoint (or train.init_params) continues each --prompt.

Prompts are tokenized as in training (decoder: BOS + pieces; encoder-decoder: pieces + EOS
as encoder inputs), generated together in one batch with the config's `generate` settings,
and printed with their completions.
"""

import flax.linen as nn
import jax
import numpy as np

from zoo import sharding
from zoo.config import ConfigError
from zoo.infer import generate
from zoo.train import loop
from zoo.train import step as step_lib


def check(config, prompts):
  """One-line errors before anything is built or compiled."""
  if config.model.family == 'encoder':
    raise ConfigError("--mode=generate needs model.family 'decoder' or 'encoder_decoder'; "
                      "'encoder' (BERT) fills in masked tokens, it does not generate")
  if not prompts:
    raise ConfigError('--mode=generate needs at least one --prompt="..."')


def _tokenize(config, tokenizer, prompts):
  """-> (ids, segment ids) [B, P], left-padded (decoder) or right-padded (encoder)."""
  pieces = tokenizer.encode(prompts)
  if config.model.family == 'decoder':
    rows = [[tokenizer.bos_id, *p] for p in pieces]
    longest = max(len(r) for r in rows) + config.generate.max_new_tokens
    if config.model.position == 'learned' and longest > config.model.max_length:
      raise ConfigError(f'the longest prompt ({longest - config.generate.max_new_tokens} '
                        f'tokens) + generate.max_new_tokens={config.generate.max_new_tokens} '
                        f'exceed model.max_length={config.model.max_length} of the learned '
                        'position table; lower generate.max_new_tokens or shorten the prompt')
    return generate.left_pad(rows, tokenizer.pad_id)
  rows = [[*p, tokenizer.eos_id] for p in pieces]
  length = max(len(r) for r in rows)
  ids = np.full((len(rows), length), tokenizer.pad_id, np.int32)
  for i, row in enumerate(rows):
    ids[i, :len(row)] = row
  return ids, (np.arange(length)[None] < np.array([[len(r)] for r in rows])).astype(np.int32)


def _text(tokenizer, ids, data_config):
  """Ids -> text; ids past the tokenizer are T5 sentinels (<extra_id_k>, counting down from
  data.vocab_size) or, elsewhere, shown as <id N>."""
  parts, pieces = [], []
  for i in ids:
    if i < tokenizer.vocab_size:
      pieces.append(i)
      continue
    parts.append(tokenizer.decode(pieces))
    pieces = []
    if data_config.objective == 'span_corruption' and i < data_config.vocab_size:
      parts.append(f'<extra_id_{data_config.vocab_size - 1 - i}>')
    else:
      parts.append(f'<id {i}>')
  return ''.join(parts) + tokenizer.decode(pieces)


def run(config, workdir, prompts):
  """-> the completions (text), also printed after their prompts."""
  check(config, prompts)
  setup = loop.Setup(config, workdir)
  ids, segments = _tokenize(config, setup.tokenizer, prompts)
  step, variables = setup.restore_variables('generate')
  g = config.generate
  fn = generate.make(setup.model, config.model.family, g.max_new_tokens,
                     {'temperature': g.temperature, 'top_k': g.top_k, 'top_p': g.top_p},
                     setup.tokenizer.eos_id, setup.tokenizer.pad_id, g.num_beams,
                     g.length_alpha)
  replicated = sharding.replicated(setup.mesh)
  jitted = jax.jit(fn, in_shardings=(step_lib.model_variables(setup.state_shardings),
                                     replicated, replicated, replicated),
                   out_shardings=replicated)
  # every process holds the same prompts: one replicated array across the pod
  inputs = [jax.device_put(a, replicated) for a in (ids, segments, jax.random.PRNGKey(g.seed))]
  with jax.set_mesh(setup.mesh), nn.logical_axis_rules(generate.decode_rules(setup.rules)):
    tokens = np.asarray(jitted(variables, *inputs).addressable_data(0))
  completions = []
  for prompt, row in zip(prompts, tokens):
    ended = setup.tokenizer.eos_id in row
    row = list(row[:list(row).index(setup.tokenizer.eos_id)] if ended else row)
    completions.append(_text(setup.tokenizer, row, config.data))
    joint = '' if config.model.family == 'decoder' else '\n=> '  # a continuation, or an answer
    if jax.process_index() == 0:
      print(f'--- step {step}: {len(row)} tokens{" then EOS" if ended else ""}\n'
            f'{prompt}{joint}{completions[-1]}', flush=True)
  return completions
