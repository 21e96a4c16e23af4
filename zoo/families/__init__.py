"""The registry of model families: `model.family` -> the module that owns the family.

A family module (decoder.py is the worked example; docs/families.md) defines:
  NAME, OBJECTIVES (data.objective values that train it), LAYER_FIELDS (model fields that
  count its blocks), MODEL_INPUTS (batch keys init needs), POSITIONS, BLOCKS and
  SLIDING_WINDOW, TWO_SIDED_WINDOW, LATENT_ATTENTION, PREDICTION_MODULES and
  SEPARATE_ENCODER_EMBED (what its model builds; zoo/run/checks.py checks), ATTENTION
  ('causal', 'bidirectional' or 'cross': an encoder and a decoder over the targets with
  cross-attention; how zoo/counting.py counts its FLOPs), CONTEXT_CHUNKS (the
  sequence chunks each device holds under mesh.context; 0 = not built), PROMPT_JOINT,
  PENALTIES_COUNT_PROMPT (generation penalties count the prompt's tokens as seen), TASKS
  (data.task.kind values it fine-tunes on), INPUT_SPECIALS and LABEL_SPECIALS (the
  tokenizer's specials around a text it reads, and around a classifier's text: an export's
  tokenizer adds them), LABEL_TOKEN (which token a label head reads: 'first', 'last');
  build(frozen model config, adapters: train.lora's lora.Spec) -> Linen module;
  batch_spec(data_config, batch_size) -> {key: (shape, dtype)};
  counts(batch) -> the batch's loss normalisers (rows, tokens, ...);
  loss(model, config, variables, batch, rng=None, whole=None) -> loss.Loss (whole: the
    counts of the batch `batch` is a microbatch of);
  task_example(kind, example, tokenizer, data_config) -> one task example's row;
  kv_cache_layers(m);  hf_model_type(m);
  tokenize_prompts(config, tokenizer, prompts, fit=False) and
  start_generation(model, variables, ids, segments, max_new_tokens), or None for both.
A family may also define check(config) (what its own fields mean together; zoo/run/checks.py
calls it), example_batch(model_config, batch_size, seq_len) (inputs that are not token ids:
the vision family's pixels) and smoke(config) (what zoo/presets.py's smoke shrinks beyond the
shared dimensions).
Nothing outside the registry and the family modules looks at the family's name.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections

from zoo.errors import ConfigError
from zoo.models import lora
from zoo.families import decoder
from zoo.families import encoder
from zoo.families import encoder_decoder
from zoo.families import image_text
from zoo.families import vision

FAMILIES = {module.NAME: module for module in (decoder, encoder, encoder_decoder, vision,
                                               image_text)}


def get(model_config):
  """The family module of `model_config` (or of a family name)."""
  name = model_config if isinstance(model_config, str) else model_config.family
  if name not in FAMILIES:
    raise ConfigError(f'model.family={name!r} is not one of {", ".join(map(repr, FAMILIES))}')
  return FAMILIES[name]


def build(model_config, lora_config=None):
  """model config (+ train.lora: its adapters, a lora.Spec the modules carry beside the
  config) -> the family's flax.linen.Module (its docstring says what it returns)."""
  m = ml_collections.ConfigDict(model_config).copy_and_resolve_references()
  return get(m).build(ml_collections.FrozenConfigDict(m), lora.spec(lora_config))


def total_layers(m):
  """Blocks in the model (encoder + decoder for encoder_decoder)."""
  return sum(m[field] for field in get(m).LAYER_FIELDS)


def example_batch(model_config, batch_size, seq_len):
  """All-zero inputs with the keys the family's model reads (int32 token ids unless the
  family makes its own); for init and tracing."""
  family = get(model_config)
  if hasattr(family, 'example_batch'):
    return family.example_batch(model_config, batch_size, seq_len)
  return {key: jnp.zeros((batch_size, seq_len), jnp.int32)
          for key in get(model_config).MODEL_INPUTS}


def batch_spec(config, batch_size=None):
  """{key: (shape, numpy dtype)} of a global batch (default train.batch_size rows): the one
  definition the pipeline, plan mode and the steps share."""
  batch_size = config.train.batch_size if batch_size is None else batch_size
  return get(config.model).batch_spec(config.data, batch_size)


def loss_length(config):
  """Positions of a row the loss reads: the decoder's targets of an encoder-decoder
  (data.target_seq_len), else data.seq_len."""
  return (config.data.target_seq_len if get(config.model).ATTENTION == 'cross' else
          config.data.seq_len)


def abstract_batch(config, sharding=None):
  """The global batch as jax.ShapeDtypeStructs, for tracing and ahead-of-time compiles."""
  return {key: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
          for key, (shape, dtype) in batch_spec(config).items()}


def loss_fn(model, config):
  """-> loss(variables, batch, rng=None, whole=None) -> loss.Loss, for the train and eval
  steps (whole: counts_fn(config)(batch) of the batch split into microbatches)."""
  return functools.partial(get(config.model).loss, model, config)


def counts_fn(config):
  """-> counts(batch): the batch's loss normalisers, for microbatched train steps."""
  return get(config.model).counts
