"""A served model from a workdir: the run's config (its own config.json unless --config
names another), newest checkpoint (or train.init_params: a Hugging Face import), tokenizer
and chat template; a LoRA run's adapters merged into its kernels first. Bad input is one
ConfigError before anything is compiled."""

import dataclasses
import os

from zoo import families
from zoo.data import chat
from zoo.data import corpus as corpus_lib
from zoo.errors import ConfigError
from zoo.kernels import paged
from zoo.models import dims
from zoo.models import lora
from zoo.serve import api
from zoo.serve import engine as engine_lib
from zoo.train import runtime


@dataclasses.dataclass(frozen=True)
class Served:
  engine: engine_lib.Engine
  context: api.Context


def max_len(config):
  return config.serve.max_len or config.data.seq_len


def check(config):
  """What serving needs beyond the config's own checks."""
  s, m = config.serve, config.model
  if 'causal_lm' not in families.get(m).OBJECTIVES or m.num_labels:
    raise ConfigError(f'zoo.serve serves decoder-only language models; model.family='
                      f'{m.family!r}{" with a label head" if m.num_labels else ""} is not one')
  if config.mesh.context != 1 or config.mesh.stage != 1:
    raise ConfigError(f'zoo.serve runs on data x fsdp x tensor x expert meshes; set '
                      f'--config.mesh.context=1 --config.mesh.stage=1 (now '
                      f'{config.mesh.context}, {config.mesh.stage})')
  length = max_len(config)
  pages = -(-length // s.page_size)
  if pages > s.num_pages - 1:
    raise ConfigError(f'serve.max_len={length} needs {pages} pages of serve.page_size='
                      f'{s.page_size} for one sequence; serve.num_pages={s.num_pages} holds '
                      f'{s.num_pages - 1}; raise serve.num_pages to at least {pages + 1} or lower '
                      'serve.max_len')
  if m.position == 'learned' and length > m.max_length:
    raise ConfigError(f'serve.max_len={length} exceeds model.max_length={m.max_length} of the '
                      'learned position table; set --config.serve.max_len to at most it')


def attention_kernel(config, platform, tensor):
  """-> (the kernel attention over pages runs, why); serve.kernel='pallas' where it cannot
  run is a ConfigError."""
  lacks = paged.pallas_refusal(config.model)
  refusal = (f'the Pallas kernel does not take {lacks}' if lacks else
             f'the Pallas kernel runs on TPU, this is {platform}' if platform != 'tpu' else
             f'the Pallas kernel is not split over mesh.tensor={tensor} yet' if tensor > 1
             else '')
  chosen = config.serve.kernel
  if chosen == 'pallas' and refusal:
    raise ConfigError(f"serve.kernel='pallas': {refusal}; use serve.kernel='auto' or 'xla'")
  if chosen == 'xla' or refusal:
    return 'xla', refusal or "serve.kernel='xla'"
  return 'pallas', 'the Pallas ragged paged kernel on TPU'


def from_workdir(resolved, workdir):
  """-> Served for the run in `workdir` (not started)."""
  config = resolved.config
  check(config)
  place = runtime.placement(resolved)
  kernel = attention_kernel(config, place.mesh.devices.flat[0].platform,
                            place.mesh.shape.get('tensor', 1))
  runtime.check_restorable(config, workdir, 'zoo.serve')
  runtime.compile_cache(config)
  state = runtime.model_state(resolved, place.mesh)
  runtime.check_same_model(config, workdir, state)  # before its tokenizer is looked for
  tokenizer = runtime.tokenizer(config, workdir)
  tokenizer_path = corpus_lib.tokenizer_path(config.data, workdir)
  template = chat.for_run(config.data.task.template, tokenizer_path, tokenizer)
  _, variables = runtime.restore_variables(config, workdir, state, 'zoo.serve')
  model = state.model
  if config.train.lora.rank:  # one kernel a layer, as the export writes it
    scale = config.train.lora.alpha / config.train.lora.rank
    variables = {**variables, 'params': lora.merge(variables['params'], scale)}
    model = families.build(config.model)
  name = config.serve.model_name or os.path.basename(os.path.normpath(workdir))
  return make(config, model, variables, place, tokenizer, template, name, kernel)


def make(config, model, variables, place, tokenizer, template, name, kernel=('xla', '')):
  """-> Served for a model and its variables; kernel: attention_kernel's answer."""
  m = config.model
  kernel, why = kernel
  print(f'serve: attention over pages by {kernel}' + (f' ({why})' if why else ''), flush=True)
  engine = engine_lib.Engine(model, variables, place, config.serve, max_len(config),
                             dims.kv_heads(m), recurrent='D' in m.attention.pattern,
                             kernel=kernel)
  context = api.Context(tokenizer, template, name, max_len(config), m.vocab_size,
                        chat.end_of_turn_id(template, tokenizer))
  return Served(engine, context)

