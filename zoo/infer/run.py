"""--mode=generate: the newest checkpoint (or train.init_params) continues each --prompt.

Prompts are tokenized as the family's `tokenize_prompts` says (decoder: BOS + pieces;
encoder-decoder: pieces + EOS as encoder inputs), generated together in one batch with the
config's `generate` settings, and printed with their completions; with
generate.draft_workdir or draft_mtp, one prompt is continued by speculative decoding
(zoo/infer/draft.py).
It builds the mesh, reads the run's tokenizer and checkpoint, and never reads the corpus.
"""

import jax
import numpy as np

from zoo import families
from zoo.train import runtime
from zoo import sharding
from zoo.errors import ConfigError
from zoo.infer import draft
from zoo.infer import generate
from zoo.train import state as state_lib


def check(config, prompts):
  """One-line errors before anything is built or compiled."""
  if families.get(config.model).start_generation is None:
    generating = [name for name, f in families.FAMILIES.items() if f.start_generation]
    raise ConfigError(f'--mode=generate needs a model.family that generates '
                      f'({", ".join(generating)}); model.family={config.model.family!r} does '
                      'not')
  if not prompts:
    raise ConfigError('--mode=generate needs at least one --prompt="..."')
  if draft.is_speculative(config):
    draft.check(config, prompts)


def text(tokenizer, ids, data_config):
  """Ids -> text; ids past the tokenizer are T5 sentinels (<extra_id_k>, as
  tokenizer.sentinel_ids numbers them) or, elsewhere, shown as <id N>."""
  sentinels = tokenizer.sentinel_ids(data_config.num_sentinels)
  parts, pieces = [], []
  for i in ids:
    if i < tokenizer.vocab_size:
      pieces.append(i)
      continue
    parts.append(tokenizer.decode(pieces))
    pieces = []
    if data_config.objective == 'span_corruption' and i in sentinels:
      parts.append(f'<extra_id_{sentinels.index(i)}>')
    else:
      parts.append(f'<id {i}>')
  return ''.join(parts) + tokenizer.decode(pieces)


def run(resolved, workdir, prompts):
  """The resolved run's (zoo/run) completions of `prompts` (text), also printed after
  them."""
  config, family = resolved.config, resolved.family
  check(config, prompts)
  runtime.check_restorable(config, workdir, '--mode=generate')
  runtime.compile_cache(config)
  place = runtime.placement(resolved)
  state = runtime.model_state(resolved, place.mesh)
  runtime.check_same_model(config, workdir, state)  # before its tokenizer is looked for
  tokenizer = runtime.tokenizer(config, workdir)
  ids, segments = family.tokenize_prompts(config, tokenizer, prompts)
  step, variables = runtime.restore_variables(config, workdir, state, '--mode=generate')
  stats = None
  if draft.is_speculative(config):
    tokens, stats = draft.generator(config, workdir, place, state, tokenizer)(
        variables, ids, segments)
  else:
    tokens = generator(config, place, state, tokenizer)(variables, ids, segments)
  outputs = []
  for prompt, (text, ended, length) in zip(prompts, _completions(config, tokenizer, tokens)):
    text, stopped = cut_at_stop(text, config.generate.stop)
    outputs.append(text)
    if jax.process_index() == 0:
      how = f' before stop string {stopped!r}' if stopped else ' then EOS' if ended else ''
      if ended and not length and config.generate.num_beams > 1:
        how += (': ending at once is likelier than every continuation the beams found; '
                'generate.min_new_tokens or generate.length_alpha favour longer ones '
                '(docs/generate.md)')
      print(f'--- step {step}: {length} tokens{how}\n'
            f'{prompt}{family.PROMPT_JOINT}{text}', flush=True)
  if stats and jax.process_index() == 0:
    print(draft.describe(stats, draft.tokens_a_round(config)), flush=True)
  return outputs


def generator(config, place, state, tokenizer):
  """-> generate(variables, ids [B, P], segment ids [B, P]) -> new tokens [B, N] (numpy) with
  the config's generate settings, jitted on the mesh; every process passes the same prompts
  (one replicated array across the pod)."""
  g = config.generate
  fn = generate.make(state.model, g.max_new_tokens,
                     {'temperature': g.temperature, 'top_k': g.top_k, 'top_p': g.top_p,
                      'min_p': g.min_p},
                     tokenizer.eos_id, tokenizer.pad_id, g.num_beams, g.length_alpha,
                     {'repetition': g.repetition_penalty, 'frequency': g.frequency_penalty},
                     g.beam_rules, g.min_new_tokens)
  replicated = sharding.replicated(place.mesh)
  jitted = place.jit(fn, (state_lib.model_variables(state.shardings),
                          replicated, replicated, replicated), replicated,
                     rules=generate.decode_rules(place.rules))

  def run(variables, ids, segments):
    inputs = [jax.device_put(a, replicated) for a in (ids, segments,
                                                      jax.random.PRNGKey(g.seed))]
    return np.asarray(jitted(variables, *inputs).addressable_data(0))
  return run


def _completions(config, tokenizer, tokens):
  """New tokens [B, N] -> [(text up to EOS, whether EOS came, tokens before it)]."""
  out = []
  for row in tokens:
    ended = tokenizer.eos_id in row
    row = list(row[:list(row).index(tokenizer.eos_id)] if ended else row)
    out.append((text(tokenizer, row, config.data), ended, len(row)))
  return out


def completions(config, tokenizer, tokens):
  """New tokens [B, N] -> their texts, each ended at EOS and at the first stop string."""
  return [cut_at_stop(text, config.generate.stop)[0]
          for text, _, _ in _completions(config, tokenizer, tokens)]


def cut_at_stop(text, stops):
  """-> (text before the earliest stop string in it, that string), or (text, None). Decoding
  itself runs to EOS or generate.max_new_tokens; the cut is made on the text, so it holds
  however the tokenizer splits the stop string."""
  found = [(text.find(s), s) for s in stops if s in text]
  if not found:
    return text, None
  at, stop = min(found)
  return text[:at], stop
