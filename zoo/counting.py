"""Parameter and FLOP counting by one written convention, for the training loop (MFU) and
plan mode alike; built from shapes (`jax.eval_shape`), so nothing is allocated.

FLOPs convention (training, per token): 6 * N_matmul + 6 * layers * seq_len * H * K, where
N_matmul is every parameter a token uses but the input embedding tables (a gather, not a
matmul; a tied table counts once, as the output head), routed experts counting top_k /
num_experts of themselves, and the attention term counts causal attention as half of the
full 12 * layers * seq_len * H * K; a layer with a sliding window W < seq_len (Mistral's,
Gemma's local layers) counts its mean keys per query, W - W (W - 1) / (2 seq_len), in place
of seq_len / 2; multi-token prediction's modules (model.mtp) count their blocks as layers
and the shared output head once more each. Remat recompute is not counted (MFU, not HFU);
remat_flops_per_token counts it apart (what a compiler reports is the sum).
"""

import flax.linen as nn
import jax
import numpy as np

from zoo import families
from zoo.models import dims
from zoo.models import transformer

CONVENTION = '6*N_matmul + 6*layers*seq_len*heads*head_dim (causal half)'


def param_count(params):
  return sum(x.size for x in jax.tree.leaves(params))


def abstract_params(config):
  """Boxed abstract params (shapes, dtypes and logical axis names; no memory). The shapes
  are the attention kernel's whatever it is, so they are traced with XLA's: a config for a
  GPU or TPU kernel plans on any machine."""
  m = config.model.copy_and_resolve_references()
  m.attention.kernel = 'xla'
  model = families.build(m, config.train.lora)
  batch = families.example_batch(config.model, 1, config.data.seq_len)
  return jax.eval_shape(model.init, jax.random.PRNGKey(0), batch)['params']


def active_params(boxed, moe):
  """Parameters a token uses: routed expert weights count top_k / num_experts of
  themselves; everything else (embeddings, attention, router, shared experts) counts whole."""
  if not moe.num_experts:
    return param_count(nn.unbox(boxed))
  active = 0.0
  for leaf in jax.tree.leaves(boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned)):
    size = int(np.prod(nn.unbox(leaf).shape))
    routed = isinstance(leaf, nn.Partitioned) and 'expert' in leaf.names
    active += size * moe.top_k / moe.num_experts if routed else size
  return int(round(active))


def _matmul_params(config, num_active):
  """N_matmul of the convention: active parameters less the input embedding tables."""
  m = config.model
  n = num_active
  if not m.tie_embeddings or m.num_labels:  # a label head reads no vocabulary table
    n -= m.vocab_size * m.d_model
  if m.position == 'learned':
    n -= m.max_length * m.d_model
  return n


def _attention_flops(config):
  """6 x seq_len x H x K a layer (12 x its mean keys per query, L/2 causal), a layer
  with a sliding window W < L its mean keys W - W(W - 1) / 2L in place of L/2."""
  m, L = config.model, config.data.seq_len
  layers = families.total_layers(m) + m.mtp.depth  # a prediction module's block is a layer
  W = m.attention.window
  local = 0
  if 0 < W < L:  # a prediction module's block keeps the window
    local = (sum(transformer.layer_kind(m, i) == 'local' for i in range(m.num_layers)) +
             m.mtp.depth if m.attention.pattern else layers)
  per_key = 12 * m.num_heads * dims.head_dim(m)
  if m.mla.kv_lora_rank:  # latent attention: q.k over N + R dims, p.v over V
    per_key = 6 * m.num_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim +
                                 m.mla.v_head_dim)
  return round(per_key * ((layers - local) * L / 2 + local * (W - W * (W - 1) / (2 * L))))


def flops_per_token(config, num_active=None):
  """Training FLOPs per token by the convention in this module's docstring;
  `num_active`: the active parameter count, if already known."""
  if num_active is None:
    num_active = active_params(abstract_params(config), config.model.moe)
  head = config.model.mtp.depth * config.model.vocab_size * config.model.d_model
  return 6 * (_matmul_params(config, num_active) + head) + _attention_flops(config)


def quantized_flops_per_token(config, num_active=None):
  """The share of flops_per_token + remat_flops_per_token that model.quant runs quantized
  (the blocks' dense, attention-projection and expert matmuls: N_matmul less the output
  head, forward, backward and recomputed); 0 without quantization."""
  m = config.model
  if m.quant.mode == 'none':
    return 0
  if num_active is None:
    num_active = active_params(abstract_params(config), m.moe)
  head = 0 if m.num_labels else m.vocab_size * m.d_model
  blocks = _matmul_params(config, num_active) - head
  return (6 + (2 if m.remat == 'full' else 0)) * blocks


def mtp_params(boxed):
  """Parameters of the multi-token prediction modules (model.mtp), apart from the stack."""
  return param_count(nn.unbox(boxed).get('mtp', {}))


def attention_flops_per_token(config):
  """The attention's share of flops_per_token plus what the remat policy recomputes of it
  (the batched matmuls a fused attention kernel runs)."""
  recomputed = config.model.remat in ('full', 'dots_no_batch')
  return _attention_flops(config) * (4 if recomputed else 3) // 3


def remat_flops_per_token(config, num_active=None):
  """FLOPs per token the backward pass spends recomputing the forward, by model.remat
  (hardware FLOPs = flops_per_token + this): 'full' recomputes every block's forward, 2 x
  (N_matmul less the output head) + the attention's forward third; 'dots_no_batch' keeps
  the projections and recomputes the attention's batched matmuls (that third); 'dots' and
  'none' recompute no matmul."""
  m = config.model
  if m.remat in ('none', 'dots'):
    return 0
  attention_forward = _attention_flops(config) // 3
  if m.remat == 'dots_no_batch':
    return attention_forward
  if num_active is None:
    num_active = active_params(abstract_params(config), m.moe)
  head = 0 if m.num_labels else m.vocab_size * m.d_model
  return 2 * (_matmul_params(config, num_active) - head) + attention_forward
