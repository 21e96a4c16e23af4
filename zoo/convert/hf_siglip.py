"""SigLIP checkpoints (SiglipModel) <-> the zoo's image_text family: config.json fields and
tensor rules.

SiglipModel holds `vision_model` (a patch convolution, a learned position table without a
class token, pre-LayerNorm blocks, `post_layernorm`, and the attention-pooling `head` whose
torch MultiheadAttention fuses q, k and v as `in_proj_weight` [3D, D]), `text_model` (token
and position tables, the same blocks, `final_layer_norm`, a linear `head` on the last
position) and the scalars `logit_scale` (the log temperature) and `logit_bias`. The zoo's
towers share one shape, so the two configs must agree on it; a field either omits takes
transformers' default (the hub's configs name only what differs from them).

Glossary: D d_model, C channels.
"""

import dataclasses

import numpy as np

from zoo import config as config_lib
from zoo import presets
from zoo.convert.hf_rules import ConvertError
from zoo.convert.hf_rules import attention
from zoo.convert.hf_rules import dense
from zoo.convert.hf_rules import norm
from zoo.convert.hf_rules import rule
from zoo.models import dims

# transformers' SiglipTextConfig and SiglipVisionConfig defaults (google/siglip-base-patch16-224)
SHARED = {'hidden_size': 768, 'intermediate_size': 3072, 'num_hidden_layers': 12,
          'num_attention_heads': 12, 'layer_norm_eps': 1e-6, 'hidden_act': 'gelu_pytorch_tanh'}
TEXT = {'vocab_size': 32000, 'max_position_embeddings': 64, 'projection_size': None}
VISION = {'num_channels': 3, 'image_size': 224, 'patch_size': 16, 'vision_use_head': True}
HEAD = 'vision_model.head.attention.'  # torch's MultiheadAttention: q, k, v fused


def _towers(hf):
  """config.json -> (text, vision) with transformers' defaults for what they omit."""
  text = {**SHARED, **TEXT, **(hf.get('text_config') or {})}
  vision = {**SHARED, **VISION, **(hf.get('vision_config') or {})}
  for field in SHARED:
    if text[field] != vision[field]:
      raise ConvertError(f'siglip text_config.{field}={text[field]!r} but vision_config.'
                         f'{field}={vision[field]!r}: the zoo builds both towers of one shape')
  if text['hidden_act'] != 'gelu_pytorch_tanh':
    raise ConvertError(f"siglip hidden_act={text['hidden_act']!r}: the zoo builds SigLIP's "
                       "towers with 'gelu_pytorch_tanh' (gelu_tanh) only")
  if (text['projection_size'] or text['hidden_size']) != text['hidden_size']:
    raise ConvertError(f"siglip text_config.projection_size={text['projection_size']}: the "
                       f"zoo's text head keeps hidden_size={text['hidden_size']}")
  if not vision['vision_use_head']:
    raise ConvertError('siglip vision_config.vision_use_head=false: the zoo pools the vision '
                       'tower by attention (the released models) only')
  return text, vision


def config(hf, names):
  """config.json of siglip -> zoo config (float32, as the checkpoint)."""
  del names
  text, vision = _towers(hf)
  c = config_lib.base()
  m = c.model
  presets.siglip(c, image_size=vision['image_size'], patch_size=vision['patch_size'])
  m.d_model, m.mlp_dim = text['hidden_size'], text['intermediate_size']
  m.num_layers, m.num_heads = text['num_hidden_layers'], text['num_attention_heads']
  m.norm_eps, m.vocab_size = text['layer_norm_eps'], text['vocab_size']
  m.max_length = text['max_position_embeddings']
  m.vision.channels = vision['num_channels']
  m.dtype = 'float32'
  return c


def _tower(zoo, hf, m):
  """One tower's stacked blocks (m.num_layers of them: a decoder's tower has its own)."""
  layer = f'{hf}.encoder.layers.{{i}}'
  blocks = tuple(range(m.num_layers))
  rules = [*norm(f'{zoo}/layers/attention_norm', f'{layer}.layer_norm1', bias=True),
           *attention(f'{zoo}/layers/attention', f'{layer}.self_attn', m,
                      ('q_proj', 'k_proj', 'v_proj', 'out_proj'), bias=True),
           *norm(f'{zoo}/layers/mlp_norm', f'{layer}.layer_norm2', bias=True),
           *dense(f'{zoo}/layers/mlp/wi', f'{layer}.mlp.fc1', bias=True),
           *dense(f'{zoo}/layers/mlp/wo', f'{layer}.mlp.fc2', bias=True)]
  return [dataclasses.replace(r, layers=blocks) for r in rules]


def _patch_kernel(m):
  """Conv2d weight [D, C, patch, patch] <-> the zoo's [patch x patch x C, D] (a patch's
  pixels row by row, channels innermost)."""
  p, C, D = m.vision.patch_size, m.vision.channels, m.d_model
  return (lambda w: w.transpose(2, 3, 1, 0).reshape(p * p * C, D),
          lambda w: w.reshape(p, p, C, D).transpose(3, 2, 0, 1))


def tower_rules(zoo, hf, m):
  """A SiglipVisionModel's patches, positions, blocks and post_layernorm (no head) under
  HF prefix `hf`, as the zoo's vision tower under `zoo`; m: the tower's model config."""
  return [rule(f'{zoo}/patch_embed/kernel', f'{hf}.embeddings.patch_embedding.weight',
               _patch_kernel(m)),
          rule(f'{zoo}/patch_embed/bias', f'{hf}.embeddings.patch_embedding.bias'),
          rule(f'{zoo}/position_embed', f'{hf}.embeddings.position_embedding.weight'),
          *_tower(zoo, hf, m),
          *norm(f'{zoo}/final_norm', f'{hf}.post_layernorm', bias=True)]


def rules(m):
  scalar = (lambda w: w.reshape(()), lambda w: w.reshape(1))
  v, t = 'vision_model', 'text_model'
  return [*tower_rules('vision', v, m),
          rule('vision/pool/probe', f'{v}.head.probe'),
          *attention('vision/pool/attention', f'{v}.head.attention', m,
                     ('q', 'k', 'v', 'out_proj'), bias=True),
          *norm('vision/pool/norm', f'{v}.head.layernorm', bias=True),
          *dense('vision/pool/mlp/wi', f'{v}.head.mlp.fc1', bias=True),
          *dense('vision/pool/mlp/wo', f'{v}.head.mlp.fc2', bias=True),
          rule('text/token_embed/embedding', f'{t}.embeddings.token_embedding.weight'),
          rule('text/embeddings/position_embed/embedding',
               f'{t}.embeddings.position_embedding.weight'),
          *_tower('text', t, m),
          *norm('text/final_norm', f'{t}.final_layer_norm', bias=True),
          *dense('text/head', f'{t}.head', bias=True),
          rule('log_temperature', 'logit_scale', scalar),
          rule('bias', 'logit_bias', scalar)]


def to_rules(tensors, m):
  """The pooling head's fused in_proj [3D, D] (and bias) -> its q, k, v tensors."""
  del m
  out = dict(tensors)
  for kind in ('weight', 'bias'):
    fused = out.pop(f'{HEAD}in_proj_{kind}', None)
    if fused is not None:
      for part, piece in zip('qkv', np.split(fused, 3, axis=0)):
        out[f'{HEAD}{part}.{kind}'] = piece
  return out


def from_rules(tensors, m):
  del m
  out = dict(tensors)
  for kind in ('weight', 'bias'):
    out[f'{HEAD}in_proj_{kind}'] = np.concatenate(
        [out.pop(f'{HEAD}{part}.{kind}') for part in 'qkv'], axis=0)
  return out


def check_exportable(m):
  """What SiglipModel cannot hold, as one line naming the field."""
  v = m.vision
  built = {'model.vision.pool': (v.pool, 'map'), 'model.vision.position': (v.position, 'learned'),
           'model.activation': (m.activation, 'gelu_tanh'), 'model.norm': (m.norm, 'layernorm'),
           'model.norm_position': (m.norm_position, 'pre'), 'model.use_bias': (m.use_bias, True),
           'model.num_kv_heads': (dims.kv_heads(m), m.num_heads),
           'model.moe.num_experts': (m.moe.num_experts, 0),
           'model.head_dim': (dims.head_dim(m) * m.num_heads, m.d_model)}
  for field, (value, want) in built.items():
    if value != want:
      raise ConvertError(f'save: {field}={value!r} has no place in SiglipModel, which is built '
                         f'with {want!r}')


def hf_config(config):
  """zoo config -> SiglipModel's config.json."""
  m = config.model
  check_exportable(m)
  shared = {'hidden_size': m.d_model, 'intermediate_size': m.mlp_dim,
            'num_hidden_layers': m.num_layers, 'num_attention_heads': m.num_heads,
            'layer_norm_eps': m.norm_eps, 'hidden_act': 'gelu_pytorch_tanh',
            'attention_dropout': 0.0}
  return {'model_type': 'siglip', 'architectures': ['SiglipModel'],
          'text_config': {**shared, 'model_type': 'siglip_text_model',
                          'vocab_size': m.vocab_size, 'projection_size': m.d_model,
                          'max_position_embeddings': m.max_length},
          'vision_config': {**shared, 'model_type': 'siglip_vision_model',
                            'num_channels': m.vision.channels,
                            'image_size': m.vision.image_size,
                            'patch_size': m.vision.patch_size, 'vision_use_head': True}}
