"""The image-text family (SigLIP, CLIP): a vision tower and a text tower trained so that an
image's embedding lies near its caption's (zoo/models/image_text.py), by SigLIP's sigmoid
loss round the ring of the mesh's batch axes or CLIP's softmax loss
(zoo/families/contrastive.py), on image-text pairs (data.task.kind 'image_text').

A row is one pair: the image's pixels [Y, X, C], the caption's ids [T] (its tokens and the
EOS, padded with the pad id to data.text_len = model.max_length, the text tower's table;
a longer caption is cut) and a real-row marker (segment_ids [1]: 0 pads an eval batch).
data.seq_len is the image's tokens, as for the vision family; FLOPs per token count the
text tower at data.text_len / data.seq_len of itself.

The eval rows add retrieval accuracy: the share of real images whose highest-scoring text
among the batch's real texts is their own caption (or one with the same ids: with the
digits' ten captions, zero-shot classification over the classes in the batch).

Glossary: B batch, T text length, D d_model.
"""

import jax.numpy as jnp
import numpy as np

from zoo.errors import ConfigError
from zoo.families import contrastive
from zoo.families import loss as loss_lib
from zoo.families import vision
from zoo.models import image_text

NAME = 'image_text'
OBJECTIVES = ('sigmoid_contrastive', 'softmax_contrastive')  # SigLIP's, CLIP's
LAYER_FIELDS = ('num_layers',)  # each tower's blocks
MODEL_INPUTS = ('pixels', 'inputs')
POSITIONS = ('learned',)  # the text tower's table; the image's: model.vision.position
BLOCKS = ('sequential', 'parallel')
SLIDING_WINDOW = TWO_SIDED_WINDOW = False
ATTENTION = 'two_towers'  # each tower bidirectional over its own tokens
LATENT_ATTENTION = PREDICTION_MODULES = SEPARATE_ENCODER_EMBED = False
CONTEXT_CHUNKS = 0
TASKS = ('image_text',)
PROMPT_JOINT = PENALTIES_COUNT_PROMPT = None
INPUT_SPECIALS = ('eos',)  # a caption as the text tower reads it: text EOS, padded
LABEL_SPECIALS = LABEL_TOKEN = None  # no label head
tokenize_prompts = start_generation = None  # it embeds; --mode=generate says so


def build(model_config, adapters):
  """-> the Linen module: batch -> {'image_embeds', 'text_embeds': [B, D],
  'log_temperature', 'bias'} (zoo/models/image_text.py)."""
  return image_text.ImageTextModel(model_config, adapters)


def check(config):
  """What the two towers' fields mean together (zoo/run/checks.py calls it)."""
  vision.check_images(config)
  d, t = config.data, config.train
  if not d.task.kind:
    raise ConfigError("model.family='image_text' trains on image-text pairs: set "
                      "data.task.kind='image_text' and data.task.path")
  if t.microbatches != 1:
    raise ConfigError(f'train.microbatches={t.microbatches}: a contrastive loss pairs every '
                      'row with every other row of the batch; set train.microbatches=1')


def smoke(c):
  """The smoke variant: the vision family's images and captions of 16 tokens."""
  vision.smoke(c)
  c.model.max_length = 16


def example_batch(m, batch_size, seq_len):
  """Zero pixels at the tower's resolution and a zero caption of model.max_length ids."""
  del seq_len
  return {**vision.example_batch(m, batch_size, 0),
          'inputs': jnp.zeros((batch_size, m.max_length), jnp.int32)}


def batch_spec(data_config, batch_size):
  """An image, a caption and a real-row marker per row."""
  size, int32 = data_config.image_size, np.dtype(np.int32)
  return {'pixels': ((batch_size, size, size, data_config.image_channels),
                     np.dtype(np.float32)),
          'inputs': ((batch_size, data_config.text_len), int32),
          'segment_ids': ((batch_size, 1), int32)}


def counts(batch):
  """Rows and real rows."""
  return {'rows': batch['inputs'].shape[0],
          'tokens': jnp.sum((batch['segment_ids'][:, 0] > 0).astype(jnp.float32))}


def retrieved(outputs, ids_BT, real_B):
  """Real images whose best-scoring real text has their own caption's ids."""
  scores_BB = outputs['image_embeds'] @ outputs['text_embeds'].T
  best_B = jnp.argmax(jnp.where(real_B[None, :] > 0, scores_BB, -jnp.inf), axis=1)
  same_B = jnp.all(ids_BT[best_B] == ids_BT, axis=1)
  return jnp.sum(same_B * real_B)


def loss(model, config, variables, batch, rng=None, whole=None, step=None):
  """The objective's contrastive loss over the batch's real pairs; the learned temperature
  and bias ride along in the metrics, retrieval accuracy in the eval sums."""
  del whole, step  # one microbatch (check)
  applied = loss_lib.apply(model, variables, batch, rng)
  outputs, state = applied.outputs, applied.state
  real_B = (batch['segment_ids'][:, 0] > 0).astype(jnp.float32)
  image_BD, text_BD = outputs['image_embeds'], outputs['text_embeds']
  t, b = outputs['log_temperature'], outputs['bias']
  if config.data.objective == 'sigmoid_contrastive':
    mean = contrastive.sigmoid_loss_on_mesh(image_BD, text_BD, t, b, real_B)
  else:
    mean = contrastive.softmax_loss(image_BD, text_BD, t, real_B)
  rows = jnp.sum(real_B)
  return loss_lib.Loss(mean, {'loss': mean, 'temperature': jnp.exp(t), 'bias': b}, state,
                       mean * rows, rows, eval_sums={
                           'retrieval_accuracy': retrieved(outputs, batch['inputs'], real_B)})


def task_example(kind, example, tokenizer, data_config):
  """An image-text example (pixels and the caption's ids: zoo/data/task.py) as a model row:
  the caption cut to leave room for the EOS, padded with the pad id."""
  del kind
  T = data_config.text_len
  ids = [*np.asarray(example['text'])[:T - 1], tokenizer.eos_id]
  return {'pixels': example['pixels'],
          'inputs': np.pad(np.asarray(ids, np.int32), (0, T - len(ids)),
                           constant_values=tokenizer.pad_id),
          'segment_ids': np.ones(1, np.int32)}


def kv_cache_layers(m):
  del m
  return 0  # nothing is decoded


def hf_model_type(m):
  del m
  return 'siglip'
