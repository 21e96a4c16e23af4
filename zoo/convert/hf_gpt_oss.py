"""gpt-oss checkpoints (GptOssForCausalLM) <-> zoo: config.json fields and tensor rules.

gpt-oss: biases on the attention projections, a learned sink logit per head
(self_attn.sinks), sliding-window and full layers alternating (layer_types; the zoo's
pattern 'LG'), YaRN on every layer, and in every layer a biased router (mlp.router) over
experts stored fused: mlp.experts.gate_up_proj [E, D, 2F] with the gate and up columns
interleaved (gate at even columns), gate_up_proj_bias [E, 2F], down_proj [E, F, D],
down_proj_bias [E, D]; their activation is the clamped SwiGLU (swiglu_limit, swiglu_alpha).

The published checkpoints keep the experts' matrices in MXFP4 (config.json
quantization_config.quant_method 'mxfp4'): `{name}_blocks` uint8 [E, out, in / 32, 16], two
4-bit E2M1 codes a byte (low nibble first), and `{name}_scales` uint8 [E, out, in / 32], one
power-of-two exponent (biased by 127) per 32 values. `dequantize` turns them into float32
[E, in, out] as transformers' `convert_moe_packed_tensors` does, on import; the zoo writes
float checkpoints.
"""

import dataclasses

import numpy as np

from zoo import config as config_lib
from zoo import presets
from zoo.convert import hf_gemma
from zoo.convert import hf_rules
from zoo.convert.hf_rules import ConvertError
from zoo.models import dims

# E2M1: the 16 values a 4-bit code stands for
FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)
EXPERT_MATRICES = ('gate_up_proj', 'down_proj')


def dequantize(blocks, scales):
  """MXFP4 blocks uint8 [E, out, G, 16] and scales uint8 [E, out, G] -> float32 [E, in, out]
  with in = 32 G."""
  if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != 16:
    raise ConvertError(f'MXFP4 blocks {blocks.shape} and scales {scales.shape}: expected '
                       '[experts, out, groups, 16] and [experts, out, groups]')
  values = np.empty(blocks.shape[:-1] + (32,), np.float32)
  values[..., 0::2] = FP4_VALUES[blocks & 0x0F]
  values[..., 1::2] = FP4_VALUES[blocks >> 4]
  values = np.ldexp(values, scales.astype(np.int32)[..., None] - 127)
  E, out = blocks.shape[:2]
  return values.reshape(E, out, -1).transpose(0, 2, 1)


def config(hf, names):
  """config.json of gpt_oss -> zoo config."""
  if hf.get('hidden_act', 'silu') != 'silu':
    raise ConvertError(f"gpt_oss hidden_act={hf['hidden_act']!r}: the zoo builds gpt-oss's "
                       "clamped SwiGLU ('silu') only")
  quant = (hf.get('quantization_config') or {}).get('quant_method')
  if quant not in (None, 'mxfp4'):
    raise ConvertError(f'gpt_oss quantization_config.quant_method={quant!r} is not read (MXFP4 '
                       'experts are, and float checkpoints); dequantize it with transformers '
                       'first (from_pretrained, then save_pretrained)')
  c = config_lib.base()
  m = c.model
  m.num_layers = hf['num_hidden_layers']
  m.mlp_dim = hf['intermediate_size']
  presets.gpt_oss(c)
  m.vocab_size, m.d_model = hf['vocab_size'], hf['hidden_size']
  m.num_heads, m.num_kv_heads = hf['num_attention_heads'], hf['num_key_value_heads']
  m.head_dim = hf.get('head_dim') or hf['hidden_size'] // hf['num_attention_heads']
  m.norm_eps = hf.get('rms_norm_eps', 1e-5)
  m.max_length = hf.get('max_position_embeddings', 131_072)
  m.tie_embeddings = bool(hf.get('tie_word_embeddings')) or 'lm_head.weight' not in names
  m.swiglu_limit = float(hf.get('swiglu_limit', 7.0))
  m.swiglu_alpha = float(hf.get('swiglu_alpha', 1.702))
  a = m.attention
  a.use_bias = bool(hf.get('attention_bias', True))
  types = hf.get('layer_types') or ['sliding_attention' if (i + 1) % 2 else 'full_attention'
                                    for i in range(m.num_layers)]
  a.pattern = hf_gemma.pattern(types)
  a.window = hf['sliding_window'] if 'L' in a.pattern else 0
  if a.pattern == 'G':  # every layer global: no pattern
    a.pattern = ''
  hf_rules.rope_from_hf(hf, m, default_theta=150_000.0)
  o = m.moe
  o.num_experts, o.top_k = hf['num_local_experts'], hf['num_experts_per_tok']
  o.expert_mlp_dim = hf['intermediate_size']
  o.balance_loss, o.z_loss = float(hf.get('router_aux_loss_coef', 0.001)), 0.0
  c.data.seq_len = min(c.data.seq_len, m.max_length)
  return c


def rules(m):
  """The zoo leaves: a patterned stack (layers/block_j for pattern letter j, stacked over
  the repeats; layers_tail_t after the last whole repeat) or, without a pattern, layers/."""
  out = [hf_rules.rule('token_embed/embedding', 'model.embed_tokens.weight'),
         *hf_rules.norm('final_norm', 'model.norm')]
  period = len(m.attention.pattern)
  if not period:
    out += _layer(m, 'layers/block_0', 'model.layers.{i}', ())
  else:
    repeats = m.num_layers // period
    for j in range(period):
      out += _layer(m, f'layers/block_{j}', 'model.layers.{i}',
                    tuple(r * period + j for r in range(repeats)))
    for t, i in enumerate(range(repeats * period, m.num_layers)):
      out += _layer(m, f'layers_tail_{t}', f'model.layers.{i}', ())
  if not m.tie_embeddings:
    out += hf_rules.dense('logits', 'lm_head')
  return out


def _layer(m, zoo, hf, layers):
  moe, experts = f'{zoo}/moe', f'{hf}.mlp.experts'
  transpose = (lambda w: w.T, lambda w: w.T)
  out = [*hf_rules.attention(f'{zoo}/attention', f'{hf}.self_attn', m,
                             ('q_proj', 'k_proj', 'v_proj', 'o_proj'),
                             bias=m.attention.use_bias),
         hf_rules.rule(f'{zoo}/attention/sinks', f'{hf}.self_attn.sinks'),
         *hf_rules.norm(f'{zoo}/attention_norm', f'{hf}.input_layernorm'),
         *hf_rules.norm(f'{zoo}/mlp_norm', f'{hf}.post_attention_layernorm'),
         hf_rules.rule(f'{moe}/router', f'{hf}.mlp.router.weight', transpose),
         hf_rules.rule(f'{moe}/router_bias', f'{hf}.mlp.router.bias')]
  # the fused gate_up tensors split into gate and up (to_rules) under these names
  for zoo_name, name in (('wi_0', 'gate_proj'), ('wi_1', 'up_proj'), ('wo', 'down_proj')):
    out += [hf_rules.rule(f'{moe}/{zoo_name}', f'{experts}.{name}'),
            hf_rules.rule(f'{moe}/{zoo_name}_bias', f'{experts}.{name}_bias')]
  return [dataclasses.replace(r, layers=layers) for r in out]


def to_rules(tensors, m):
  """The hub's tensors -> one per rule: MXFP4 experts dequantized, gate_up split into its
  interleaved gate (even columns) and up (odd columns)."""
  out = dict(tensors)
  for name in list(out):
    for matrix in EXPERT_MATRICES:
      if name.endswith(f'.experts.{matrix}_blocks'):
        prefix = name[:-len('_blocks')]
        out[prefix] = dequantize(out.pop(name), out.pop(f'{prefix}_scales'))
  for name in [n for n in out if n.endswith('.experts.gate_up_proj')]:
    prefix = name[:-len('gate_up_proj')]
    fused, bias = out.pop(name), out.pop(f'{name}_bias')
    out[f'{prefix}gate_proj'], out[f'{prefix}up_proj'] = fused[..., 0::2], fused[..., 1::2]
    out[f'{prefix}gate_proj_bias'], out[f'{prefix}up_proj_bias'] = bias[..., 0::2], bias[..., 1::2]
  return out


def from_rules(tensors, m):
  """to_rules' inverse for float tensors: gate and up interleaved back into gate_up_proj."""
  out = dict(tensors)
  for name in [n for n in out if n.endswith('.experts.gate_proj')]:
    prefix = name[:-len('gate_proj')]
    for suffix in ('', '_bias'):
      gate, up = out.pop(f'{prefix}gate_proj{suffix}'), out.pop(f'{prefix}up_proj{suffix}')
      fused = np.empty(gate.shape[:-1] + (2 * gate.shape[-1],), gate.dtype)
      fused[..., 0::2], fused[..., 1::2] = gate, up
      out[f'{prefix}gate_up_proj{suffix}'] = fused
  return out


def hf_config(config):
  """zoo config -> config.json of GptOssForCausalLM."""
  m = config.model
  pattern = m.attention.pattern or 'G'
  layer_types = [{'L': 'sliding_attention', 'G': 'full_attention'}[pattern[i % len(pattern)]]
                 for i in range(m.num_layers)]
  if m.moe.expert_mlp_dim and m.moe.expert_mlp_dim != m.mlp_dim:
    raise ConvertError(f'save: gpt_oss has one intermediate_size; model.moe.expert_mlp_dim='
                       f'{m.moe.expert_mlp_dim} differs from model.mlp_dim={m.mlp_dim}')
  return {'model_type': 'gpt_oss', 'vocab_size': m.vocab_size, 'hidden_size': m.d_model,
          'intermediate_size': m.moe.expert_mlp_dim or m.mlp_dim,
          'num_hidden_layers': m.num_layers, 'num_attention_heads': m.num_heads,
          'num_key_value_heads': dims.kv_heads(m), 'head_dim': dims.head_dim(m),
          'num_local_experts': m.moe.num_experts, 'num_experts_per_tok': m.moe.top_k,
          'sliding_window': m.attention.window or None, 'layer_types': layer_types,
          'rope_parameters': hf_rules.rope_parameters_to_hf(m),
          'max_position_embeddings': m.max_length,
          'rms_norm_eps': m.norm_eps, 'hidden_act': 'silu',
          'attention_bias': bool(m.attention.use_bias or m.use_bias),
          'swiglu_limit': m.swiglu_limit, 'swiglu_alpha': m.swiglu_alpha,
          'router_aux_loss_coef': m.moe.balance_loss, 'tie_word_embeddings': m.tie_embeddings}
