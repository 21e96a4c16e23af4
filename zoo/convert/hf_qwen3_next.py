"""Qwen3-Next checkpoints (Qwen3NextForCausalLM) <-> zoo: config.json fields and tensor rules.

`layer_types` names each layer 'linear_attention' (the zoo's pattern letter 'D', Gated
DeltaNet) or 'full_attention' ('G'). A linear layer's `linear_attn` fuses its projections:
`in_proj_qkvz` [G (2K + 2 r J), D] holds, per key head, its query, key, then the r = H / G
value heads' values and output gates; `in_proj_ba` [G 2r, D] per key head the r write
strengths (b), then the r decays (a); `conv1d` [2 G K + H J, 1, W] the convolution of the
queries, keys and values in that order (each head-major). An attention layer's `q_proj`
[H 2K, D] holds per head its query, then its output gate. Every RMSNorm but the linear
layers' gated one multiplies by (1 + weight), as Gemma's: the zoo's scale is 1 + w. The
experts are stored one by one (`mlp.experts.E.{gate,up,down}_proj`), beside
`mlp.shared_expert` and its gate `mlp.shared_expert_gate` [1, D].
"""

import dataclasses

import numpy as np

from zoo import config as config_lib
from zoo import presets
from zoo.convert import hf_gemma
from zoo.convert import hf_rules
from zoo.convert.hf_rules import ConvertError
from zoo.models import dims

LETTERS = {'linear_attention': 'D', 'full_attention': 'G'}


def config(hf, names):
  """config.json of qwen3_next -> zoo config."""
  n = hf['num_hidden_layers']
  types = hf.get('layer_types') or [
      'full_attention' if (i + 1) % hf.get('full_attention_interval', 4) == 0
      else 'linear_attention' for i in range(n)]
  unknown = sorted(set(types) - set(LETTERS))
  if unknown:
    raise ConvertError(f'qwen3_next layer_types {unknown}: the zoo builds linear_attention and '
                       'full_attention layers')
  if hf.get('hidden_act', 'silu') != 'silu' or hf.get('attention_bias'):
    raise ConvertError('qwen3_next hidden_act other than silu, or attention_bias=true, is not '
                       "built (the released models' are silu, no biases)")
  experts = hf.get('num_experts', 0)
  if experts and (hf.get('mlp_only_layers') or hf.get('decoder_sparse_step', 1) != 1):
    raise ConvertError(f"qwen3_next mlp_only_layers={hf.get('mlp_only_layers')} or "
                       f"decoder_sparse_step={hf.get('decoder_sparse_step')}: the zoo builds "
                       'experts in every layer (the released models\')')
  c = config_lib.base()
  m = c.model
  m.num_layers = n
  presets.qwen3_next(c)
  m.vocab_size, m.d_model = hf['vocab_size'], hf['hidden_size']
  m.num_heads, m.num_kv_heads = hf['num_attention_heads'], hf['num_key_value_heads']
  m.head_dim = hf.get('head_dim') or hf['hidden_size'] // hf['num_attention_heads']
  m.mlp_dim = hf['intermediate_size']
  m.norm_eps = hf.get('rms_norm_eps', 1e-6)
  m.max_length = hf.get('max_position_embeddings', 262_144)
  m.tie_embeddings = bool(hf.get('tie_word_embeddings')) or 'lm_head.weight' not in names
  m.attention.pattern = hf_rules.shortest_repeat(''.join(LETTERS[t] for t in types))
  hf_rules.rope_from_hf(hf, m, default_theta=10_000_000.0)
  params = hf.get('rope_parameters') or {}
  m.rope_fraction = float(params.get('partial_rotary_factor',
                                     hf.get('partial_rotary_factor', 0.25)))
  m.delta.update(key_heads=hf['linear_num_key_heads'], value_heads=hf['linear_num_value_heads'],
                 key_dim=hf['linear_key_head_dim'], value_dim=hf['linear_value_head_dim'],
                 conv_width=hf.get('linear_conv_kernel_dim', 4))
  o = m.moe
  o.num_experts = experts
  if experts:
    width, shared = hf['moe_intermediate_size'], hf.get('shared_expert_intermediate_size', 0)
    o.top_k, o.expert_mlp_dim = hf['num_experts_per_tok'], width
    o.num_shared_experts, o.shared_gate = int(bool(shared)), bool(shared)
    o.shared_mlp_dim = shared if shared != width else 0  # one MLP of any width
    o.normalize_top_k = bool(hf.get('norm_topk_prob', True))
    o.balance_loss = float(hf.get('router_aux_loss_coef', 0.001))
  c.data.seq_len = min(c.data.seq_len, m.max_length)
  return c


def rules(m):
  """The zoo leaves: the patterned stack (layers/block_j, layers_tail_t)."""
  out = [hf_rules.rule('token_embed/embedding', 'model.embed_tokens.weight'),
         *hf_gemma.norm('final_norm', 'model.norm')]
  pattern = m.attention.pattern
  period = len(pattern)
  repeats = m.num_layers // period
  for j in range(period):
    out += _layer(m, f'layers/block_{j}', 'model.layers.{i}', pattern[j],
                  tuple(r * period + j for r in range(repeats)))
  for t, i in enumerate(range(repeats * period, m.num_layers)):
    out += _layer(m, f'layers_tail_{t}', f'model.layers.{i}', pattern[i % period], ())
  if not m.tie_embeddings:
    out += hf_rules.dense('logits', 'lm_head')
  return out


def _layer(m, zoo, hf, letter, layers):
  norm = hf_gemma.norm
  out = [*norm(f'{zoo}/attention_norm', f'{hf}.input_layernorm'),
         *norm(f'{zoo}/mlp_norm', f'{hf}.post_attention_layernorm')]
  if letter == 'D':
    out += _linear_attention(m, f'{zoo}/delta', f'{hf}.linear_attn')
  else:
    attn = f'{hf}.self_attn'
    out += [*hf_rules.attention(f'{zoo}/attention', attn, m,
                                ('q_proj', 'k_proj', 'v_proj', 'o_proj')),
            hf_rules.rule(f'{zoo}/attention/gate/kernel', f'{attn}.q_gate.weight',
                          hf_rules.linear(m.num_heads, dims.head_dim(m))),
            *norm(f'{zoo}/attention/query_norm', f'{attn}.q_norm'),
            *norm(f'{zoo}/attention/key_norm', f'{attn}.k_norm')]
  if m.moe.num_experts:
    mlp, transpose = f'{hf}.mlp', (lambda w: w.T, lambda w: w.T)
    out += [hf_rules.rule(f'{zoo}/moe/router', f'{mlp}.gate.weight', transpose)]
    out += [hf_rules.rule(f'{zoo}/moe/{name}', f'{mlp}.experts.{{e}}.{hf_name}.weight', transpose)
            for name, hf_name in (('wi_0', 'gate_proj'), ('wi_1', 'up_proj'),
                                  ('wo', 'down_proj'))]
    out += [r for name, hf_name in (('wi_0', 'gate_proj'), ('wi_1', 'up_proj'),
                                    ('wo', 'down_proj'))
            for r in hf_rules.dense(f'{zoo}/moe/shared/{name}', f'{mlp}.shared_expert.{hf_name}')]
    if m.moe.shared_gate:
      out += hf_rules.dense(f'{zoo}/moe/shared_gate', f'{mlp}.shared_expert_gate')
  else:
    out += [r for name, hf_name in (('wi_0', 'gate_proj'), ('wi_1', 'up_proj'),
                                    ('wo', 'down_proj'))
            for r in hf_rules.dense(f'{zoo}/mlp/{name}', f'{hf}.mlp.{hf_name}')]
  return [dataclasses.replace(r, layers=layers) for r in out]


def _linear_attention(m, zoo, hf):
  d = m.delta
  G, H, K, J, W = d.key_heads, d.value_heads, d.key_dim, d.value_dim, d.conv_width
  conv = lambda heads, dim: (lambda w: w[:, 0, :].T.reshape(W, heads, dim),
                             lambda w: w.reshape(W, -1).T[:, None, :])
  transpose = (lambda w: w.T, lambda w: w.T)
  rule = hf_rules.rule
  return [rule(f'{zoo}/query/kernel', f'{hf}.in_proj_q.weight', hf_rules.linear(G, K)),
          rule(f'{zoo}/key/kernel', f'{hf}.in_proj_k.weight', hf_rules.linear(G, K)),
          rule(f'{zoo}/value/kernel', f'{hf}.in_proj_v.weight', hf_rules.linear(H, J)),
          rule(f'{zoo}/gate/kernel', f'{hf}.in_proj_z.weight', hf_rules.linear(H, J)),
          rule(f'{zoo}/write/kernel', f'{hf}.in_proj_b.weight', transpose),
          rule(f'{zoo}/decay/kernel', f'{hf}.in_proj_a.weight', transpose),
          rule(f'{zoo}/query_conv', f'{hf}.conv_q.weight', conv(G, K)),
          rule(f'{zoo}/key_conv', f'{hf}.conv_k.weight', conv(G, K)),
          rule(f'{zoo}/value_conv', f'{hf}.conv_v.weight', conv(H, J)),
          rule(f'{zoo}/decay_log', f'{hf}.A_log'),
          rule(f'{zoo}/decay_bias', f'{hf}.dt_bias'),
          rule(f'{zoo}/norm_scale', f'{hf}.norm.weight'),
          rule(f'{zoo}/out/kernel', f'{hf}.out_proj.weight', hf_rules.linear_in(H, J))]


def _dims(m):
  """(key heads, value heads per key head, key dim, value dim, attention heads, d_model,
  attention head dim)."""
  d = m.delta
  return (d.key_heads, d.value_heads // d.key_heads, d.key_dim, d.value_dim, m.num_heads,
          m.d_model, dims.head_dim(m))


def to_rules(tensors, m):
  """The hub's fused tensors -> one per rule (in_proj_qkvz, in_proj_ba, conv1d and q_proj
  split as the module docstring says)."""
  G, r, K, J, H, D, HK = _dims(m)
  out = dict(tensors)
  for name in [n for n in out if n.endswith('.linear_attn.in_proj_qkvz.weight')]:
    prefix = name[:-len('in_proj_qkvz.weight')]
    q, k, v, z = np.split(out.pop(name).reshape(G, 2 * K + 2 * r * J, D),
                          [K, 2 * K, 2 * K + r * J], axis=1)
    for part, w in zip('qkvz', (q, k, v, z)):
      out[f'{prefix}in_proj_{part}.weight'] = w.reshape(-1, D)
    b, a = np.split(out.pop(f'{prefix}in_proj_ba.weight').reshape(G, 2 * r, D), 2, axis=1)
    out[f'{prefix}in_proj_b.weight'], out[f'{prefix}in_proj_a.weight'] = (
        b.reshape(-1, D), a.reshape(-1, D))
    q, k, v = np.split(out.pop(f'{prefix}conv1d.weight'), [G * K, 2 * G * K])
    out[f'{prefix}conv_q.weight'], out[f'{prefix}conv_k.weight'] = q, k
    out[f'{prefix}conv_v.weight'] = v
  for name in [n for n in out if n.endswith('.self_attn.q_proj.weight')]:
    q, gate = np.split(out.pop(name).reshape(H, 2 * HK, D), 2, axis=1)
    out[name] = q.reshape(-1, D)
    out[name.replace('q_proj', 'q_gate')] = gate.reshape(-1, D)
  return out


def from_rules(tensors, m):
  """to_rules' inverse."""
  G, r, K, J, H, D, HK = _dims(m)
  out = dict(tensors)
  for name in [n for n in out if n.endswith('.linear_attn.in_proj_q.weight')]:
    prefix = name[:-len('in_proj_q.weight')]
    q, k, v, z = (out.pop(f'{prefix}in_proj_{p}.weight') for p in 'qkvz')
    out[f'{prefix}in_proj_qkvz.weight'] = np.concatenate(
        [q.reshape(G, K, D), k.reshape(G, K, D), v.reshape(G, r * J, D),
         z.reshape(G, r * J, D)], axis=1).reshape(-1, D)
    b, a = out.pop(f'{prefix}in_proj_b.weight'), out.pop(f'{prefix}in_proj_a.weight')
    out[f'{prefix}in_proj_ba.weight'] = np.concatenate(
        [b.reshape(G, r, D), a.reshape(G, r, D)], axis=1).reshape(-1, D)
    out[f'{prefix}conv1d.weight'] = np.concatenate(
        [out.pop(f'{prefix}conv_{p}.weight') for p in 'qkv'])
  for name in [n for n in out if n.endswith('.self_attn.q_gate.weight')]:
    q_name = name.replace('q_gate', 'q_proj')
    out[q_name] = np.concatenate([out[q_name].reshape(H, HK, D),
                                  out.pop(name).reshape(H, HK, D)], axis=1).reshape(-1, D)
  return out


def hf_config(config):
  """zoo config -> config.json of Qwen3NextForCausalLM."""
  m = config.model
  pattern = m.attention.pattern or 'G'
  names = {v: k for k, v in LETTERS.items()}
  if set(pattern) - set(names):
    raise ConvertError(f'save: qwen3_next layers are D or G; model.attention.pattern={pattern!r}')
  o, d = m.moe, m.delta
  if o.num_experts and (o.every != 1 or o.num_shared_experts and not o.shared_gate):
    raise ConvertError('save: qwen3_next has experts in every layer and a gated shared expert; '
                       f'model.moe.every={o.every}, shared_gate={o.shared_gate}')
  width = o.expert_mlp_dim or m.mlp_dim
  return {'model_type': 'qwen3_next', 'vocab_size': m.vocab_size, 'hidden_size': m.d_model,
          'intermediate_size': m.mlp_dim, 'num_hidden_layers': m.num_layers,
          'num_attention_heads': m.num_heads, 'num_key_value_heads': dims.kv_heads(m),
          'head_dim': dims.head_dim(m),
          'layer_types': [names[pattern[i % len(pattern)]] for i in range(m.num_layers)],
          'linear_num_key_heads': d.key_heads, 'linear_num_value_heads': d.value_heads,
          'linear_key_head_dim': d.key_dim, 'linear_value_head_dim': d.value_dim,
          'linear_conv_kernel_dim': d.conv_width,
          'num_experts': o.num_experts, 'num_experts_per_tok': o.top_k,
          'moe_intermediate_size': width,
          'shared_expert_intermediate_size': dims.shared_mlp_dim(m),
          'norm_topk_prob': o.normalize_top_k, 'router_aux_loss_coef': o.balance_loss,
          'decoder_sparse_step': 1, 'mlp_only_layers': [],
          'rope_parameters': {**hf_rules.rope_parameters_to_hf(m),
                              'partial_rotary_factor': m.rope_fraction},
          'max_position_embeddings': m.max_length, 'rms_norm_eps': m.norm_eps,
          'hidden_act': 'silu', 'attention_bias': False,
          'tie_word_embeddings': m.tie_embeddings}
