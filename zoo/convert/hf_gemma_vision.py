"""Gemma 3's images (Gemma3ForConditionalGeneration) <-> the zoo's multimodal decoder
(zoo/models/multimodal.py): config.json's vision_config and mm_tokens_per_image, and the
tower's and projector's tensors beside the language model's (zoo/convert/hf_gemma.py).

The checkpoint's vision tower is a SiglipVisionModel read without its pooling head (Gemma 3
reads the patches' last states; a head its file may hold is left out, as transformers
leaves it unread); `multi_modal_projector.mm_soft_emb_norm` is a Gemma RMSNorm (the zoo's
scale is 1 + its weight) and `mm_input_projection_weight` [vision width, d_model] the
projection's kernel as it is. Files name the tower `vision_tower.vision_model.*` (the hub),
`vision_tower.*` (transformers 5) or either under `model.`; export writes transformers 5's
names.
"""

from zoo.convert import hf_gemma
from zoo.convert import hf_rules
from zoo.convert import hf_siglip
from zoo.convert.hf_rules import ConvertError
from zoo.models import multimodal

TOWER, PROJECTOR = 'vision_tower.', 'multi_modal_projector.'
# (prefix a file may use, what the rules name); the first match renames
VISION_PREFIXES = (('model.vision_tower.vision_model.', TOWER),
                   ('vision_tower.vision_model.', TOWER), ('model.vision_tower.', TOWER),
                   (TOWER, TOWER),
                   ('model.multi_modal_projector.', PROJECTOR), (PROJECTOR, PROJECTOR))
UNREAD = TOWER + 'head.'  # SigLIP's pooling head: Gemma 3 never reads it


def has_images(hf, names):
  """A Gemma3ForConditionalGeneration checkpoint that holds its vision tower."""
  return hf.get('model_type') == 'gemma3' and any('vision_tower.' in n for n in names)


def config(hf, names):
  """config.json of gemma3 -> zoo config: the text model, and the vision tower when the
  tensors hold it."""
  c = hf_gemma.config(hf, names)
  c.model.dtype = 'float32'  # as the checkpoint computes (bfloat16 on accelerators)
  if has_images(hf, names):
    vision_config(hf, c.model)
  return c


def vision_config(hf, m):
  """config.json's vision_config and mm_tokens_per_image -> model.vision, model.multimodal."""
  vision = {**hf_siglip.SHARED, **hf_siglip.VISION, **(hf.get('vision_config') or {})}
  if vision['hidden_act'] != 'gelu_pytorch_tanh':
    raise ConvertError(f"gemma3 vision_config.hidden_act={vision['hidden_act']!r}: the zoo "
                       "builds SigLIP's tower with 'gelu_pytorch_tanh' only")
  m.vision.update(image_size=vision['image_size'], patch_size=vision['patch_size'],
                  channels=vision['num_channels'], position='learned', pool='none')
  m.multimodal.update(
      tokens_per_image=hf.get('mm_tokens_per_image', 256),
      image_token_id=hf.get('image_token_index', hf.get('image_token_id', 262_144)),
      d_model=vision['hidden_size'], num_layers=vision['num_hidden_layers'],
      num_heads=vision['num_attention_heads'], mlp_dim=vision['intermediate_size'],
      norm_eps=vision['layer_norm_eps'])
  m.attention.kernel = 'xla'  # an image's tokens attend each other both ways


def rules(m):
  """The language model's rules, and the tower's and the projector's."""
  if not multimodal.enabled(m):
    return hf_gemma.rules(m)
  return [*hf_gemma.rules(m),
          *hf_siglip.tower_rules('vision/tower', TOWER[:-1], multimodal.tower_config(m)),
          *hf_gemma.norm('vision/projector_norm', f'{PROJECTOR}mm_soft_emb_norm'),
          hf_rules.rule('vision/projection/kernel', f'{PROJECTOR}mm_input_projection_weight')]


def to_rules(tensors, m):
  """A ForConditionalGeneration's tensors as the rules name them: the language model's as
  Gemma3ForCausalLM's, the tower's and projector's under TOWER and PROJECTOR."""
  vision, text = {}, {}
  for name, w in tensors.items():
    prefix = next(((p, to) for p, to in VISION_PREFIXES if name.startswith(p)), None)
    if prefix is None:
      text[name] = w
    elif not (prefix[1] + name[len(prefix[0]):]).startswith(UNREAD):
      vision[prefix[1] + name[len(prefix[0]):]] = w
  if multimodal.enabled(m):
    return {**hf_gemma.text_tensors(text), **vision}
  return hf_gemma.text_tensors(text)


def from_rules(tensors, m):
  """The rules' tensors -> transformers 5's names for Gemma3ForConditionalGeneration."""
  del m
  out = {}
  for name, w in tensors.items():
    if name.startswith(('model.', 'lm_head.')):
      name = 'language_model.' + name
    out[name] = w
  return out


def hf_config(config):
  """zoo config -> Gemma3ForConditionalGeneration's config.json."""
  m = config.model
  mm, v = m.multimodal, m.vision
  return {'model_type': 'gemma3', 'architectures': ['Gemma3ForConditionalGeneration'],
          'text_config': hf_gemma.hf_config(config),
          'vision_config': {'model_type': 'siglip_vision_model', 'hidden_size': mm.d_model,
                            'intermediate_size': mm.mlp_dim,
                            'num_hidden_layers': mm.num_layers,
                            'num_attention_heads': mm.num_heads,
                            'layer_norm_eps': mm.norm_eps, 'hidden_act': 'gelu_pytorch_tanh',
                            'num_channels': v.channels, 'image_size': v.image_size,
                            'patch_size': v.patch_size, 'vision_use_head': False},
          'mm_tokens_per_image': mm.tokens_per_image, 'image_token_index': mm.image_token_id,
          'tie_word_embeddings': m.tie_embeddings}
