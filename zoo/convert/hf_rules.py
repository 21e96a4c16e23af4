"""The rules a Hugging Face checkpoint converts by: each zoo parameter (its layers stacked on
a leading axis, as the layer scan keeps them) <- the Hugging Face tensor of each layer (and
expert). zoo/convert/hf.py reads them one way (load) and the other (save)."""

import dataclasses
from typing import Callable

from zoo.config import ConfigError
from zoo.models import dims


class ConvertError(ConfigError):
  """The checkpoint cannot become zoo params (or back); the message names the tensor/field."""


@dataclasses.dataclass(frozen=True)
class Rule:
  """zoo leaf <- Hugging Face tensor(s). `hf` may hold {i} (layer) and {e} (expert): the zoo
  leaf stacks them as [layers, experts, ...], over all layers or those `layers` names (a
  layer pattern's stacks: Gemma's local and global layers). to_zoo / to_hf convert one
  tensor."""
  zoo: str
  hf: str
  to_zoo: Callable = lambda w: w
  to_hf: Callable = lambda w: w
  layers: tuple = ()


def linear(*out_shape):
  """torch Linear weight [out, in] <-> zoo kernel [in, *out_shape]."""
  return (lambda w: w.T.reshape(w.shape[1], *out_shape),
          lambda w: w.reshape(w.shape[0], -1).T)


def linear_in(*in_shape):
  """torch Linear weight [out, in] <-> zoo kernel [*in_shape, out] (attention output)."""
  return (lambda w: w.T.reshape(*in_shape, w.shape[0]),
          lambda w: w.reshape(-1, w.shape[-1]).T)


def reshape(*shape):
  return (lambda w: w.reshape(*shape), lambda w: w.reshape(-1))


def rule(zoo, hf, pair=None):
  return Rule(zoo, hf, *pair) if pair else Rule(zoo, hf)


def attention(zoo, hf, m, names, bias=False, conv1d=False):
  """q, k, v, out of one attention block. names: HF suffixes for q, k, v, out."""
  H, G, K, D = m.num_heads, dims.kv_heads(m), dims.head_dim(m), m.d_model
  rules = []
  for part, name, heads in (('query', names[0], H), ('key', names[1], G),
                            ('value', names[2], G)):
    kernel = ((lambda w, h=heads: w.reshape(D, h, K), lambda w: w.reshape(D, -1))
              if conv1d else linear(heads, K))  # GPT-2's Conv1D is [in, out] already
    rules.append(rule(f'{zoo}/{part}/kernel', f'{hf}.{name}.weight', kernel))
    if bias:
      rules.append(rule(f'{zoo}/{part}/bias', f'{hf}.{name}.bias', reshape(heads, K)))
  out = ((lambda w: w.reshape(H, K, D), lambda w: w.reshape(-1, D)) if conv1d
         else linear_in(H, K))
  rules.append(rule(f'{zoo}/out/kernel', f'{hf}.{names[3]}.weight', out))
  if bias:
    rules.append(rule(f'{zoo}/out/bias', f'{hf}.{names[3]}.bias'))
  return rules


def dense(zoo, hf, bias=False, conv1d=False):
  kernel = None if conv1d else (lambda w: w.T, lambda w: w.T)
  rules = [rule(f'{zoo}/kernel', f'{hf}.weight', kernel)]
  if bias:
    rules.append(rule(f'{zoo}/bias', f'{hf}.bias'))
  return rules


def norm(zoo, hf, bias=False, scale_name='weight'):
  rules = [rule(f'{zoo}/scale', f'{hf}.{scale_name}')]
  if bias:
    rules.append(rule(f'{zoo}/bias', f'{hf}.bias'))
  return rules


def count(rule, m, index):
  """How many layers / experts a rule's {i} / {e} run over."""
  if index == 'e':
    return m.moe.num_experts
  stack = rule.zoo.split('/', 1)[0]
  if stack in ('encoder', 'decoder'):
    return m.num_encoder_layers if stack == 'encoder' else m.num_decoder_layers
  return m.num_layers


def names(rule, m):
  """Nested lists of HF names ([layer][expert]) for the rule's leaf."""
  if '{i}' not in rule.hf:  # one layer: its experts, or the tensor
    return ([rule.hf.format(e=e) for e in range(m.moe.num_experts)] if '{e}' in rule.hf
            else rule.hf)
  layers = rule.layers or range(count(rule, m, 'i'))
  if '{e}' in rule.hf:
    return [[rule.hf.format(i=i, e=e) for e in range(m.moe.num_experts)] for i in layers]
  return [rule.hf.format(i=i) for i in layers]


def shortest_repeat(letters):
  """The shortest prefix `letters` repeats ('LG' of 'LGLGL', 'CCCN' of 'CCCNCCCNC')."""
  for period in range(1, len(letters) + 1):
    if all(letters[i] == letters[i % period] for i in range(len(letters))):
      return letters[:period]
  return letters


# ---------------------------------------------------------- multimodal checkpoints

def text_config(hf, multimodal_type, text_type, tie_default):
  """A multimodal checkpoint's config.json (model_type `multimodal_type`) -> its text
  model's (`text_config`, model_type `text_type`); any other config as it is."""
  if hf.get('model_type') != multimodal_type:
    return hf
  text = dict(hf.get('text_config') or {})
  text.setdefault('model_type', text_type)
  text.setdefault('tie_word_embeddings', hf.get('tie_word_embeddings', tie_default))
  return text


def text_tensors(tensors, vision, prefixes):
  """A multimodal checkpoint's language-model tensors, renamed by the first of `prefixes`
  ((prefix, replacement) pairs) each starts with; those starting with `vision` left out."""
  out = {}
  for name, w in tensors.items():
    if name.startswith(vision):
      continue
    for prefix, to in prefixes:
      if name.startswith(prefix):
        name = to + name[len(prefix):]
        break
    out[name] = w
  return out


# ------------------------------------------------------------------- rope scalings

def rope_from_hf(hf, m, default_theta):
  """config.json's RoPE base and scaling (in rope_parameters, or the hub's rope_theta and
  rope_scaling) -> model.rope_theta and model.rope_scaling."""
  rope = {**(hf.get('rope_parameters') or {}), **(hf.get('rope_scaling') or {})}
  m.rope_theta = float(rope.get('rope_theta', hf.get('rope_theta', default_theta)))
  rope_scaling_from_hf(rope, hf, m)


def rope_scaling_from_hf(params, hf, m):
  """transformers' rope parameters (rope_type and its fields) -> model.rope_scaling."""
  kind = params.get('rope_type', params.get('type')) or 'default'
  r = m.rope_scaling
  if kind == 'default':
    r.type = 'none'
    return
  if kind not in ('llama3', 'linear', 'dynamic', 'yarn'):
    raise ConvertError(f"{hf['model_type']} rope scaling {kind!r} is not built ('llama3', "
                       "'linear', 'dynamic' and 'yarn' are); the logits would differ at every "
                       'position')
  r.type, r.factor = kind, float(params['factor'])
  original = params.get('original_max_position_embeddings') or hf.get(
      'max_position_embeddings')
  if kind == 'dynamic':  # transformers grows the base past max_position_embeddings
    original = hf.get('max_position_embeddings')
  r.original_max_length = int(original or 0)
  if kind == 'llama3':
    r.low_freq_factor = params['low_freq_factor']
    r.high_freq_factor = params['high_freq_factor']
  if kind == 'yarn':
    r.beta_fast = float(params.get('beta_fast') or 32)
    r.beta_slow = float(params.get('beta_slow') or 1)
    r.attention_factor = float(params.get('attention_factor') or 0.0)
    r.mscale = float(params.get('mscale') or 0.0)
    r.mscale_all_dim = float(params.get('mscale_all_dim') or 0.0)
    r.truncate = bool(params.get('truncate', True))


def rope_parameters_to_hf(m):
  """model.rope_theta and model.rope_scaling -> transformers' rope_parameters."""
  return {'rope_type': 'default', 'rope_theta': m.rope_theta, **rope_scaling_to_hf(m)}


def rope_scaling_to_hf(m):
  """model.rope_scaling -> transformers' rope parameters ({} for plain RoPE)."""
  r = m.rope_scaling
  if r.type == 'none':
    return {}
  out = {'rope_type': r.type, 'factor': r.factor}
  if r.type in ('llama3', 'yarn'):
    out['original_max_position_embeddings'] = r.original_max_length
  if r.type == 'llama3':
    out.update(low_freq_factor=r.low_freq_factor, high_freq_factor=r.high_freq_factor)
  if r.type == 'yarn':
    out.update(beta_fast=r.beta_fast, beta_slow=r.beta_slow, truncate=r.truncate)
    for name in ('attention_factor', 'mscale', 'mscale_all_dim'):
      if r[name]:
        out[name] = r[name]
  return out
