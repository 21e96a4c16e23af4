"""DeepSeek-V3 checkpoints (DeepseekV3ForCausalLM; DeepSeek-V3.2's DeepseekV32ForCausalLM with
each attention layer's indexer) <-> zoo: config.json fields, tensor rules and the routing
biases.

Latent attention (zoo/models/mla.py): q_a_proj / q_a_layernorm / q_b_proj (or q_proj
without a query latent), kv_a_proj_with_mqa (the latent and the rotary key), kv_a_layernorm,
kv_b_proj (the key and value up-projections of every head, one tensor: split into key_up and
value_up), o_proj. With rope_interleave (the hub's checkpoints) the rotary dims of q and of
the rotary key are stored in pairs (x0, x1), (x2, x3), ...; the zoo rotates halves, so
import takes them evens first, export puts them back. The first first_k_dense_replace layers
have a dense MLP; the others route over mlp.experts.E with mlp.gate (its
e_score_correction_bias is the zoo's 'moe_bias' state, not a parameter) and add
mlp.shared_experts.

The multi-token prediction modules (model.mtp) sit after the stack as model.layers.N,
N + 1, ... (N = num_hidden_layers; num_nextn_predict_layers of them), which
DeepseekV3ForCausalLM leaves unread and transformers' MTP loader reads: enorm, hnorm,
eh_proj (the [embedding, hidden] projection), an MoE decoder layer, shared_head.norm, and
copies of the embedding and output head (embed_tokens, shared_head.head), which import checks
against the model's own and export writes. A checkpoint without those tensors imports
without the modules.
"""

import dataclasses

import numpy as np

from zoo import config as config_lib
from zoo import presets
from zoo.convert import hf_rules
from zoo.convert.hf_rules import ConvertError

KV_UP = 'self_attn.kv_b_proj.weight'
HALVES = ('key_up', 'value_up')  # the two zoo leaves kv_b_proj splits into


def config(hf, names):
  """config.json of deepseek_v3 -> zoo config; `names` (the checkpoint's tensors) say
  whether it holds the multi-token prediction modules."""
  if hf.get('hidden_act', 'silu') != 'silu' or hf.get('attention_bias'):
    raise ConvertError('deepseek_v3 hidden_act other than silu, or attention_bias, is not built')
  if hf.get('quantization_config'):
    raise ConvertError('deepseek_v3 quantization_config: the hub\'s checkpoint is FP8 with '
                       'block scales (weight_scale_inv); convert it to bfloat16 first '
                       '(DeepSeek\'s inference/fp8_cast_bf16.py) and drop quantization_config')
  if hf.get('scoring_func', 'sigmoid') != 'sigmoid' or not hf.get('rope_interleave', True):
    raise ConvertError("deepseek_v3 scoring_func other than 'sigmoid', or rope_interleave "
                       'false, is not built (the released checkpoints are sigmoid, interleaved)')
  c = config_lib.base()
  m = c.model
  m.vocab_size, m.d_model, m.num_layers = (hf['vocab_size'], hf['hidden_size'],
                                           hf['num_hidden_layers'])
  m.num_heads, m.mlp_dim = hf['num_attention_heads'], hf['intermediate_size']
  presets.deepseek(c, max_length=hf.get('max_position_embeddings', 163_840))
  m.norm_eps = hf.get('rms_norm_eps', 1e-6)
  m.tie_embeddings = bool(hf.get('tie_word_embeddings', False))
  m.mla.update(kv_lora_rank=hf['kv_lora_rank'], q_lora_rank=hf.get('q_lora_rank') or 0,
               qk_nope_head_dim=hf['qk_nope_head_dim'],
               qk_rope_head_dim=hf['qk_rope_head_dim'], v_head_dim=hf['v_head_dim'])
  rope = {'rope_theta': hf.get('rope_theta', 10_000.0), **(hf.get('rope_parameters') or {}),
          **(hf.get('rope_scaling') or {})}
  m.rope_theta = float(rope['rope_theta'])
  hf_rules.rope_scaling_from_hf(rope, hf, m)
  moe = m.moe
  moe.num_experts, moe.top_k = hf['n_routed_experts'], hf['num_experts_per_tok']
  moe.expert_mlp_dim, moe.num_shared_experts = (hf['moe_intermediate_size'],
                                                hf.get('n_shared_experts') or 0)
  moe.router, moe.num_groups, moe.top_groups = ('sigmoid', hf.get('n_group') or 1,
                                                hf.get('topk_group') or 1)
  if moe.num_groups == 1:
    moe.num_groups = moe.top_groups = 0
  moe.normalize_top_k = bool(hf.get('norm_topk_prob', True))
  moe.routed_scale = float(hf.get('routed_scaling_factor', 1.0))
  moe.first_dense = hf.get('first_k_dense_replace', 0)
  moe.bias_update_rate, moe.balance_scope = 0.001, 'sequence'  # the report's gamma and loss
  moe.balance_loss = hf.get('aux_loss_alpha', 0.0001)
  if 'index_n_heads' in hf or hf.get('model_type') == 'deepseek_v32':  # DeepSeek-V3.2's DSA
    m.mla.update(index_heads=hf.get('index_n_heads', 64),
                 index_head_dim=hf.get('index_head_dim', 128),
                 index_top_k=hf.get('index_topk', 2048))
  first = mtp_layer(m.num_layers, 1)
  if hf.get('num_nextn_predict_layers') and any(
      n.startswith((first, first[len('model.'):])) for n in names):
    m.mtp.depth = hf['num_nextn_predict_layers']
  c.data.seq_len = 4096
  return c


def mtp_layer(num_layers, k):
  """The checkpoint's prefix of prediction module k (1-based): the layer after the stack."""
  return f'model.layers.{num_layers + k - 1}.'


COPIES = (('embed_tokens.weight', 'model.embed_tokens.weight'),
          ('shared_head.head.weight', 'lm_head.weight'))  # a module's copy, the model's own


def _rope_order(m):
  """Indices taking interleaved rotary dims to halves: 0, 2, 4, ..., 1, 3, 5, ..."""
  R = m.mla.qk_rope_head_dim
  return np.concatenate([np.arange(0, R, 2), np.arange(1, R, 2)])


def rules(m):
  """The zoo leaves: layers_dense (the first k) and layers/block_0 (the MoE layers)."""
  a, H = m.mla, m.num_heads
  N, R, V, C = a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, a.kv_lora_rank
  k = m.moe.first_dense
  moe_layers = tuple(range(k, m.num_layers))
  out = [hf_rules.rule('token_embed/embedding', 'model.embed_tokens.weight'),
         *hf_rules.norm('final_norm', 'model.norm')]
  if not m.tie_embeddings:
    out += hf_rules.dense('logits', 'lm_head')
  order = _rope_order(m)
  back = np.argsort(order)

  def query_to_zoo(w):  # [H * (N + R), in] -> [in, H, N + R], rotary dims as halves
    w = w.reshape(H, N + R, -1)
    return np.concatenate([w[:, :N], w[:, N:][:, order]], 1).transpose(2, 0, 1)

  def query_to_hf(w):
    w = w.transpose(1, 2, 0)
    return np.concatenate([w[:, :N], w[:, N:][:, back]], 1).reshape(H * (N + R), -1)
  query = (query_to_zoo, query_to_hf)

  kv_down = (lambda w: np.concatenate([w[:C], w[C:][order]]).T,
             lambda w: np.concatenate([w.T[:C], w.T[C:][back]]))

  def layer(zoo, hf, layers, dense):
    attn = f'{hf}.self_attn'
    rs = [hf_rules.rule(f'{zoo}/attention/kv_down/kernel',
                        f'{attn}.kv_a_proj_with_mqa.weight', kv_down),
          *hf_rules.norm(f'{zoo}/attention/kv_norm', f'{attn}.kv_a_layernorm'),
          *[hf_rules.rule(f'{zoo}/attention/{half}', f'{hf}.{KV_UP}.{half}')
            for half in HALVES],
          hf_rules.rule(f'{zoo}/attention/out/kernel', f'{attn}.o_proj.weight',
                        hf_rules.linear_in(H, V)),
          *hf_rules.norm(f'{zoo}/attention_norm', f'{hf}.input_layernorm'),
          *hf_rules.norm(f'{zoo}/mlp_norm', f'{hf}.post_attention_layernorm')]
    if a.q_lora_rank:
      rs += [*hf_rules.dense(f'{zoo}/attention/query_down', f'{attn}.q_a_proj'),
             *hf_rules.norm(f'{zoo}/attention/query_norm', f'{attn}.q_a_layernorm'),
             hf_rules.rule(f'{zoo}/attention/query_up/kernel', f'{attn}.q_b_proj.weight',
                           query)]
    else:
      rs.append(hf_rules.rule(f'{zoo}/attention/query/kernel', f'{attn}.q_proj.weight',
                              query))
    if a.index_heads:
      rs += indexer_rules(f'{zoo}/attention/indexer', f'{attn}.indexer', m)
    mlp = f'{hf}.mlp'
    if dense:
      rs += [r for zoo_name, name in (('wi_0', 'gate_proj'), ('wi_1', 'up_proj'),
                                      ('wo', 'down_proj'))
             for r in hf_rules.dense(f'{zoo}/mlp/{zoo_name}', f'{mlp}.{name}')]
    else:
      transpose = (lambda w: w.T, lambda w: w.T)
      rs += [hf_rules.rule(f'{zoo}/moe/router', f'{mlp}.gate.weight', transpose)]
      rs += [hf_rules.rule(f'{zoo}/moe/{zoo_name}', f'{mlp}.experts.{{e}}.{name}.weight',
                           transpose)
             for zoo_name, name in (('wi_0', 'gate_proj'), ('wi_1', 'up_proj'),
                                    ('wo', 'down_proj'))]
      if m.moe.num_shared_experts:
        rs += [r for zoo_name, name in (('wi_0', 'gate_proj'), ('wi_1', 'up_proj'),
                                        ('wo', 'down_proj'))
               for r in hf_rules.dense(f'{zoo}/moe/shared/{zoo_name}',
                                       f'{mlp}.shared_experts.{name}')]
    return [dataclasses.replace(r, layers=layers) for r in rs]

  if k:
    out += layer('layers_dense', 'model.layers.{i}', tuple(range(k)), dense=True)
  out += layer('layers/block_0', 'model.layers.{i}', moe_layers, dense=False)
  transpose = (lambda w: w.T, lambda w: w.T)
  for depth in range(1, m.mtp.depth + 1):
    hf = mtp_layer(m.num_layers, depth)[:-1]
    out += [*hf_rules.norm(f'mtp/embed_norm_{depth}', f'{hf}.enorm'),
            *hf_rules.norm(f'mtp/hidden_norm_{depth}', f'{hf}.hnorm'),
            hf_rules.rule(f'mtp/projection_{depth}/kernel', f'{hf}.eh_proj.weight', transpose),
            *hf_rules.norm(f'mtp/final_norm_{depth}', f'{hf}.shared_head.norm'),
            *layer(f'mtp/block_{depth}', hf, (), dense=False)]
  return out


def indexer_rules(zoo, hf, m):
  """DeepSeek-V3.2's lightning indexer (zoo/models/indexer.py): wq_b [I * J, Q], wk, the
  key's LayerNorm k_norm, weights_proj."""
  I, J = m.mla.index_heads, m.mla.index_head_dim
  query = (lambda w: w.T.reshape(-1, I, J), lambda w: w.reshape(w.shape[0], -1).T)
  return [hf_rules.rule(f'{zoo}/query/kernel', f'{hf}.wq_b.weight', query),
          *hf_rules.dense(f'{zoo}/key', f'{hf}.wk'),
          *hf_rules.norm(f'{zoo}/key_norm', f'{hf}.k_norm', bias=True),
          *hf_rules.dense(f'{zoo}/weights', f'{hf}.weights_proj')]


def to_rules(tensors, m):
  """The checkpoint's tensors as the rules name them: kv_b_proj split (split_kv_up), the
  prediction modules' copies of the embedding and head checked and set aside."""
  tensors = dict(tensors)
  if m.mla.index_heads:
    for i in range(m.num_layers):
      for hf_name in ('wq_b.weight', 'wk.weight', 'k_norm.weight', 'weights_proj.weight'):
        if f'model.layers.{i}.self_attn.indexer.{hf_name}' not in tensors:
          raise ConvertError(f"tensor 'model.layers.{i}.self_attn.indexer.{hf_name}' is "
                             'missing: deepseek_v32 reads each layer\'s indexer (a DeepSeek-V3 '
                             "checkpoint imports as model_type 'deepseek_v3', without "
                             'index_n_heads)')
  for depth in range(1, m.mtp.depth + 1):
    for copy, own in COPIES:
      name = mtp_layer(m.num_layers, depth) + copy
      if name in tensors and not (m.tie_embeddings and own == 'lm_head.weight'):
        if not np.array_equal(tensors.pop(name), tensors[own]):
          raise ConvertError(f'tensor {name!r} differs from {own!r}; the prediction modules '
                             'share the model\'s embedding and output head in the zoo')
  return split_kv_up(tensors, m)


def from_rules(tensors, m):
  """The inverse of to_rules: kv_b_proj joined, each prediction module's copies written."""
  tensors = join_kv_up(tensors, m)
  own = {**tensors, 'lm_head.weight': tensors.get('lm_head.weight',
                                                  tensors['model.embed_tokens.weight'])}
  for depth in range(1, m.mtp.depth + 1):
    for copy, name in COPIES:
      tensors[mtp_layer(m.num_layers, depth) + copy] = own[name].copy()
  return tensors


def split_kv_up(tensors, m):
  """kv_b_proj [H * (N + V), C] -> its key_up [C, H, N] and value_up [C, H, V]."""
  a, H = m.mla, m.num_heads
  N = a.qk_nope_head_dim
  out = {}
  for name, w in tensors.items():
    if name.endswith(KV_UP):
      w = np.asarray(w).reshape(H, N + a.v_head_dim, -1)
      out[f'{name}.key_up'] = w[:, :N].transpose(2, 0, 1)
      out[f'{name}.value_up'] = w[:, N:].transpose(2, 0, 1)
    else:
      out[name] = w
  return out


def join_kv_up(tensors, m):
  """The inverse of split_kv_up."""
  out = {}
  for name, w in tensors.items():
    if name.endswith(f'{KV_UP}.key_up'):
      base = name[:-len('.key_up')]
      value = tensors[f'{base}.value_up']
      out[base] = np.concatenate([w.transpose(1, 2, 0), value.transpose(1, 2, 0)],
                                 1).reshape(m.num_heads * (w.shape[2] + value.shape[2]), -1)
    elif not name.endswith(f'{KV_UP}.value_up'):
      out[name] = w
  return out


def routing_bias(tensors, m):
  """Each MoE layer's e_score_correction_bias -> the 'moe_bias' collection (stacked)."""
  layers = range(m.moe.first_dense, m.num_layers)
  name = 'model.layers.{i}.mlp.gate.e_score_correction_bias'
  missing = [name.format(i=i) for i in layers if name.format(i=i) not in tensors]
  if missing:
    raise ConvertError(f'tensor {missing[0]!r} is missing (deepseek_v3 routes with it)')
  bias = np.stack([np.asarray(tensors[name.format(i=i)], np.float32) for i in layers])
  collection = {'layers': {'block_0': {'moe': {'bias': bias}}}}
  used = {name.format(i=i) for i in layers}
  for depth in range(1, m.mtp.depth + 1):
    at = mtp_layer(m.num_layers, depth) + 'mlp.gate.e_score_correction_bias'
    if at not in tensors:
      raise ConvertError(f'tensor {at!r} is missing (deepseek_v3 routes with it)')
    collection.setdefault('mtp', {})[f'block_{depth}'] = {
        'moe': {'bias': np.asarray(tensors[at], np.float32)}}
    used.add(at)
  return collection, used


def routing_bias_tensors(moe_bias, m):
  """The 'moe_bias' collection (None: zeros, a model trained without the loss-free bias)
  -> each layer's e_score_correction_bias (save)."""
  name = 'mlp.gate.e_score_correction_bias'
  modules = [mtp_layer(m.num_layers, k) for k in range(1, m.mtp.depth + 1)]
  if moe_bias is None:
    zeros = np.zeros(m.moe.num_experts, np.float32)
    return {**{f'model.layers.{i}.{name}': zeros for i in range(m.moe.first_dense,
                                                                 m.num_layers)},
            **{f'{at}{name}': zeros for at in modules}}
  bias = np.asarray(moe_bias['layers']['block_0']['moe']['bias'], np.float32)
  out = {f'model.layers.{i}.{name}': bias[j]
         for j, i in enumerate(range(m.moe.first_dense, m.num_layers))}
  for k, at in enumerate(modules, 1):
    out[f'{at}{name}'] = np.asarray(moe_bias['mtp'][f'block_{k}']['moe']['bias'], np.float32)
  return out


def hf_config(config):
  """zoo config -> config.json of DeepseekV3ForCausalLM."""
  m = config.model
  a, moe = m.mla, m.moe
  if moe.router != 'sigmoid' or not moe.num_experts:
    raise ConvertError("save: DeepseekV3ForCausalLM routes by sigmoid affinities over experts; "
                       f"model.moe.router={moe.router!r} (DeepSeek-V2's softmax) has no "
                       'layout here')
  rope = {'rope_type': 'default', 'rope_theta': m.rope_theta,
          **hf_rules.rope_scaling_to_hf(m)}
  hf = {'model_type': 'deepseek_v3', 'vocab_size': m.vocab_size, 'hidden_size': m.d_model,
          'intermediate_size': m.mlp_dim, 'moe_intermediate_size': moe.expert_mlp_dim,
          'num_hidden_layers': m.num_layers, 'num_attention_heads': m.num_heads,
          'num_key_value_heads': m.num_heads, 'n_shared_experts': moe.num_shared_experts,
          'n_routed_experts': moe.num_experts, 'routed_scaling_factor': moe.routed_scale,
          'kv_lora_rank': a.kv_lora_rank, 'q_lora_rank': a.q_lora_rank or None,
          'qk_rope_head_dim': a.qk_rope_head_dim, 'v_head_dim': a.v_head_dim,
          'qk_nope_head_dim': a.qk_nope_head_dim, 'n_group': moe.num_groups or 1,
          'topk_group': moe.top_groups or 1, 'num_experts_per_tok': moe.top_k,
          'first_k_dense_replace': moe.first_dense, 'norm_topk_prob': moe.normalize_top_k,
          'hidden_act': 'silu', 'max_position_embeddings': m.max_length,
          'rms_norm_eps': m.norm_eps, 'rope_interleave': True, 'rope_parameters': rope,
          'attention_bias': False, 'tie_word_embeddings': m.tie_embeddings,
          'num_nextn_predict_layers': m.mtp.depth}
  if a.index_heads:  # DeepSeek-V3.2: its class rotates MLA's pairs always (no rope_interleave)
    del hf['rope_interleave']
    hf.update(model_type='deepseek_v32', index_n_heads=a.index_heads,
              index_head_dim=a.index_head_dim, index_topk=a.index_top_k)
  return hf
