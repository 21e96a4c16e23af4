"""--mode=generate with a draft: generate.draft_workdir (another run: its config and newest
checkpoint, checked against the target before anything compiles) or generate.draft_mtp (the
model's own prediction module), and the speculative generator (zoo/infer/speculative.py)
jitted on the mesh."""

import jax
import numpy as np

from zoo import families
from zoo import run as run_lib
from zoo import sharding
from zoo.data import corpus as corpus_lib
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError
from zoo.infer import generate
from zoo.infer import speculative
from zoo.train import run_config
from zoo.train import runtime
from zoo.train import state as state_lib


def drafts_for(model_config):
  """Whether the family decodes by speculation: it can feed several tokens (a decoder)."""
  return hasattr(families.get(model_config), 'prefill')


def is_speculative(config):
  return bool(config.generate.draft_workdir or config.generate.draft_mtp)


def tokens_a_round(config):
  return 1 if config.generate.draft_mtp else config.generate.draft_tokens


def check(config, prompts):
  """One-line errors about the speculative setup that need no files."""
  if not drafts_for(config.model):
    raise ConfigError(f'generate.draft_workdir or draft_mtp: speculative decoding drafts for '
                      f'decoders, model.family={config.model.family!r}; turn the draft off')
  if len(prompts) != 1:
    raise ConfigError(f'generate.draft_workdir or draft_mtp: speculative decoding continues '
                      f'one prompt at a time ({len(prompts)} --prompt given); pass one')


def load_config(config, workdir):
  """The draft run's config (its WORKDIR/config.json), checked against the target's: a
  decoder with the same vocabulary size and the same tokenizer file."""
  g = config.generate
  draft = run_config.load(g.draft_workdir)
  if draft is None:
    raise ConfigError(f'generate.draft_workdir={g.draft_workdir}: no {run_config.FILE} there; '
                      'pass the workdir of a trained run')
  if not drafts_for(draft.model) or draft.model.vocab_size != config.model.vocab_size:
    raise ConfigError(
        f'generate.draft_workdir={g.draft_workdir}: a {draft.model.family} with '
        f'model.vocab_size={draft.model.vocab_size}; the draft must be a decoder over this '
        f"model's {config.model.vocab_size} ids")
  if 'D' in draft.model.attention.pattern:
    raise ConfigError(f'generate.draft_workdir={g.draft_workdir}: its Gated DeltaNet (\'D\') '
                      'layers keep one state that cannot rewind past rejected tokens; draft '
                      'with an attention-only decoder')
  mine = corpus_lib.tokenizer_path(config.data, workdir)
  theirs = corpus_lib.tokenizer_path(draft.data, g.draft_workdir)
  if tokenizer_lib.checksum(mine) != tokenizer_lib.checksum(theirs):
    raise ConfigError(f'generate.draft_workdir={g.draft_workdir}: its tokenizer ({theirs}) is '
                      f'not this run\'s ({mine}); train the draft with '
                      f'--config.data.tokenizer.path={mine}')
  return draft


def generator(config, workdir, place, state, tokenizer):
  """-> generate(variables, ids [1, P], segment ids [1, P]) -> (new tokens [1, N] numpy,
  {'rounds', 'accepted'}), the draft restored from generate.draft_workdir, or the model's
  own prediction module with generate.draft_mtp."""
  g = config.generate
  sampling = {'temperature': g.temperature, 'top_k': g.top_k, 'top_p': g.top_p,
              'min_p': g.min_p}
  replicated = sharding.replicated(place.mesh)
  variables_sharding = state_lib.model_variables(state.shardings)
  if g.draft_mtp:
    own = speculative.make(state.model, 'mtp', g.max_new_tokens, 1, sampling,
                           tokenizer.eos_id, tokenizer.pad_id)
    fn = lambda variables, _, *args: own(variables, None, *args)
    draft_variables, draft_sharding = None, None
  else:
    draft_config = load_config(config, workdir)
    draft_state = runtime.model_state(run_lib.resolve(draft_config), place.mesh)
    _, draft_variables = runtime.restore_variables(draft_config, g.draft_workdir,
                                                   draft_state, '--mode=generate')
    draft_sharding = state_lib.model_variables(draft_state.shardings)
    fn = speculative.make(state.model, draft_state.model, g.max_new_tokens, g.draft_tokens,
                          sampling, tokenizer.eos_id, tokenizer.pad_id)
  jitted = place.jit(fn, (variables_sharding, draft_sharding, replicated, replicated,
                          replicated), replicated, rules=generate.decode_rules(place.rules))

  def run(variables, ids, segments):
    inputs = [jax.device_put(a, replicated) for a in (ids, segments,
                                                      jax.random.PRNGKey(g.seed))]
    tokens, stats = jitted(variables, draft_variables, *inputs)
    return (np.asarray(tokens.addressable_data(0)),
            {k: int(v.addressable_data(0)) for k, v in stats.items()})
  return run


def describe(stats, draft_tokens):
  """The acceptance line printed after a speculative completion."""
  proposed = stats['rounds'] * draft_tokens
  share = stats['accepted'] / proposed if proposed else 0.0
  per_pass = (stats['rounds'] + stats['accepted']) / max(stats['rounds'], 1)
  return (f'speculative: {stats["accepted"]} of {proposed} draft tokens kept ({share:.0%}) in '
          f'{stats["rounds"]} target passes, {per_pass:.2f} tokens a pass')

