"""Hugging Face checkpoints in and out: config.json + safetensors <-> zoo config and params.

    python -m zoo.convert.hf --hf_dir=DIR --workdir=W     # W/config.py + W/imported (orbax)
    python -m zoo.launch --config=W/config.py --workdir=W   # fine-tunes from the import

Architectures: GPT-2, BERT (ForPreTraining and ForMaskedLM), T5 v1.0 / v1.1 / mT5 / umT5,
Llama (1/2/3/3.1+: GQA, any rope_theta, the 'llama3', 'linear', 'dynamic' and 'yarn' rope
scalings), Mistral, Mixtral, Qwen 3 (dense and MoE), Gemma 2, Gemma 3 (ForCausalLM, and the
text model of a ForConditionalGeneration: zoo/convert/hf_gemma.py), DeepSeek-V3
(zoo/convert/hf_deepseek.py), gpt-oss (its MXFP4 experts dequantized on import:
zoo/convert/hf_gpt_oss.py), Llama 4 (ForCausalLM, and the text model of a
ForConditionalGeneration: zoo/convert/hf_llama4.py), Qwen3-Next (zoo/convert/hf_qwen3_next.py),
SigLIP (SiglipModel, both towers: zoo/convert/hf_siglip.py); the
ForSequenceClassification heads of BERT, GPT-2, Llama and Mistral (model.num_labels,
model.label_names: a decoder reads each row's last token, as transformers' last non-pad
token on right-padded rows whose text holds no pad id). Each is a table
of rules between a zoo parameter (its layers stacked on a leading axis, as the layer scan
keeps them) and the Hugging Face tensor of each layer (and expert); `load` and `save` read
the same table in opposite directions. Tensors are read with safetensors' numpy API (no
torch). Anything the zoo does not model (an option, a tensor, a rope scaling) is an error
naming it, never a silent approximation.
"""

import dataclasses
import json
import os
import re
from typing import Callable

import flax.linen as nn
import numpy as np
from safetensors import numpy as safetensors_np

from zoo import config as config_lib
from zoo import run as run_lib
from zoo import counting
from zoo import families
from zoo import platform
from zoo import presets
from zoo import storage
from zoo.config import ConfigError
from zoo.convert import hf_deepseek
from zoo.convert import hf_gemma
from zoo.convert import hf_gemma_vision
from zoo.convert import hf_gpt_oss
from zoo.convert import hf_llama4
from zoo.convert import hf_qwen3_next
from zoo.convert import hf_siglip
from zoo.convert.hf_rules import ConvertError
from zoo.convert.hf_rules import attention as _attention
from zoo.convert.hf_rules import dense as _dense
from zoo.convert.hf_rules import names as _names
from zoo.convert.hf_rules import norm as _norm
from zoo.convert.hf_rules import rope_scaling_from_hf
from zoo.convert.hf_rules import rope_scaling_to_hf
from zoo.convert.hf_rules import rule as _rule
from zoo.models import dims

SINGLE, INDEX = 'model.safetensors', 'model.safetensors.index.json'
IGNORED = re.compile(r'.*(\.attn\.bias|\.attn\.masked_bias|rotary_emb\.inv_freq|position_ids)$')


# ------------------------------------------------------------------- architectures

def _imported(c):
  """Compute in float32 like the checkpoint (set model.dtype=bfloat16 on accelerators);
  sequences no longer than the model's positions."""
  c.model.dtype = 'float32'
  if c.model.position == 'learned':
    c.data.seq_len = min(c.data.seq_len, c.model.max_length)
  return c


def _gpt2(hf, names):
  c = config_lib.base()
  m = c.model
  if hf.get('activation_function', 'gelu_new') != 'gelu_new':
    raise ConvertError(f"gpt2 activation_function={hf['activation_function']!r}: the zoo "
                       "builds GPT-2 with 'gelu_new' (gelu_tanh) only")
  presets.gpt2(c, max_length=hf['n_positions'])
  m.vocab_size, m.d_model, m.num_layers = hf['vocab_size'], hf['n_embd'], hf['n_layer']
  m.num_heads, m.mlp_dim = hf['n_head'], hf.get('n_inner') or 4 * hf['n_embd']
  m.norm_eps = hf.get('layer_norm_epsilon', 1e-5)
  return _imported(c)


def _gpt2_rules(m):
  t, layer = 'transformer', 'transformer.h.{i}'
  return [_rule('token_embed/embedding', f'{t}.wte.weight'),
          _rule('embeddings/position_embed/embedding', f'{t}.wpe.weight'),
          *_norm('layers/attention_norm', f'{layer}.ln_1', bias=True),
          *_attention('layers/attention', f'{layer}.attn', m,
                      ('q', 'k', 'v', 'c_proj'), bias=True, conv1d=True),
          *_norm('layers/mlp_norm', f'{layer}.ln_2', bias=True),
          *_dense('layers/mlp/wi', f'{layer}.mlp.c_fc', bias=True, conv1d=True),
          *_dense('layers/mlp/wo', f'{layer}.mlp.c_proj', bias=True, conv1d=True),
          *_norm('final_norm', f'{t}.ln_f', bias=True),
          *_score(m)]


def _score(m):
  """A decoder's classification head: transformers' `score` (no bias) <-> 'classifier'."""
  return _dense('classifier', 'score') if m.num_labels else []


def _gpt2_split(tensors, m):
  """GPT-2's fused c_attn [D, 3D] (+ bias) -> separate q, k, v tensors, and back (join)."""
  out = {}
  for name, w in tensors.items():
    match = re.fullmatch(r'(.*\.attn\.)c_attn\.(weight|bias)', name)
    if match:
      prefix, kind = match.groups()
      for part, piece in zip('qkv', np.split(w, 3, axis=-1)):
        out[f'{prefix}{part}.{kind}'] = piece
    else:
      out[name] = w
  return out


def _gpt2_join(tensors, m):
  out = dict(tensors)
  for name in tensors:
    match = re.fullmatch(r'(.*\.attn\.)q\.(weight|bias)', name)
    if match:
      prefix, kind = match.groups()
      out[f'{prefix}c_attn.{kind}'] = np.concatenate(
          [out.pop(f'{prefix}{p}.{kind}') for p in 'qkv'], axis=-1)
  return out


def _bert(hf, names):
  c = config_lib.base()
  m = c.model
  if hf.get('hidden_act', 'gelu') != 'gelu':
    raise ConvertError(f"bert hidden_act={hf['hidden_act']!r}: the zoo builds BERT with 'gelu'")
  if hf.get('position_embedding_type', 'absolute') != 'absolute':
    raise ConvertError(f"bert position_embedding_type={hf['position_embedding_type']!r} is not "
                       "built; only 'absolute'")
  presets.bert(c)
  m.vocab_size, m.d_model, m.num_layers = (hf['vocab_size'], hf['hidden_size'],
                                           hf['num_hidden_layers'])
  m.num_heads, m.mlp_dim = hf['num_attention_heads'], hf['intermediate_size']
  m.max_length, m.type_vocab_size = hf['max_position_embeddings'], hf.get('type_vocab_size', 2)
  m.norm_eps = hf.get('layer_norm_eps', 1e-12)
  m.nsp_head = 'BertForMaskedLM' not in hf.get('architectures', ['BertForPreTraining'])
  return _imported(c)


def _bert_rules(m):
  b, layer = 'bert', 'bert.encoder.layer.{i}'
  head = ([*_dense('pooler', f'{b}.pooler.dense', bias=True),
           *_dense('classifier', 'classifier', bias=True)] if m.num_labels else
          [*_dense('mlm_transform', 'cls.predictions.transform.dense', bias=True),
           *_norm('mlm_norm', 'cls.predictions.transform.LayerNorm', bias=True),
           _rule('mlm_bias', 'cls.predictions.bias')])
  rules = [_rule('token_embed/embedding', f'{b}.embeddings.word_embeddings.weight'),
           _rule('embeddings/position_embed/embedding',
                 f'{b}.embeddings.position_embeddings.weight'),
           _rule('embeddings/type_embed/embedding', f'{b}.embeddings.token_type_embeddings.weight'),
           *_norm('embeddings/norm', f'{b}.embeddings.LayerNorm', bias=True),
           *_attention('layers/attention', f'{layer}.attention', m,
                       ('self.query', 'self.key', 'self.value', 'output.dense'), bias=True),
           *_norm('layers/attention_norm', f'{layer}.attention.output.LayerNorm', bias=True),
           *_dense('layers/mlp/wi', f'{layer}.intermediate.dense', bias=True),
           *_dense('layers/mlp/wo', f'{layer}.output.dense', bias=True),
           *_norm('layers/mlp_norm', f'{layer}.output.LayerNorm', bias=True),
           *head]
  if m.nsp_head and not m.num_labels:
    rules += [*_dense('pooler', f'{b}.pooler.dense', bias=True),
              *_dense('nsp', 'cls.seq_relationship', bias=True)]
  return rules


def _t5(hf, names):
  c = config_lib.base()
  m = c.model
  projection = hf.get('feed_forward_proj', 'relu')
  if projection not in ('relu', 'gated-gelu'):
    raise ConvertError(f't5 feed_forward_proj={projection!r}: the zoo builds relu (v1.0) and '
                       'gated-gelu (v1.1, mT5)')
  m.num_encoder_layers = hf['num_layers']
  m.num_decoder_layers = hf.get('num_decoder_layers') or hf['num_layers']
  m.d_model, m.num_heads, m.head_dim, m.mlp_dim = (hf['d_model'], hf['num_heads'], hf['d_kv'],
                                                   hf['d_ff'])
  presets.t5(c, version='1.0' if projection == 'relu' else '1.1')
  m.vocab_size = hf['vocab_size']
  # A separate lm_head tensor means untied (safetensors keeps tied weights once). The logit
  # scale d_model^-0.5 is `scale_decoder_outputs` (transformers 5), else it follows tying.
  m.tie_embeddings = 'lm_head.weight' not in names
  m.scale_tied_logits = hf.get('scale_decoder_outputs', hf.get('tie_word_embeddings', True))
  if m.scale_tied_logits and not m.tie_embeddings:
    raise ConvertError('t5 with an untied lm_head and scale_decoder_outputs=true is not built; '
                       'the zoo scales tied logits only')
  m.relative_bias_per_layer = hf['model_type'] == 'umt5'
  m.relative_buckets = hf.get('relative_attention_num_buckets', 32)
  m.relative_max_distance = hf.get('relative_attention_max_distance', 128)
  m.norm_eps = hf.get('layer_norm_epsilon', 1e-6)
  m.dropout_rate = hf.get('dropout_rate', 0.0)
  return _imported(c)


def _t5_rules(m):
  rules = [_rule('token_embed/embedding', 'shared.weight')]
  mlp = ('wi_0', 'wi_1', 'wo') if m.activation == 'geglu' else ('wi', 'wo')
  for stack in ('encoder', 'decoder'):
    layer = f'{stack}.block.{{i}}.layer'
    rules += [
        _rule(f'{stack}/layers/relative_bias/rel_embedding',
              f'{layer}.0.SelfAttention.relative_attention_bias.weight')
        if m.relative_bias_per_layer else  # umT5: every layer's own table
        _rule(f'{stack}/relative_bias/rel_embedding',
              f'{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight'),
        *_attention(f'{stack}/layers/attention', f'{layer}.0.SelfAttention', m, 'qkvo'),
        *_norm(f'{stack}/layers/attention_norm', f'{layer}.0.layer_norm'),
        *_norm(f'{stack}/final_norm', f'{stack}.final_layer_norm')]
    ff = 1
    if stack == 'decoder':
      ff = 2
      rules += [*_attention(f'{stack}/layers/cross_attention', f'{layer}.1.EncDecAttention', m,
                            'qkvo'),
                *_norm(f'{stack}/layers/cross_attention_norm', f'{layer}.1.layer_norm')]
    rules += [*_norm(f'{stack}/layers/mlp_norm', f'{layer}.{ff}.layer_norm')]
    rules += [r for name in mlp
              for r in _dense(f'{stack}/layers/mlp/{name}', f'{layer}.{ff}.DenseReluDense.{name}')]
  if not m.tie_embeddings:
    rules += _dense('logits', 'lm_head')
  return rules


def _llama(hf, names):
  c = config_lib.base()
  m = c.model
  if hf.get('hidden_act', 'silu') != 'silu':
    raise ConvertError(f"{hf['model_type']} hidden_act={hf['hidden_act']!r}: the zoo builds "
                       "SwiGLU ('silu') only")
  rope = {**(hf.get('rope_parameters') or {}), **(hf.get('rope_scaling') or {})}
  if hf.get('use_sliding_window'):
    raise ConvertError(f"{hf['model_type']} use_sliding_window=true is not built (Qwen's "
                       'sliding window on the layers after max_window_layers)')
  for flag in ('attention_bias', 'mlp_bias'):
    if hf.get(flag):
      raise ConvertError(f"{hf['model_type']} {flag}=true is not built; the zoo's Llama has no "
                         'biases')
  theta = rope.get('rope_theta', hf.get('rope_theta', 10_000.0))
  m.vocab_size, m.d_model, m.num_layers = (hf['vocab_size'], hf['hidden_size'],
                                           hf['num_hidden_layers'])
  m.num_heads = hf['num_attention_heads']
  m.num_kv_heads = hf.get('num_key_value_heads') or m.num_heads
  m.mlp_dim = hf['intermediate_size']
  presets.llama(c, rope_theta=float(theta), max_length=hf.get('max_position_embeddings', 4096))
  head_dim = hf.get('head_dim') or 0
  m.head_dim = 0 if head_dim * m.num_heads == m.d_model else head_dim  # 0: d_model / heads
  m.norm_eps = hf.get('rms_norm_eps', 1e-5)
  m.tie_embeddings = 'lm_head.weight' not in names
  rope_scaling_from_hf(rope, hf, m)
  m.qk_norm = hf['model_type'] in ('qwen3', 'qwen3_moe')
  if hf['model_type'] in ('mistral', 'mixtral') and hf.get('sliding_window'):
    m.attention.window = hf['sliding_window']
  if hf['model_type'] == 'mixtral':
    m.moe.num_experts, m.moe.top_k = hf['num_local_experts'], hf['num_experts_per_tok']
    m.moe.every, m.moe.capacity_factor = 1, 0.0
    m.moe.balance_loss = hf.get('router_aux_loss_coef', 0.02)
  if hf['model_type'] == 'qwen3_moe':
    if hf.get('decoder_sparse_step', 1) != 1 or hf.get('mlp_only_layers'):
      raise ConvertError('qwen3_moe decoder_sparse_step != 1 or mlp_only_layers: dense layers '
                         'among the experts are not built (experts in every layer are)')
    m.moe.num_experts = hf.get('num_experts') or hf['num_local_experts']  # hub, transformers 5
    m.moe.top_k, m.moe.expert_mlp_dim = hf['num_experts_per_tok'], hf['moe_intermediate_size']
    m.moe.normalize_top_k = bool(hf.get('norm_topk_prob', False))
    m.moe.every, m.moe.capacity_factor = 1, 0.0
    m.moe.balance_loss = hf.get('router_aux_loss_coef', 0.001)
  return _imported(c)


def _llama_rules(m):
  layer = 'model.layers.{i}'
  zoo_layer = 'layers/block_0' if m.moe.num_experts else 'layers'
  rules = [_rule('token_embed/embedding', 'model.embed_tokens.weight'),
           *_attention(f'{zoo_layer}/attention', f'{layer}.self_attn', m,
                       ('q_proj', 'k_proj', 'v_proj', 'o_proj')),
           *_norm(f'{zoo_layer}/attention_norm', f'{layer}.input_layernorm'),
           *(_norm(f'{zoo_layer}/attention/query_norm', f'{layer}.self_attn.q_norm') +
             _norm(f'{zoo_layer}/attention/key_norm', f'{layer}.self_attn.k_norm')
             if m.qk_norm else []),
           *_norm(f'{zoo_layer}/mlp_norm', f'{layer}.post_attention_layernorm'),
           *_norm('final_norm', 'model.norm')]
  if m.moe.num_experts:
    # Qwen 3 MoE (the QK-normed one): mlp.experts.E.{gate,up,down}_proj; Mixtral:
    # block_sparse_moe.experts.E.{w1,w3,w2}
    moe, names = ((f'{layer}.mlp', ('gate_proj', 'up_proj', 'down_proj')) if m.qk_norm else
                  (f'{layer}.block_sparse_moe', ('w1', 'w3', 'w2')))
    transpose = (lambda w: w.T, lambda w: w.T)
    rules += [_rule(f'{zoo_layer}/moe/router', f'{moe}.gate.weight', transpose)]
    rules += [_rule(f'{zoo_layer}/moe/{zoo}', f'{moe}.experts.{{e}}.{name}.weight', transpose)
              for zoo, name in zip(('wi_0', 'wi_1', 'wo'), names)]
  else:
    rules += [*_dense('layers/mlp/wi_0', f'{layer}.mlp.gate_proj'),
              *_dense('layers/mlp/wi_1', f'{layer}.mlp.up_proj'),
              *_dense('layers/mlp/wo', f'{layer}.mlp.down_proj')]
  if m.num_labels:
    rules += _score(m)
  elif not m.tie_embeddings:
    rules += _dense('logits', 'lm_head')
  return rules


def _gemma(hf, names):
  return _imported(hf_gemma.config(hf, names))


def _deepseek(hf, names):
  return _imported(hf_deepseek.config(hf, names))


def _gpt_oss(hf, names):
  return _imported(hf_gpt_oss.config(hf, names))


def _llama4(hf, names):
  return _imported(hf_llama4.config(hf, names))


def _qwen3_next(hf, names):
  return _imported(hf_qwen3_next.config(hf, names))


def _t5gemma(hf, names):
  return _imported(hf_gemma.t5gemma_config(hf, names))


_T5_ALIASES = (('encoder.embed_tokens.weight', 'shared.weight'),
               ('decoder.embed_tokens.weight', 'shared.weight'))


@dataclasses.dataclass(frozen=True)
class Architecture:
  config: Callable  # HF config dict -> zoo config
  rules: Callable  # zoo model config -> [Rule]
  architectures: tuple  # HF class names written by save
  to_rules: Callable = lambda tensors, m: tensors  # fused HF tensors -> one per rule
  from_rules: Callable = lambda tensors, m: tensors
  aliases: tuple = ()  # (name, name it must equal): copies some files keep of a tied tensor
  classifier: str = ''  # the class of its ForSequenceClassification head, if the zoo has one
  others: tuple = ()  # more classes whose weights it reads (the bare model's, other heads')
  # tensors -> (the 'moe_bias' collection, the tensor names it read) (DeepSeek-V3), and back
  state: Callable = None
  state_tensors: Callable = None


ARCHITECTURES = {
    'gpt2': Architecture(_gpt2, _gpt2_rules, ('GPT2LMHeadModel',), _gpt2_split, _gpt2_join,
                         classifier='GPT2ForSequenceClassification', others=('GPT2Model',)),
    'bert': Architecture(_bert, _bert_rules, ('BertForPreTraining',),
                         classifier='BertForSequenceClassification',
                         others=('BertForMaskedLM', 'BertModel')),
    't5': Architecture(_t5, _t5_rules, ('T5ForConditionalGeneration',), aliases=_T5_ALIASES),
    'mt5': Architecture(_t5, _t5_rules, ('MT5ForConditionalGeneration',),
                        aliases=_T5_ALIASES),
    'umt5': Architecture(_t5, _t5_rules, ('UMT5ForConditionalGeneration',),
                         aliases=_T5_ALIASES),
    'llama': Architecture(_llama, _llama_rules, ('LlamaForCausalLM',),
                          classifier='LlamaForSequenceClassification', others=('LlamaModel',)),
    'mistral': Architecture(_llama, _llama_rules, ('MistralForCausalLM',),
                            classifier='MistralForSequenceClassification',
                            others=('MistralModel',)),
    'mixtral': Architecture(_llama, _llama_rules, ('MixtralForCausalLM',),
                            others=('MixtralModel',)),
    'qwen3': Architecture(_llama, _llama_rules, ('Qwen3ForCausalLM',), others=('Qwen3Model',)),
    'qwen3_moe': Architecture(_llama, _llama_rules, ('Qwen3MoeForCausalLM',),
                              others=('Qwen3MoeModel',)),
    'gemma2': Architecture(_gemma, hf_gemma.rules, ('Gemma2ForCausalLM',),
                           others=('Gemma2Model',)),
    'gemma3_text': Architecture(_gemma, hf_gemma.rules, ('Gemma3ForCausalLM',),
                                others=('Gemma3TextModel',)),
    'deepseek_v3': Architecture(_deepseek, hf_deepseek.rules,
                                ('DeepseekV3ForCausalLM',), hf_deepseek.to_rules,
                                hf_deepseek.from_rules, state=hf_deepseek.routing_bias,
                                state_tensors=hf_deepseek.routing_bias_tensors,
                                others=('DeepseekV3Model',)),
    # DeepSeek-V3.2: DeepSeek-V3 with each attention layer's lightning indexer
    'deepseek_v32': Architecture(_deepseek, hf_deepseek.rules,
                                 ('DeepseekV32ForCausalLM',), hf_deepseek.to_rules,
                                 hf_deepseek.from_rules, state=hf_deepseek.routing_bias,
                                 state_tensors=hf_deepseek.routing_bias_tensors,
                                 others=('DeepseekV32Model',)),
    # Kimi K2 (and K2.5's language model): DeepSeek-V3's classes under its own model_type
    'kimi_k2': Architecture(_deepseek, hf_deepseek.rules,
                            ('DeepseekV3ForCausalLM',), hf_deepseek.to_rules,
                            hf_deepseek.from_rules, state=hf_deepseek.routing_bias,
                            state_tensors=hf_deepseek.routing_bias_tensors,
                            others=('DeepseekV3Model',)),
    'gpt_oss': Architecture(_gpt_oss, hf_gpt_oss.rules, ('GptOssForCausalLM',),
                            hf_gpt_oss.to_rules, hf_gpt_oss.from_rules,
                            others=('GptOssModel',)),
    'llama4_text': Architecture(_llama4, hf_llama4.rules, ('Llama4ForCausalLM',),
                                hf_llama4.to_rules, hf_llama4.from_rules,
                                others=('Llama4TextModel',)),
    'llama4': Architecture(_llama4, hf_llama4.rules, ('Llama4ForConditionalGeneration',),
                           hf_llama4.to_rules, hf_llama4.from_rules),
    'qwen3_next': Architecture(_qwen3_next, hf_qwen3_next.rules, ('Qwen3NextForCausalLM',),
                               hf_qwen3_next.to_rules, hf_qwen3_next.from_rules,
                               others=('Qwen3NextModel',)),
    't5gemma': Architecture(_t5gemma, hf_gemma.t5gemma_rules,
                            ('T5GemmaForConditionalGeneration',)),
    'gemma3': Architecture(hf_gemma_vision.config, hf_gemma_vision.rules,
                           ('Gemma3ForConditionalGeneration',), hf_gemma_vision.to_rules,
                           hf_gemma_vision.from_rules),
    'siglip': Architecture(hf_siglip.config, hf_siglip.rules, ('SiglipModel',),
                           hf_siglip.to_rules, hf_siglip.from_rules),
}
HEAD_TENSORS = ('classifier.weight', 'score.weight')  # BERT's, a decoder's


def _classes(hf, arch):
  """config.json's architectures -> whether it is the classification head; a class the zoo
  does not read is a ConvertError naming it."""
  names = hf.get('architectures') or list(arch.architectures)
  known = {*arch.architectures, *arch.others, *([arch.classifier] if arch.classifier else [])}
  unknown = [n for n in names if n not in known]
  if unknown:
    raise ConvertError(f"architectures {unknown[0]!r} (model_type={hf['model_type']!r}) is not "
                       f'a head the zoo builds; it reads {", ".join(sorted(known))}')
  return bool(arch.classifier) and arch.classifier in names


def _headed(config, hf, tensors, path):
  """A ForSequenceClassification checkpoint's head in the zoo config: model.num_labels (the
  head tensor's rows), model.label_names (id2label, unless transformers' LABEL_k
  defaults), data.task.kind (regression for problem_type 'regression'). A decoder's head
  reads each row's last non-pad token: config.json must name the pad id."""
  head = next((n for n in HEAD_TENSORS if n in tensors), None)
  if head is None:
    raise ConvertError(f"{path}: {hf['architectures'][0]} without a {' or '.join(HEAD_TENSORS)} "
                       'tensor; the checkpoint lacks its head')
  if families.get(config.model).LABEL_TOKEN == 'last' and hf.get('pad_token_id') is None:
    raise ConvertError(f"{path}: config.json has no pad_token_id; {hf['architectures'][0]} "
                       "reads each row's last token that is not the pad id, so the checkpoint "
                       'must name it (set pad_token_id in config.json)')
  m, count = config.model, int(tensors[head].shape[0])
  names = [str((hf.get('id2label') or {}).get(str(k), f'LABEL_{k}')) for k in range(count)]
  m.num_labels, m.nsp_head = count, False
  m.label_names = () if names == [f'LABEL_{k}' for k in range(count)] else tuple(names)
  config.data.task.kind = ('regression' if hf.get('problem_type') == 'regression' else
                           'classification')


# ------------------------------------------------------------------------- reading

def read_config(path):
  file = os.path.join(path, 'config.json')
  if not os.path.isfile(file):
    raise ConvertError(f'{path}: no config.json; pass a Hugging Face checkpoint directory')
  with open(file, encoding='utf-8') as f:
    hf = json.load(f)
  if hf.get('model_type') not in ARCHITECTURES:
    raise ConvertError(f"{file}: model_type={hf.get('model_type')!r} is not supported; the zoo "
                       f'converts {sorted(ARCHITECTURES)}')
  return hf


def read_tensors(path):
  """All tensors of model.safetensors, or of the shards its index names, as numpy arrays."""
  if os.path.isfile(os.path.join(path, INDEX)):
    with open(os.path.join(path, INDEX), encoding='utf-8') as f:
      shards = sorted(set(json.load(f)['weight_map'].values()))
  elif os.path.isfile(os.path.join(path, SINGLE)):
    shards = [SINGLE]
  else:
    raise ConvertError(f'{path}: no {SINGLE} or {INDEX}; the zoo reads safetensors weights '
                       '(convert .bin checkpoints with transformers first)')
  tensors = {}
  for shard in shards:
    tensors.update(safetensors_np.load_file(os.path.join(path, shard)))
  return tensors


def _add_prefix(tensors, rules):
  """Files of the bare model (GPT2Model's 'h.0...', LlamaModel's 'layers.0...') lack the
  'transformer.' / 'model.' / 'bert.' prefix the rules name; add it."""
  prefix = rules[0].hf.split('.', 1)[0] + '.'
  if prefix not in ('transformer.', 'model.', 'bert.') or any(
      n.startswith(prefix) for n in tensors):
    return tensors
  return {prefix + n: w for n, w in tensors.items()}


def load(path):
  """Hugging Face checkpoint directory -> (zoo config, params). The config is complete:
  `zoo.models.build(config.model).apply({'params': params}, batch)` gives the logits (with
  a routing bias, DeepSeek-V3's: `load_variables`)."""
  config, variables = load_variables(path)
  return config, variables['params']


def load_variables(path):
  """-> (zoo config, {'params': ..., and the model's state collections the checkpoint holds:
  DeepSeek-V3's routing biases as 'moe_bias'}), what model.apply takes."""
  hf = read_config(path)
  arch = ARCHITECTURES[hf['model_type']]
  tensors = read_tensors(path)
  config = arch.config(hf, set(tensors))
  if _classes(hf, arch):
    _headed(config, hf, tensors, path)
  _validate(config)
  m = config.model
  rules = arch.rules(m)
  tensors = arch.to_rules(_add_prefix(tensors, rules), m)
  used = set()

  def take(name):
    if name not in tensors:
      raise ConvertError(f'{path}: tensor {name!r} is missing (model_type={hf["model_type"]})')
    used.add(name)
    return np.asarray(tensors[name], np.float32)

  def build(rule, names):
    if not isinstance(names, str):
      return np.stack([build(rule, n) for n in names])
    tensor = take(names)
    try:
      return rule.to_zoo(tensor)
    except ValueError:
      raise ConvertError(f'{path}: shape mismatch: tensor {names!r} {tensor.shape} does not fit '
                         f'zoo parameter {rule.zoo!r} as config.json shapes it') from None

  params = {}
  for rule in rules:
    _set(params, rule.zoo, build(rule, _names(rule, m)))
  variables = {'params': params}
  if arch.state:
    variables['moe_bias'], state_names = arch.state(tensors, m)
    used.update(state_names)
  if m.tie_embeddings:
    used.update({'lm_head.weight', 'lm_head.out_proj.weight',
                 'cls.predictions.decoder.weight', 'cls.predictions.decoder.bias'})
  for alias, target in arch.aliases:
    if alias in tensors:
      if not np.array_equal(tensors[alias], tensors[target]):
        raise ConvertError(f'{path}: tensor {alias!r} differs from {target!r}; separate '
                           'embedding tables are not built in the zoo')
      used.add(alias)
  unused = sorted(n for n in tensors if n not in used and not IGNORED.match(n))
  if unused:
    raise ConvertError(f'{path}: {len(unused)} tensors have no place in the zoo '
                       f'{hf["model_type"]} ({", ".join(unused)}); an option or head the zoo '
                       'does not build')
  _check_shapes(config, params, path)
  return config, variables


def _validate(config):
  """The config's checks (zoo/config, zoo/run), a classifier's task aside from its path
  (named at fine-tuning)."""
  checked = config.copy_and_resolve_references()
  if checked.data.task.kind:
    checked.data.task.path = 'the task named at fine-tuning'
  run_lib.resolve(config_lib.check(checked))


def _set(tree, path, value):
  *parents, leaf = path.split('/')
  for key in parents:
    tree = tree.setdefault(key, {})
  tree[leaf] = value


def _get(tree, path):
  for key in path.split('/'):
    tree = tree[key]
  return tree


def _check_shapes(config, params, path):
  """Every leaf has the shape the zoo model expects (a config/tensor mismatch otherwise)."""
  expected = dict(_flatten(nn.unbox(counting.abstract_params(config))))
  got = dict(_flatten(params))
  for name in sorted(set(expected) | set(got)):
    if name not in got:
      raise ConvertError(f'{path}: no tensor maps to the zoo parameter {name!r}')
    if name not in expected:
      raise ConvertError(f'{path}: zoo parameter {name!r} does not exist in this config')
    if tuple(got[name].shape) != tuple(expected[name].shape):
      raise ConvertError(f'{path}: shape mismatch for {name!r}: the tensors give '
                         f'{tuple(got[name].shape)}, config.json implies '
                         f'{tuple(expected[name].shape)}')


def _flatten(tree, prefix=''):
  for key, value in tree.items():
    if isinstance(value, dict):
      yield from _flatten(value, f'{prefix}{key}/')
    else:
      yield f'{prefix}{key}', value


# ------------------------------------------------------------------------- writing

GPT2_END_OF_TEXT = 50256


def _hf_config(config):
  """zoo config -> config.json for transformers."""
  m = config.model
  family = _model_type(config)
  if family == 'gpt2':
    # transformers' GPT2Config defaults BOS and EOS to GPT-2's <|endoftext|>, and warns where
    # that id lies past the vocabulary: a smaller one names none (an export sets the
    # tokenizer's, set_token_ids)
    ids = {} if m.vocab_size > GPT2_END_OF_TEXT else {'bos_token_id': None, 'eos_token_id': None}
    return {'model_type': 'gpt2', 'vocab_size': m.vocab_size, 'n_embd': m.d_model,
            'n_layer': m.num_layers, 'n_head': m.num_heads, 'n_inner': m.mlp_dim,
            'n_positions': m.max_length, 'layer_norm_epsilon': m.norm_eps,
            'activation_function': 'gelu_new', 'tie_word_embeddings': True,
            # transformers defaults them to 0.1; the zoo model trains with model.dropout_rate
            'resid_pdrop': m.dropout_rate, 'embd_pdrop': m.dropout_rate,
            'attn_pdrop': m.dropout_rate, **ids}
  if family == 'bert':
    return {'model_type': 'bert', 'vocab_size': m.vocab_size, 'hidden_size': m.d_model,
            'num_hidden_layers': m.num_layers, 'num_attention_heads': m.num_heads,
            'intermediate_size': m.mlp_dim, 'hidden_act': 'gelu',
            'max_position_embeddings': m.max_length, 'type_vocab_size': m.type_vocab_size,
            'layer_norm_eps': m.norm_eps, 'hidden_dropout_prob': m.dropout_rate,
            'attention_probs_dropout_prob': m.dropout_rate,
            'architectures': ['BertForPreTraining' if m.nsp_head else 'BertForMaskedLM']}
  if family in ('t5', 'umt5'):
    return {'model_type': family, 'vocab_size': m.vocab_size, 'd_model': m.d_model,
            'd_kv': dims.head_dim(m), 'd_ff': m.mlp_dim, 'num_layers': m.num_encoder_layers,
            'num_decoder_layers': m.num_decoder_layers, 'num_heads': m.num_heads,
            'relative_attention_num_buckets': m.relative_buckets,
            'relative_attention_max_distance': m.relative_max_distance,
            'feed_forward_proj': 'relu' if m.activation == 'relu' else 'gated-gelu',
            'tie_word_embeddings': m.tie_embeddings, 'scale_decoder_outputs': m.scale_tied_logits,
            'layer_norm_epsilon': m.norm_eps, 'dropout_rate': m.dropout_rate,
            'is_encoder_decoder': True, 'decoder_start_token_id': 0, 'pad_token_id': 0,
            'eos_token_id': 1}
  if family in ('gemma2', 'gemma3_text'):
    return hf_gemma.hf_config(config)
  if family == 'gemma3':
    return hf_gemma_vision.hf_config(config)
  if family == 't5gemma':
    return hf_gemma.t5gemma_hf_config(config)
  if family in ('deepseek_v3', 'deepseek_v32'):
    return hf_deepseek.hf_config(config)
  if family == 'gpt_oss':
    return hf_gpt_oss.hf_config(config)
  if family == 'llama4_text':
    return hf_llama4.hf_config(config)
  if family == 'qwen3_next':
    return hf_qwen3_next.hf_config(config)
  if family == 'siglip':
    return hf_siglip.hf_config(config)
  hf = {'model_type': family, 'vocab_size': m.vocab_size, 'hidden_size': m.d_model,
        'num_hidden_layers': m.num_layers, 'num_attention_heads': m.num_heads,
        'num_key_value_heads': dims.kv_heads(m), 'head_dim': dims.head_dim(m),
        'intermediate_size': m.mlp_dim, 'hidden_act': 'silu', 'rms_norm_eps': m.norm_eps,
        'rope_theta': m.rope_theta, 'max_position_embeddings': m.max_length,
        'tie_word_embeddings': m.tie_embeddings}
  if m.rope_scaling.type != 'none':  # the hub's layout: rope_scaling beside rope_theta
    hf['rope_scaling'] = rope_scaling_to_hf(m)
  if m.rope_scaling.type == 'dynamic':  # transformers grows the base past this length
    hf['max_position_embeddings'] = m.rope_scaling.original_max_length
  if family in ('mistral', 'mixtral'):
    hf['sliding_window'] = m.attention.window or None
  if family == 'mixtral':
    hf.update(num_local_experts=m.moe.num_experts, num_experts_per_tok=m.moe.top_k,
              router_aux_loss_coef=m.moe.balance_loss)
  if family == 'qwen3_moe':
    hf.update(num_experts=m.moe.num_experts, num_experts_per_tok=m.moe.top_k,
              moe_intermediate_size=m.moe.expert_mlp_dim or m.mlp_dim,
              norm_topk_prob=m.moe.normalize_top_k, router_aux_loss_coef=m.moe.balance_loss,
              decoder_sparse_step=1, mlp_only_layers=[])
  return hf


def _labels(config):
  """A classifier's config.json fields: its labels (model.label_names, else LABEL_k) and
  problem type."""
  m = config.model
  names = list(m.label_names) or [f'LABEL_{k}' for k in range(m.num_labels)]
  return {'num_labels': m.num_labels, 'id2label': {str(k): n for k, n in enumerate(names)},
          'label2id': {n: k for k, n in enumerate(names)},
          'problem_type': ('regression' if config.data.task.kind == 'regression' else
                           'single_label_classification')}


def _model_type(config):
  kind = families.get(config.model).hf_model_type(config.model)
  if kind not in ARCHITECTURES:
    raise ConvertError(f'model.family={config.model.family!r} ({kind}) has no Hugging Face '
                       'layout in the zoo yet; docs/hf.md lists the ones it converts')
  return kind


def save(config, params, path, moe_bias=None):
  """Writes a Hugging Face directory (config.json + model.safetensors) for `params` (and a
  routing bias, DeepSeek-V3's: its 'moe_bias' collection; zeros when None)."""
  params = nn.unbox(params)
  family = _model_type(config)
  arch = ARCHITECTURES[family]
  m = config.model
  own_layout = ('deepseek_v3', 'deepseek_v32', 'llama4_text', 'qwen3_next')
  if m.moe.num_experts and family not in own_layout and (
      m.moe.every != 1 or m.moe.num_shared_experts or m.moe.capacity_factor):
    raise ConvertError('save: only Mixtral-style experts (every layer, dropless, no shared '
                       'experts; gpt-oss\'s too) and DeepSeek-V3\'s have a Hugging Face layout')
  hf = _hf_config(config)
  hf.setdefault('architectures', list(arch.architectures))
  if m.num_labels:
    if not arch.classifier:
      raise ConvertError(f'save: a {family} classifier has no Hugging Face layout; the zoo '
                         'writes the heads of BERT, GPT-2, Llama and Mistral')
    hf.update(_labels(config), architectures=[arch.classifier])
  tensors = {}

  def put(rule, names, value):
    if isinstance(names, str):
      tensors[names] = np.ascontiguousarray(rule.to_hf(np.asarray(value, np.float32)))
    else:
      for n, v in zip(names, value):
        put(rule, n, v)

  for rule in arch.rules(m):
    put(rule, _names(rule, m), _get(params, rule.zoo))
  # safetensors writes an array's buffer as it lies: a joined tensor may not be C-ordered
  tensors = {k: np.ascontiguousarray(v) for k, v in arch.from_rules(tensors, m).items()}
  if arch.state_tensors:
    tensors.update(arch.state_tensors(moe_bias, m))
  for alias, target in arch.aliases:  # for loaders that keep the copies as separate modules
    tensors[alias] = tensors[target].copy()
  os.makedirs(path, exist_ok=True)
  safetensors_np.save_file(tensors, os.path.join(path, SINGLE), metadata={'format': 'pt'})
  _as_other_files(os.path.join(path, SINGLE))
  with open(os.path.join(path, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(hf, f, indent=2)


def _as_other_files(path):
  """safetensors writes its file with mode 0600 whatever the umask (docs/contracts.md, Known
  problems): give it the mode every other file gets."""
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(path, 0o666 & ~umask)


def set_token_ids(path, ids):
  """The tokenizer's special-token ids ({'eos_token_id': 3, ...}; None: the tokenizer has
  none) into path/config.json, and a generation_config.json with them, so transformers
  starts, pads and stops generating as the zoo does (T5 decodes from id 0, as the zoo)."""
  config_path = os.path.join(path, 'config.json')
  with open(config_path, encoding='utf-8') as f:
    hf = json.load(f)
  for key, value in ids.items():
    hf.pop(key, None)
    if value is not None:
      hf[key] = int(value)
  generation = {k: hf[k] for k in ('bos_token_id', 'eos_token_id', 'pad_token_id',
                                   'decoder_start_token_id') if k in hf}
  for name, content in (('config.json', hf), ('generation_config.json', generation)):
    with open(os.path.join(path, name), 'w', encoding='utf-8') as f:
      json.dump(content, f, indent=2)


# ----------------------------------------------------------------------------- CLI

_DERIVED = ('data.vocab_size', 'data.tokenizer.vocab_size')  # references to model.vocab_size


def _overrides(config):
  """The config as 'a.b=value' overrides of config.base() (derived references left out)."""
  def flat(tree, prefix=''):
    for key, value in tree.items():
      if isinstance(value, dict):
        yield from flat(value, f'{prefix}{key}.')
      else:
        yield f'{prefix}{key}', value
  base = dict(flat(config_lib.base().to_dict()))
  plain = lambda value: json.loads(json.dumps(value, default=str))  # tuples as lists
  return [f'{key}={value!r}' for key, value in flat(config.to_dict())
          if key not in _DERIVED and plain(base.get(key)) != plain(value)]


TOKENIZER_FILES = ('tokenizer.json', 'spiece.model', 'tokenizer.model')  # first found is used
# tokenizer_config.json's model_max_length at or past this is transformers' 'no limit'
MAX_SEQ_LEN = 1 << 20


def _import_tokenizer(hf_dir, workdir, config):
  """The checkpoint's tokenizer copied to workdir/tokenizer/ and named by
  data.tokenizer.path (-> its path), or None when the directory has none."""
  name = next((n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(hf_dir, n))), None)
  if name is None:
    return None
  target = storage.absolute(storage.join(workdir, 'tokenizer', name))
  storage.write_bytes(target, storage.read_bytes(os.path.join(hf_dir, name)))
  settings = os.path.join(hf_dir, 'tokenizer_config.json')
  if os.path.isfile(settings):  # split_special_tokens, model_max_length: read beside it
    storage.write_bytes(storage.join(workdir, 'tokenizer', 'tokenizer_config.json'),
                        storage.read_bytes(settings))
    length = json.loads(storage.read_text(settings)).get('model_max_length')
    with config.unlocked():
      if isinstance(length, int) and length < MAX_SEQ_LEN and not (
          config.model.position == 'learned' and length > config.model.max_length):
        config.data.seq_len = length  # the length the run was trained at (a zoo export)
  with config.unlocked():
    config.data.tokenizer.path = target
  return target


def write_workdir(hf_dir, workdir):
  """Imports `hf_dir` into `workdir`: the params (orbax, workdir/imported), the checkpoint's
  tokenizer (workdir/tokenizer/, if it has one) and workdir/config.py, whose
  train.init_params and data.tokenizer.path point at them."""
  from zoo.train import checkpoint  # pylint: disable=g-import-not-at-top
  from zoo.convert import zoo_run  # pylint: disable=g-import-not-at-top
  config, variables = load_variables(hf_dir)
  params = variables.pop('params')
  config, source = zoo_run.imported(hf_dir, config, params)
  imported = storage.absolute(storage.join(workdir, 'imported'))
  if storage.exists(imported):
    raise ConvertError(f'{imported} exists; import into a new --workdir (nothing is '
                       'overwritten)')
  storage.makedirs(workdir)
  checkpoint.save_params(imported, params, variables)  # with DeepSeek-V3's routing biases
  with config.unlocked():
    config.train.init_params = imported
  tokenizer = _import_tokenizer(hf_dir, workdir, config)
  about_tokenizer = (f'The tokenizer is the checkpoint\'s ({tokenizer}).' if tokenizer else
                     'The checkpoint has no tokenizer file; the zoo trains one on data.path.')
  lines = ',\n    '.join(repr(o) for o in _overrides(config))
  header = (f'Imported from {os.path.abspath(hf_dir)} by zoo.convert.hf; settings from '
            f'{source}.')
  storage.write_bytes(storage.join(workdir, 'config.py'), f'''"""{header}

    {next_command(config, workdir)}

trains from the imported weights (train.init_params) until the workdir has checkpoints.
{about_tokenizer}
"""

from zoo import config as config_lib

OVERRIDES = [
    {lines},
]


def get_config(arg=None):
  del arg
  config = config_lib.base()
  for override in OVERRIDES:
    config_lib.apply_override(config, override)
  return config
'''.encode())
  return config


def main(argv=None):
  import argparse  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description='Import a Hugging Face checkpoint directory.')
  parser.add_argument('--hf_dir', required=True, help='config.json + safetensors')
  parser.add_argument('--workdir', required=True, help='gets config.py and imported/')
  args = parser.parse_args(argv)
  try:
    config = write_workdir(args.hf_dir, args.workdir)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  print(f'imported {config.model.family} ({_model_type(config)}) into {args.workdir}: '
        f'config.py and imported/; next: {next_command(config, args.workdir)}')


def next_command(config, workdir):
  """The command that trains an import: a classifier's needs its task's data, which the
  checkpoint does not hold, so its command names the override and what DIR holds."""
  command = (f'python -m zoo.launch --config={os.path.join(workdir, "config.py")} '
             f'--workdir={workdir}')
  kind = config.data.task.kind
  if not kind or config.data.task.path:  # a zoo export names its task
    return command
  label = ('a number' if kind == 'regression' else f'0..{config.model.num_labels - 1}')
  line = ('"image": PATH, "text": CAPTION' if kind == 'image_text' else
          f'"text": ..., "label": {label}')
  return (f'{command} --config.data.task.path=DIR, where DIR holds train.jsonl and '
          f'eval.jsonl ({{{line}}} a line; docs/contracts.md "A task")')


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
