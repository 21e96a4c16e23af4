"""Gemma 2 and Gemma 3 (text) checkpoints <-> zoo: config.json fields and tensor rules.

Gemma 2: local and global layers alternating (pattern 'LG'), logits soft-capped in
attention (50) and at the output (30), a norm before and after each sublayer, embeddings x
sqrt(d_model), queries scaled by query_pre_attn_scalar^-0.5, GeGLU. Gemma 3 adds QK-norm,
drops the soft-capping, has five local layers to one global ('LLLLLG') and a RoPE base per
kind (local 10k, global 1M, the global one scaled linearly on the larger sizes). Gemma's
RMSNorm multiplies by (1 + weight): the zoo's scale is that sum, so a norm converts by
adding (or taking off) 1.

A Gemma3ForConditionalGeneration checkpoint (the 4B-27B releases) converts as its text
model: config.json's text_config, the tensors under model.language_model; the vision tower
and projector are left out.
"""

import dataclasses

from zoo import config as config_lib
from zoo.convert import hf_rules
from zoo.convert.hf_rules import ConvertError
from zoo.models import dims

KINDS = {'sliding_attention': 'L', 'full_attention': 'G'}
VISION = ('model.vision_tower.', 'model.multi_modal_projector.', 'vision_tower.',
          'multi_modal_projector.')


def text_config(hf):
  """A Gemma3ForConditionalGeneration's config.json -> its text model's (else `hf`)."""
  return hf_rules.text_config(hf, 'gemma3', 'gemma3_text', tie_default=True)


def text_tensors(tensors):
  """The language model's tensors of a Gemma3ForConditionalGeneration, named as
  Gemma3ForCausalLM names them (vision tensors left out)."""
  return hf_rules.text_tensors(tensors, VISION, TEXT_PREFIXES)


# transformers 5 writes language_model.model.*; the hub's files and the bare model's keys
# (with the 'model.' load adds) other forms of it
TEXT_PREFIXES = (('model.language_model.model.', 'model.'),
                 ('language_model.model.', 'model.'),
                 ('model.language_model.lm_head.', 'lm_head.'),
                 ('language_model.lm_head.', 'lm_head.'),
                 ('model.language_model.', 'model.'))


def pattern(layer_types):
  """transformers' layer_types -> the shortest pattern they repeat ('LG', 'LLLLLG')."""
  return hf_rules.shortest_repeat(''.join(KINDS[t] for t in layer_types))


def config(hf, names):
  """config.json of gemma2 / gemma3_text (or gemma3's text model) -> zoo config."""
  hf = text_config(hf)
  kind = hf['model_type']
  if hf.get('hidden_activation', 'gelu_pytorch_tanh') != 'gelu_pytorch_tanh':
    raise ConvertError(f"{kind} hidden_activation={hf['hidden_activation']!r}: the zoo builds "
                       "Gemma's GeGLU ('gelu_pytorch_tanh') only")
  if hf.get('attention_bias') or hf.get('use_bidirectional_attention'):
    raise ConvertError(f'{kind} attention_bias / use_bidirectional_attention is not built')
  c = config_lib.base()
  m = c.model
  m.vocab_size, m.d_model, m.num_layers = (hf['vocab_size'], hf['hidden_size'],
                                           hf['num_hidden_layers'])
  m.num_heads, m.num_kv_heads = hf['num_attention_heads'], hf['num_key_value_heads']
  m.head_dim, m.mlp_dim = hf['head_dim'], hf['intermediate_size']
  m.activation, m.norm, m.norm_eps = 'geglu', 'rmsnorm', hf.get('rms_norm_eps', 1e-6)
  m.sandwich_norm, m.embed_scale, m.qk_norm = True, True, kind != 'gemma2'
  m.tie_embeddings = hf.get('tie_word_embeddings', True) or 'lm_head.weight' not in names
  m.max_length = hf.get('max_position_embeddings', 8192)
  a = m.attention
  a.query_scale = float(hf.get('query_pre_attn_scalar') or dims.head_dim(m))
  a.softcap = float(hf.get('attn_logit_softcapping') or 0.0)
  m.final_softcap = float(hf.get('final_logit_softcapping') or 0.0)
  a.pattern = pattern(hf['layer_types']) if hf.get('layer_types') else _hub_pattern(hf)
  a.window = hf['sliding_window'] if 'L' in a.pattern else 0
  _rope(hf, m)
  c.data.seq_len = min(c.data.seq_len, m.max_length)
  return c


def _hub_pattern(hf):
  """The hub's config.json without layer_types: Gemma 2 alternates from a local layer,
  Gemma 3 has sliding_window_pattern - 1 local layers to one global."""
  if hf['model_type'] == 'gemma2':
    return 'LG'
  return 'L' * (hf.get('sliding_window_pattern', 6) - 1) + 'G'


def _rope(hf, m):
  """rope_parameters: one dict (Gemma 2), or one per layer kind (Gemma 3); or the hub's
  rope_theta, rope_scaling and (Gemma 3) rope_local_base_freq."""
  params = hf.get('rope_parameters') or {'rope_theta': hf.get('rope_theta', 10_000.0),
                                         **(hf.get('rope_scaling') or {})}
  if 'rope_local_base_freq' in hf and 'full_attention' not in params:
    params = {'full_attention': params,
              'sliding_attention': {'rope_theta': hf['rope_local_base_freq']}}
  if 'full_attention' in params:
    local = params.get('sliding_attention') or {}
    if local.get('rope_type', 'default') != 'default':
      raise ConvertError(f"{hf['model_type']} local layers' rope_type "
                         f"{local['rope_type']!r} is not built (plain RoPE is)")
    m.rope_local_theta = float(local.get('rope_theta', hf.get('rope_local_base_freq', 1e4)))
    params = params['full_attention']
  m.rope_theta = float(params.get('rope_theta', 10_000.0))
  hf_rules.rope_scaling_from_hf(params, hf, m)


def rules(m):
  """The zoo leaves of a patterned stack (layers/block_j for pattern letter j, each stacked
  over the repeats; layers_tail_t for the layers after the last whole repeat)."""
  out = [hf_rules.rule('token_embed/embedding', 'model.embed_tokens.weight'),
         *_stack(m, m.num_layers, '', 'model')]
  if not m.tie_embeddings:
    out += hf_rules.dense('logits', 'lm_head')
  return out


def _stack(m, num_layers, zoo, hf, cross=False):
  """A patterned stack's layers and final norm: zoo prefix `zoo` ('' or 'encoder/'), the HF
  one `hf` ('model', 'model.encoder'); cross: T5Gemma's decoder (its own norm names)."""
  period = len(m.attention.pattern)
  repeats = num_layers // period
  names = T5GEMMA_NORMS if hf != 'model' else GEMMA_NORMS
  out = norm(f'{zoo}final_norm', f'{hf}.norm')
  for j in range(period):
    out += _layer(m, f'{zoo}layers/block_{j}', f'{hf}.layers.{{i}}',
                  tuple(r * period + j for r in range(repeats)), names, cross)
  for t, i in enumerate(range(repeats * period, num_layers)):
    out += _layer(m, f'{zoo}layers_tail_{t}', f'{hf}.layers.{i}', (), names, cross)
  return out


# the HF names of (attention_norm, post_attention_norm, mlp_norm, post_mlp_norm)
GEMMA_NORMS = ('input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm',
               'post_feedforward_layernorm')
T5GEMMA_NORMS = ('pre_self_attn_layernorm', 'post_self_attn_layernorm',
                 'pre_feedforward_layernorm', 'post_feedforward_layernorm')
PROJECTIONS = ('q_proj', 'k_proj', 'v_proj', 'o_proj')


def _layer(m, zoo, hf, layers, norms=GEMMA_NORMS, cross=False):
  out = [*hf_rules.attention(f'{zoo}/attention', f'{hf}.self_attn', m, PROJECTIONS),
         *[r for name, hf_name in zip(
             ('attention_norm', 'post_attention_norm', 'mlp_norm', 'post_mlp_norm'), norms)
           for r in norm(f'{zoo}/{name}', f'{hf}.{hf_name}')],
         *hf_rules.dense(f'{zoo}/mlp/wi_0', f'{hf}.mlp.gate_proj'),
         *hf_rules.dense(f'{zoo}/mlp/wi_1', f'{hf}.mlp.up_proj'),
         *hf_rules.dense(f'{zoo}/mlp/wo', f'{hf}.mlp.down_proj')]
  if cross:
    out += [*hf_rules.attention(f'{zoo}/cross_attention', f'{hf}.cross_attn', m, PROJECTIONS),
            *norm(f'{zoo}/cross_attention_norm', f'{hf}.pre_cross_attn_layernorm'),
            *norm(f'{zoo}/post_cross_attention_norm', f'{hf}.post_cross_attn_layernorm')]
  if m.qk_norm:
    out += [*norm(f'{zoo}/attention/query_norm', f'{hf}.self_attn.q_norm'),
            *norm(f'{zoo}/attention/key_norm', f'{hf}.self_attn.k_norm')]
  return [dataclasses.replace(r, layers=layers) for r in out]


def norm(zoo, hf):
  """Gemma's RMSNorm weight w multiplies by (1 + w): the zoo's scale is 1 + w."""
  return [hf_rules.Rule(f'{zoo}/scale', f'{hf}.weight', lambda w: w + 1, lambda w: w - 1)]


def hf_config(config):
  """zoo config -> config.json of Gemma2ForCausalLM or Gemma3ForCausalLM."""
  return _module(config.model, 'gemma3_text' if config.model.qk_norm else 'gemma2',
                 config.model.num_layers)


def _module(m, kind, num_layers):
  """One Gemma stack's config.json fields."""
  layer_types = [{'L': 'sliding_attention', 'G': 'full_attention'}[
      m.attention.pattern[i % len(m.attention.pattern)]] for i in range(num_layers)]
  hf = {'model_type': kind, 'vocab_size': m.vocab_size, 'hidden_size': m.d_model,
        'num_hidden_layers': num_layers, 'num_attention_heads': m.num_heads,
        'num_key_value_heads': dims.kv_heads(m), 'head_dim': dims.head_dim(m),
        'intermediate_size': m.mlp_dim, 'hidden_activation': 'gelu_pytorch_tanh',
        'rms_norm_eps': m.norm_eps, 'max_position_embeddings': m.max_length,
        'query_pre_attn_scalar': int(m.attention.query_scale or dims.head_dim(m)),
        'sliding_window': m.attention.window or None, 'layer_types': layer_types,
        'attn_logit_softcapping': m.attention.softcap or None,
        'final_logit_softcapping': m.final_softcap or None,
        'tie_word_embeddings': m.tie_embeddings}
  full = hf_rules.rope_parameters_to_hf(m)
  if kind != 'gemma3_text':
    hf['rope_parameters'] = full
  else:
    hf['rope_parameters'] = {'full_attention': full, 'sliding_attention': {
        'rope_type': 'default', 'rope_theta': m.rope_local_theta or m.rope_theta}}
  return hf


# ------------------------------------------------------------------------------ T5Gemma
# T5GemmaForConditionalGeneration: an encoder and a decoder config (T5GemmaModuleConfig,
# Gemma 2's fields) under config.json's 'encoder' and 'decoder'; tensors model.encoder.*,
# model.decoder.* (each with its embed_tokens) and lm_head.out_proj, tied to the decoder's
# table. The zoo's stacks share their shapes: the balanced sizes (2b-2b, 9b-9b).

STACK_FIELDS = ('vocab_size', 'hidden_size', 'intermediate_size', 'num_attention_heads',
                'num_key_value_heads', 'head_dim', 'hidden_activation', 'rms_norm_eps',
                'query_pre_attn_scalar', 'sliding_window', 'attn_logit_softcapping',
                'rope_parameters', 'rope_theta', 'attention_bias')
T5GEMMA_HEAD = 'lm_head.out_proj'


def t5gemma_config(hf, names):
  """T5Gemma's config.json -> zoo config (encoder_decoder)."""
  enc, dec = dict(hf['encoder']), dict(hf['decoder'])
  for key in STACK_FIELDS:
    if enc.get(key) != dec.get(key):
      raise ConvertError(f't5gemma encoder.{key}={enc.get(key)!r} differs from decoder.{key}='
                         f'{dec.get(key)!r}: the zoo\'s two stacks share their shapes (the '
                         'balanced sizes, 2b-2b and 9b-9b)')
  if enc.get('layer_types') and pattern(enc['layer_types']) != pattern(dec['layer_types']):
    raise ConvertError('t5gemma encoder.layer_types and decoder.layer_types repeat different '
                       'patterns; the zoo gives both stacks model.attention.pattern')
  tied = hf.get('tie_word_embeddings', True) or f'{T5GEMMA_HEAD}.weight' not in names
  c = config({**enc, 'model_type': 'gemma2', 'tie_word_embeddings': tied,
              'final_logit_softcapping': dec.get('final_logit_softcapping')},
             set() if tied else {'lm_head.weight'})
  m, d = c.model, c.data
  m.family, m.num_layers, m.separate_encoder_embed = 'encoder_decoder', 0, True
  m.num_encoder_layers, m.num_decoder_layers = (enc['num_hidden_layers'],
                                                dec['num_hidden_layers'])
  m.dropout_rate = hf.get('dropout_rate', 0.0)
  # span corruption's sentinels at the top ids, as presets.t5gemma (tasks do not read them)
  d.objective, d.seq_len, d.target_seq_len, d.reserved_ids = 'span_corruption', 512, 114, 100
  return c


def t5gemma_rules(m):
  out = [hf_rules.rule('token_embed/embedding', 'model.decoder.embed_tokens.weight'),
         hf_rules.rule('encoder_embed/embedding', 'model.encoder.embed_tokens.weight'),
         *_stack(m, m.num_encoder_layers, 'encoder/', 'model.encoder'),
         *_stack(m, m.num_decoder_layers, 'decoder/', 'model.decoder', cross=True)]
  if not m.tie_embeddings:
    out += hf_rules.dense('logits', T5GEMMA_HEAD)
  return out


def t5gemma_hf_config(config):
  """zoo config -> config.json of T5GemmaForConditionalGeneration."""
  m = config.model
  stack = lambda layers: {**_module(m, 't5gemma_module', layers),
                          'tie_word_embeddings': m.tie_embeddings}
  decoder = {**stack(m.num_decoder_layers), 'is_decoder': True,
             'cross_attention_hidden_size': m.d_model}
  # config.json's two module configs, keyword-built (their keys are not zoo families)
  return dict(model_type='t5gemma', encoder=stack(m.num_encoder_layers), decoder=decoder,
              is_encoder_decoder=True, vocab_size=m.vocab_size,
              tie_word_embeddings=m.tie_embeddings, dropout_rate=m.dropout_rate,
              attention_dropout=0.0, pad_token_id=0, eos_token_id=1, bos_token_id=2)
