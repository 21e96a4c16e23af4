"""The vision family (ViT): images in patches through the zoo's encoder blocks, a label head
on the pooled state, trained on an image classification task (data.task.kind
'image_classification': zoo/data/task.py reads the images, zoo/data/images.py makes their
pixels).

A row is one image: its pixels [Y, X, C] (data.image_size square, model.vision.channels),
a real-row marker (segment_ids [1]: 0 pads an eval batch) and its label. data.seq_len is
the tokens the tower makes of an image (its patches, + the class token when it pools by
it), so tokens per second and FLOPs per token count patch tokens.
"""

import jax.numpy as jnp
import numpy as np

from zoo import config as config_lib
from zoo.errors import ConfigError
from zoo.families import tasks
from zoo.models import vision

NAME = 'vision'
OBJECTIVES = ('image_classification',)
LAYER_FIELDS = ('num_layers',)
MODEL_INPUTS = ('pixels',)
POSITIONS = ('none',)  # the tower's own positions: model.vision.position
BLOCKS = ('sequential', 'parallel')
SLIDING_WINDOW = TWO_SIDED_WINDOW = False
ATTENTION = 'bidirectional'  # every patch attends every other
LATENT_ATTENTION = PREDICTION_MODULES = SEPARATE_ENCODER_EMBED = False
CONTEXT_CHUNKS = 0  # an image's tokens are not split over devices
TASKS = ('image_classification',)
PROMPT_JOINT = PENALTIES_COUNT_PROMPT = None
INPUT_SPECIALS = LABEL_SPECIALS = LABEL_TOKEN = None  # no text, no tokenizer
tokenize_prompts = start_generation = None  # it classifies; --mode=generate says so


def build(model_config, adapters):
  """-> the Linen module: batch -> {'hidden': [B, L, D], 'pooled': [B, D], 'label_logits':
  [B, num_labels]} (zoo/models/vision.py)."""
  return vision.ImageModel(model_config, adapters)


def tokens(m, image_size):
  """The tokens the tower makes of a square image of `image_size` pixels."""
  v = m.vision
  return (image_size // v.patch_size) ** 2 + (v.pool == 'token')


def check(config):
  """What the vision fields mean together (zoo/run/checks.py calls it)."""
  check_images(config)
  if not config.data.task.kind:
    raise ConfigError("model.family='vision' trains on labelled images: set data.task.kind="
                      "'image_classification' and data.task.path")


def check_images(config):
  """The tower's fields and the images a row holds, as they must agree (the image_text
  family's tower too)."""
  m, d = config.model, config.data
  v = m.vision
  if v.position not in vision.POSITIONS or v.pool not in vision.POOLED:
    raise ConfigError(f'model.vision.position={v.position!r}, pool={v.pool!r}: positions are '
                      f'one of {vision.POSITIONS}, pooling one of {vision.POOLED}')
  if v.channels not in (1, 3) or d.image_channels != v.channels:
    raise ConfigError(f'model.vision.channels={v.channels}, data.image_channels='
                      f'{d.image_channels}: images are read grey (1) or RGB (3), as the tower '
                      'takes them; set both to one of those')
  if min(v.image_size, v.patch_size, d.image_size) <= 0:
    raise ConfigError(f'model.vision.image_size={v.image_size}, patch_size={v.patch_size} and '
                      f'data.image_size={d.image_size} must be positive')
  for size, field in ((v.image_size, 'model.vision.image_size'), (d.image_size,
                                                                   'data.image_size')):
    if size < v.patch_size:  # past the last whole patch, pixels are dropped (the tower)
      raise ConfigError(f'{field}={size} is smaller than one patch of model.vision.'
                        f'patch_size={v.patch_size}; use a multiple of the patch')
  if d.seq_len != tokens(m, d.image_size):
    raise ConfigError(f'data.seq_len={d.seq_len}: a {d.image_size} x {d.image_size} image '
                      f'is {tokens(m, d.image_size)} tokens for this tower (patches of '
                      f'{v.patch_size}{", + the class token" if v.pool == "token" else ""}); '
                      f'set data.seq_len={tokens(m, d.image_size)}')


def smoke(c):
  """The smoke variant's images (zoo/presets.py: smoke): 16 x 16 in patches of 4, the
  digits (zoo/data/digits.py) where no task is given, so every vision config trains
  offline."""
  v, d = c.model.vision, c.data
  v.image_size, v.patch_size = 16, 4
  d.seq_len = tokens(c.model, 16)
  if not d.task.path:
    d.task.path, d.eval_fraction = config_lib.DIGITS, 0.25


def example_batch(m, batch_size, seq_len):
  """Zero pixels at the resolution the tower's table is made for; for init and tracing."""
  del seq_len
  v = m.vision
  return {'pixels': jnp.zeros((batch_size, v.image_size, v.image_size, v.channels),
                              jnp.float32)}


def batch_spec(data_config, batch_size):
  """An image, a real-row marker and a label per row."""
  size = data_config.image_size
  return {'pixels': ((batch_size, size, size, data_config.image_channels),
                     np.dtype(np.float32)),
          'segment_ids': ((batch_size, 1), np.dtype(np.int32)),
          'labels': ((batch_size,), tasks.label_dtype('classification'))}


def counts(batch):
  """Rows and real rows (a label head's normalisers)."""
  return tasks.headed_counts(batch)


def loss(model, config, variables, batch, rng=None, whole=None, step=None):
  """The label head's cross-entropy over the real rows (zoo/families/tasks.py)."""
  del step
  return tasks.label_loss(model, config, variables, batch, rng, whole or counts(batch))


def task_example(kind, example, tokenizer, data_config):
  """An image example (pixels and label: zoo/data/task.py) as a model row."""
  del kind, tokenizer, data_config
  return {'pixels': example['pixels'], 'segment_ids': np.ones(1, np.int32),
          'labels': np.asarray(example['label'], np.int32)}


def kv_cache_layers(m):
  del m
  return 0  # nothing is decoded


def hf_model_type(m):
  del m
  return 'vit'
