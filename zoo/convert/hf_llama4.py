"""Llama 4 checkpoints (Llama4ForCausalLM, and the language model of a
Llama4ForConditionalGeneration) <-> zoo: config.json fields and tensor rules.

Llama 4's text model: chunked attention with RoPE on the layers `no_rope_layers` marks 1
(`layer_types` 'chunked_attention'), global attention without RoPE on the others (NoPE,
with temperature tuning when `attn_temperature_tuning`), the zoo's pattern letters 'C' and
'N' ('G' for a RoPE layer without chunks); the weightless QK norm (`use_qk_norm`) on the
RoPE layers; experts on the layers `moe_layers` names (every `interleave_moe_layer_step`-th,
the zoo's moe.every), the others dense of width `intermediate_size_mlp`. An MoE layer's
`feed_forward` holds a router (top-k of the sigmoid of its logits, the gate scaling the
token going in), the experts fused as `experts.gate_up_proj` [E, D, 2F] (gate the first
half) and `experts.down_proj` [E, F, D], and a `shared_expert` MLP of width F.

Llama 4 rotates interleaved pairs of head dims (complex multiplication); the zoo rotates
halves, so q_proj's and k_proj's rows are reordered per head (0, 2, 4, ..., 1, 3, 5, ...)
on import and back on export. The same order on q and k changes no logit, so a NoPE layer
is reordered too. A ForConditionalGeneration checkpoint converts as its text model:
config.json's `text_config`, the tensors under `language_model.`; the vision model and
projector are left out.
"""

import dataclasses

import numpy as np

from zoo import config as config_lib
from zoo import presets
from zoo.convert import hf_rules
from zoo.convert.hf_rules import ConvertError
from zoo.models import dims
from zoo.models import transformer

VISION = ('vision_model.', 'multi_modal_projector.', 'model.vision_model.',
          'model.multi_modal_projector.')
# the hub's names, and the same with the 'model.' a bare model's files get on load
TEXT_PREFIXES = (('model.language_model.model.', 'model.'),
                 ('model.language_model.lm_head.', 'lm_head.'),
                 ('language_model.model.', 'model.'), ('language_model.lm_head.', 'lm_head.'),
                 ('model.language_model.', 'model.'))


def text_config(hf):
  """A Llama4ForConditionalGeneration's config.json -> its text model's (else `hf`)."""
  return hf_rules.text_config(hf, 'llama4', 'llama4_text', tie_default=False)


def config(hf, names):
  """config.json of llama4_text (or llama4) -> zoo config."""
  hf = text_config(hf)
  if hf.get('hidden_act', 'silu') != 'silu' or hf.get('attention_bias'):
    raise ConvertError('llama4 hidden_act other than silu, or attention_bias=true, is not '
                       "built (the released models' are silu, no biases)")
  n = hf['num_hidden_layers']
  interval = hf.get('no_rope_layer_interval', 4)
  rope_layers = hf.get('no_rope_layers') or [int((i + 1) % interval != 0) for i in range(n)]
  chunk = hf.get('attention_chunk_size') or 0
  types = hf.get('layer_types') or ['chunked_attention' if r and chunk else 'full_attention'
                                    for r in rope_layers]
  letters = ''.join('N' if not r else 'C' if t == 'chunked_attention' else 'G'
                    for r, t in zip(rope_layers, types))
  step = hf.get('interleave_moe_layer_step', 1)
  moe_layers = hf.get('moe_layers')
  if moe_layers is None:
    moe_layers = list(range(step - 1, n, step))
  if list(moe_layers) != list(range(step - 1, n, step)):
    raise ConvertError(f'llama4 moe_layers={moe_layers}: the zoo builds experts in every '
                       f'interleave_moe_layer_step-th layer ({list(range(step - 1, n, step))})')
  c = config_lib.base()
  m = c.model
  m.num_layers = n
  presets.llama4(c, max_length=hf.get('max_position_embeddings', 131_072))
  m.vocab_size, m.d_model = hf['vocab_size'], hf['hidden_size']
  m.num_heads, m.num_kv_heads = hf['num_attention_heads'], hf['num_key_value_heads']
  m.head_dim = hf.get('head_dim') or hf['hidden_size'] // hf['num_attention_heads']
  m.mlp_dim = hf.get('intermediate_size_mlp') or hf['intermediate_size']
  m.norm_eps = hf.get('rms_norm_eps', 1e-5)
  m.tie_embeddings = bool(hf.get('tie_word_embeddings')) or not any(
      name.endswith('lm_head.weight') for name in names)
  a = m.attention
  pattern = hf_rules.shortest_repeat(letters)
  a.pattern = '' if pattern == 'G' else pattern
  a.chunk = chunk if 'C' in letters else 0
  tuning = bool(hf.get('attn_temperature_tuning', True)) and 'N' in letters
  a.nope_scale = float(hf.get('attn_scale', 0.1)) if tuning else 0.0
  a.nope_floor = int(hf.get('floor_scale', 8192))
  a.qk_l2_norm = bool(hf.get('use_qk_norm', False))
  hf_rules.rope_from_hf(hf, m, default_theta=500_000.0)
  o = m.moe
  o.num_experts, o.top_k = hf['num_local_experts'], hf.get('num_experts_per_tok', 1)
  o.expert_mlp_dim, o.every = hf['intermediate_size'], step
  o.balance_loss = float(hf.get('router_aux_loss_coef', 0.001))
  c.data.seq_len = min(c.data.seq_len, m.max_length)
  if a.chunk and c.data.seq_len % a.chunk and a.chunk % c.data.seq_len:
    c.data.seq_len = min(a.chunk, m.max_length)
  return c


def _rope_order(K):
  """Indices taking interleaved rotary dims to halves: 0, 2, 4, ..., 1, 3, 5, ..."""
  return np.concatenate([np.arange(0, K, 2), np.arange(1, K, 2)])


def rules(m):
  """The zoo leaves: a patterned stack (layers/block_j, layers_tail_t) or layers/block_0."""
  out = [hf_rules.rule('token_embed/embedding', 'model.embed_tokens.weight'),
         *hf_rules.norm('final_norm', 'model.norm')]
  period = len(m.attention.pattern) or m.moe.every
  repeats = m.num_layers // period
  for j in range(period):
    out += _layer(m, f'layers/block_{j}', 'model.layers.{i}',
                  tuple(r * period + j for r in range(repeats)), transformer.has_experts(m, j))
  for t, i in enumerate(range(repeats * period, m.num_layers)):
    out += _layer(m, f'layers_tail_{t}', f'model.layers.{i}', (),
                  transformer.has_experts(m, i))
  if not m.tie_embeddings:
    out += hf_rules.dense('logits', 'lm_head')
  return out


def _layer(m, zoo, hf, layers, experts):
  H, G, K, D = m.num_heads, dims.kv_heads(m), dims.head_dim(m), m.d_model
  order, back = _rope_order(K), np.argsort(_rope_order(K))
  rotated = lambda heads: (
      lambda w: w.reshape(heads, K, D)[:, order].transpose(2, 0, 1),
      lambda w: w.transpose(1, 2, 0)[:, back].reshape(heads * K, D))
  attn = f'{hf}.self_attn'
  out = [hf_rules.rule(f'{zoo}/attention/query/kernel', f'{attn}.q_proj.weight', rotated(H)),
         hf_rules.rule(f'{zoo}/attention/key/kernel', f'{attn}.k_proj.weight', rotated(G)),
         hf_rules.rule(f'{zoo}/attention/value/kernel', f'{attn}.v_proj.weight',
                       hf_rules.linear(G, K)),
         hf_rules.rule(f'{zoo}/attention/out/kernel', f'{attn}.o_proj.weight',
                       hf_rules.linear_in(H, K)),
         *hf_rules.norm(f'{zoo}/attention_norm', f'{hf}.input_layernorm'),
         *hf_rules.norm(f'{zoo}/mlp_norm', f'{hf}.post_attention_layernorm')]
  ff = f'{hf}.feed_forward'
  if experts:
    transpose = (lambda w: w.T, lambda w: w.T)
    out += [hf_rules.rule(f'{zoo}/moe/router', f'{ff}.router.weight', transpose),
            hf_rules.rule(f'{zoo}/moe/wi_0', f'{ff}.experts.gate_proj'),
            hf_rules.rule(f'{zoo}/moe/wi_1', f'{ff}.experts.up_proj'),
            hf_rules.rule(f'{zoo}/moe/wo', f'{ff}.experts.down_proj'),
            *hf_rules.dense(f'{zoo}/moe/shared/wi_0', f'{ff}.shared_expert.gate_proj'),
            *hf_rules.dense(f'{zoo}/moe/shared/wi_1', f'{ff}.shared_expert.up_proj'),
            *hf_rules.dense(f'{zoo}/moe/shared/wo', f'{ff}.shared_expert.down_proj')]
  else:
    out += [*hf_rules.dense(f'{zoo}/mlp/wi_0', f'{ff}.gate_proj'),
            *hf_rules.dense(f'{zoo}/mlp/wi_1', f'{ff}.up_proj'),
            *hf_rules.dense(f'{zoo}/mlp/wo', f'{ff}.down_proj')]
  return [dataclasses.replace(r, layers=layers) for r in out]


def to_rules(tensors, m):
  """The checkpoint's tensors -> one per rule: a ForConditionalGeneration's text model
  (vision left out), each fused gate_up_proj split into its gate (first half) and up."""
  out = hf_rules.text_tensors(tensors, VISION, TEXT_PREFIXES)
  for name in [n for n in out if n.endswith('.experts.gate_up_proj')]:
    prefix = name[:-len('gate_up_proj')]
    out[f'{prefix}gate_proj'], out[f'{prefix}up_proj'] = np.split(out.pop(name), 2, axis=-1)
  return out


def from_rules(tensors, m):
  """to_rules' inverse: gate and up joined into gate_up_proj (a Llama4ForCausalLM)."""
  out = dict(tensors)
  for name in [n for n in out if n.endswith('.experts.gate_proj')]:
    prefix = name[:-len('gate_proj')]
    out[f'{prefix}gate_up_proj'] = np.concatenate(
        [out.pop(name), out.pop(f'{prefix}up_proj')], axis=-1)
  return out


def hf_config(config):
  """zoo config -> config.json of Llama4ForCausalLM."""
  m = config.model
  a = m.attention
  pattern = a.pattern or ('C' if a.chunk else 'G')
  letters = [pattern[i % len(pattern)] for i in range(m.num_layers)]
  if set(letters) - set('CGN') or m.moe.num_shared_experts != 1 or not m.moe.gate_input:
    raise ConvertError(f'save: llama4 has chunked (C), global (G) and NoPE (N) layers and one '
                       f'shared expert beside input-gated ones; pattern={a.pattern!r}, '
                       f'num_shared_experts={m.moe.num_shared_experts}, gate_input='
                       f'{m.moe.gate_input} have no Llama 4 layout')
  return {'model_type': 'llama4_text', 'vocab_size': m.vocab_size, 'hidden_size': m.d_model,
          'intermediate_size': m.moe.expert_mlp_dim or m.mlp_dim,
          'intermediate_size_mlp': m.mlp_dim, 'num_hidden_layers': m.num_layers,
          'num_attention_heads': m.num_heads, 'num_key_value_heads': dims.kv_heads(m),
          'head_dim': dims.head_dim(m), 'num_local_experts': m.moe.num_experts,
          'num_experts_per_tok': m.moe.top_k, 'interleave_moe_layer_step': m.moe.every,
          'moe_layers': [i for i in range(m.num_layers) if transformer.has_experts(m, i)],
          'no_rope_layers': [int(x != 'N') for x in letters],
          'layer_types': ['chunked_attention' if x == 'C' else 'full_attention'
                          for x in letters],
          'attention_chunk_size': a.chunk or None, 'use_qk_norm': bool(a.qk_l2_norm),
          'attn_temperature_tuning': bool(a.nope_scale), 'attn_scale': a.nope_scale or 0.1,
          'floor_scale': a.nope_floor, 'rope_parameters': hf_rules.rope_parameters_to_hf(m),
          'max_position_embeddings': m.max_length, 'rms_norm_eps': m.norm_eps,
          'hidden_act': 'silu', 'attention_bias': False,
          'router_aux_loss_coef': m.moe.balance_loss, 'tie_word_embeddings': m.tie_embeddings}
