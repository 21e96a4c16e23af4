"""Parameter and FLOP counting by one written convention, for the training loop (MFU) and
plan mode alike; built from shapes (`jax.eval_shape`), so nothing is allocated.

FLOPs convention (training, per token of data.seq_len): 6 * N_matmul + 12 * H * K * (the
keys each layer's queries see). N_matmul is every parameter a token uses but the input
embedding tables (a gather, not a matmul; a tied table counts once, as the output head),
routed experts counting top_k / num_experts of themselves; in an encoder-decoder the
decoder's parameters and the head count target_seq_len / seq_len of themselves (they run on
the T target tokens), the encoder's and the cross-attention's key and value projections
(over the encoder output) whole. Keys per query: causal attention counts seq_len / 2 (half
of the full square), bidirectional attention (an encoder's) seq_len, a local layer its
window's mean (causal: W - W (W - 1) / (2 seq_len); two-sided, T5Gemma's encoder: 2 W + 1 -
W (W + 1) / seq_len), a chunked layer (Llama 4) half its chunk C < seq_len (C / 2),
cross-attention all S input tokens for each of the T target
queries (over S). Two towers (image_text) count per image token of data.seq_len = S: the
text tower's parameters at T / S of themselves (T = data.text_len), each tower's attention
over its own tokens. A decoder's image tower (model.multimodal) counts
apart, per image its rows hold (_image_flops). Multi-token prediction's modules (model.mtp)
count their blocks as layers
and the shared output head once more each. Remat recompute is not counted (MFU, not HFU);
remat_flops_per_token counts it apart (what a compiler reports is the sum).
"""

import flax.linen as nn
import jax
import numpy as np

from zoo import families
from zoo.models import dims
from zoo.models import transformer

CONVENTIONS = {  # by the family's ATTENTION; a decoder's words name its layers' kinds
    'causal': '6*N_matmul + 12*heads*head_dim*keys per query: ',
    'bidirectional': '6*N_matmul + 12*heads*head_dim*seq_len: bidirectional',
    'cross': '6*N_matmul, the decoder and head at target/input tokens + '
                       '12*heads*head_dim*keys: encoder bidirectional, decoder causal, '
                       'cross-attention over the inputs; per input token',
    'two_towers': '6*N_matmul, the text tower at text/image tokens + 12*heads*head_dim*keys: '
                  'each tower bidirectional over its own tokens; per image token'}


def convention(config):
  """The FLOPs convention in words, naming only the kinds of attention layer the model
  has (a decoder's: causal, local, chunked, Gated DeltaNet)."""
  m = config.model
  text = CONVENTIONS[families.get(m).ATTENTION]
  if families.get(m).ATTENTION != 'causal':
    return text
  W, C = m.attention.window, m.attention.chunk
  kinds = ({transformer.layer_kind(m, i) for i in range(m.num_layers)} if m.attention.pattern
           else {'local' if W else 'chunked' if C else 'global'})
  kinds = {'global' if k == 'nope' else k for k in kinds}  # Llama 4's NoPE layers: causal
  words = {'global': 'seq_len/2 causal', 'local': "a window's mean where local",
           'chunked': 'chunk/2 where chunked'}
  text += ', '.join(words[k] for k in ('global', 'local', 'chunked') if k in kinds)
  if 'delta' in kinds:
    text += "; + the delta rule's chunk matmuls on Gated DeltaNet layers"
  if m.mla.kv_lora_rank and m.mla.index_heads:
    text = ("6*N_matmul + DeepSeek Sparse Attention's 6*heads*(2*latent+rotary) per kept key "
            "and its indexer's 6*index_heads*index_head_dim per earlier key (seq_len/2)")
  return text


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


def _matmul_params(config, boxed):
  """(N_matmul of the convention, the output head's part of it): active parameters less the
  input embedding tables, each weighted by the tokens it sees per token of data.seq_len.
  That weight is 1 but in an encoder-decoder, whose encoder (and the cross-attention's key
  and value projections, over the encoder output) sees the S = data.seq_len input tokens
  and the rest of the decoder and the head the T = data.target_seq_len targets: T / S."""
  m = config.model
  head = 0 if m.num_labels else m.vocab_size * m.d_model
  if families.get(m).ATTENTION == 'two_towers':
    return _two_tower_params(config, boxed), 0
  if families.get(m).ATTENTION != 'cross':
    n = active_params(boxed, m.moe)
    # a token table is a gather (unless tied: then it is the head too, but a label head
    # reads no vocabulary); position and type tables and a class token are added
    if 'token_embed' in boxed and (not m.tie_embeddings or m.num_labels):
      n -= m.vocab_size * m.d_model
    for path, leaf in jax.tree_util.tree_flatten_with_path(nn.unbox(boxed))[0]:
      if path[0].key == 'vision':  # a decoder's tower counts per image (_image_flops)
        n -= leaf.size
      elif {k.key for k in path} & {'position_embed', 'type_embed', 'class_token'}:
        n -= leaf.size
    return n, head
  targets = config.data.target_seq_len / config.data.seq_len
  n = 0.0
  for path, leaf in jax.tree_util.tree_flatten_with_path(nn.unbox(boxed))[0]:
    names = [k.key for k in path]
    if names[0] in ('token_embed', 'encoder_embed'):  # gathers; a tied table is the head
      weight = targets if names[0] == 'token_embed' and m.tie_embeddings else 0
    elif names[0] == 'encoder' or ('cross_attention' in names and names[-2] in ('key', 'value')):
      weight = 1
    else:  # the decoder's own, and an untied head
      weight = targets
    n += leaf.size * weight
  return n, head * targets


def _two_tower_params(config, boxed):
  """N_matmul of two towers per image token: the tables (token, position, class token) are
  gathers or adds and the temperature and bias scalars; the text tower's other parameters
  see T / S of the tokens."""
  text = config.data.text_len / config.data.seq_len
  n = 0.0
  for path, leaf in jax.tree_util.tree_flatten_with_path(nn.unbox(boxed))[0]:
    names = {k.key for k in path}
    if path[0].key in ('vision', 'text') and not names & {'token_embed', 'position_embed',
                                                          'class_token'}:
      n += leaf.size * (text if path[0].key == 'text' else 1)
  return n


def _mean_keys(m, length, layers, causal, extra_local=0):
  """A stack's keys per query summed over its `layers` layers: causal attention counts
  length / 2 (the convention's half), bidirectional attention length; a local layer's
  window W < length its mean, W - W (W - 1) / (2 length) causal (query i sees min(i + 1, W)
  keys), 2 W + 1 - W (W + 1) / length two-sided (|q - k| <= W); a chunked layer's chunk
  C < length C / 2 (Llama 4: the half of each chunk's square); `extra_local`: blocks
  beyond the pattern that keep the window (multi-token prediction's)."""
  W, C = m.attention.window, m.attention.chunk
  count = lambda kind: (sum(transformer.layer_kind(m, i) == kind for i in range(layers))
                        if m.attention.pattern else layers)
  local = count('local') + extra_local if 0 < W < length else 0
  chunked = count('chunked') if 0 < C < length else 0
  total = layers + extra_local - (count('delta') if m.attention.pattern else 0)
  if causal:
    return ((total - local - chunked) * length / 2 + local * (W - W * (W - 1) / (2 * length)) +
            chunked * C / 2)
  return (total - local) * length + local * (2 * W + 1 - W * (W + 1) / length)


def _delta_flops(m, length):
  """Per token, the Gated DeltaNet layers' mixing (zoo/kernels/delta.py, chunks of C =
  min(model.delta.chunk, length)), forward and backward (x 3) of its multiply-adds (x 2)
  per value head: the chunk's k.k, q.k, the solve's right sides (J + K) and attend.u over C
  keys, reading the state twice and writing it (3 K J), and the blocked inverse (about
  2 C^2 / 3); its projections are parameters (6 N)."""
  layers = families.decoder.delta_layers(m)
  d = m.delta
  C, K, J = min(d.chunk, length), d.key_dim, d.value_dim
  per_head = C * (3 * K + 2 * J) + 3 * K * J + 2 * C * C / 3
  return 6 * layers * d.value_heads * per_head


def _sparse_flops(m, length):
  """Per token, DeepSeek Sparse Attention's layers (model.mla.index_*, zoo/kernels/sparse.py),
  forward and backward (x 3) of their multiply-adds (x 2): the absorbed attention's q.k over
  C + R and p.v over C for each kept key (a causal query keeps min(i + 1, T) of T: a
  window's mean; the warm-up every earlier key, length / 2), and the indexer's scores, I x J
  for every earlier key."""
  a = m.mla
  T, visible = a.index_top_k, length / 2
  kept = (visible if a.index_stage == 'warmup' or T >= length else
          T - T * (T - 1) / (2 * length))
  per_kept = m.num_heads * (2 * a.kv_lora_rank + a.qk_rope_head_dim)
  return 6 * (m.num_layers + m.mtp.depth) * (per_kept * kept +
                                              a.index_heads * a.index_head_dim * visible)


def _attention_flops(config):
  """Per token of data.seq_len: 12 x H x K (q.k and p.v, forward and backward; latent
  attention's dims for DeepSeek-V3) x the keys its queries see, layer by layer: a decoder's
  causal (windowed where local), an encoder's bidirectional, an encoder-decoder's S-token
  encoder (two-sided windows where local) plus, per T-token decoder row, its causal
  self-attention and its cross-attention over all S input tokens, over S. DeepSeek Sparse
  Attention: _sparse_flops."""
  m, L = config.model, config.data.seq_len
  per_key = 12 * m.num_heads * dims.head_dim(m)
  if m.mla.kv_lora_rank:  # latent attention: q.k over N + R dims, p.v over V
    per_key = 6 * m.num_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim +
                                 m.mla.v_head_dim)
  kind = families.get(m).ATTENTION
  if kind == 'causal' and m.mla.kv_lora_rank and m.mla.index_heads:
    return round(_sparse_flops(m, L))
  if kind == 'causal':  # a prediction module's block is a layer, with the window
    return round(per_key * _mean_keys(m, L, m.num_layers, True, m.mtp.depth) +
                 _delta_flops(m, L))
  if kind == 'bidirectional':
    return round(per_key * _mean_keys(m, L, m.num_layers, False))
  if kind == 'two_towers':
    T = config.data.text_len
    return round(per_key * (L * L + T * T) * m.num_layers / L)
  S, T = L, config.data.target_seq_len
  keys = (S * _mean_keys(m, S, m.num_encoder_layers, False) +
          T * _mean_keys(m, T, m.num_decoder_layers, True) + T * m.num_decoder_layers * S)
  return round(per_key * keys / S)


def flops_per_token(config, boxed=None):
  """Training FLOPs per token of data.seq_len by the convention in this module's docstring;
  `boxed`: abstract_params(config), if already made."""
  boxed = abstract_params(config) if boxed is None else boxed
  mtp_heads = config.model.mtp.depth * config.model.vocab_size * config.model.d_model
  return (round(6 * (_matmul_params(config, boxed)[0] + mtp_heads)) + _attention_flops(config)
          + _image_flops(config, boxed))


def _image_flops(config, boxed):
  """Per token of data.seq_len, a decoder's tower over the image each row of an image_text
  task holds (image_counts); 0 where rows hold no image (text)."""
  counts = image_counts(config, boxed)
  if counts is None or config.data.task.kind != 'image_text':
    return 0
  return round(counts['flops_per_image'] / config.data.seq_len)


def image_counts(config, boxed):
  """A decoder's image tower (model.multimodal) apart: {'params': the tower, its norm and
  projection, 'flops_per_image': 6 x its matmul parameters (the position table is added) x
  the image's P patches, its bidirectional attention over them, and 6 x the projection x
  the image's tokens}; None for a decoder without images, or another family."""
  vision = nn.unbox(boxed).get('vision') if families.get(config.model).ATTENTION == 'causal' \
      else None
  if vision is None:
    return None
  mm, v = config.model.multimodal, config.model.vision
  P = (v.image_size // v.patch_size) ** 2
  tower = param_count(vision['tower']) - P * mm.d_model  # less the position table
  return {'params': param_count(vision),
          'flops_per_image': (6 * (tower * P + param_count(vision['projection']) *
                                   mm.tokens_per_image) +
                              12 * mm.d_model * P * P * mm.num_layers)}


def quantized_flops_per_token(config, boxed=None):
  """The share of flops_per_token + remat_flops_per_token that model.quant runs quantized
  (the blocks' dense, attention-projection and expert matmuls: N_matmul less the output
  head, forward, backward and recomputed); 0 without quantization."""
  m = config.model
  if m.quant.mode == 'none':
    return 0
  n, head = _matmul_params(config, abstract_params(config) if boxed is None else boxed)
  return round((6 + (2 if m.remat == 'full' else 0)) * (n - head))


def mtp_params(boxed):
  """Parameters of the multi-token prediction modules (model.mtp), apart from the stack."""
  return param_count(nn.unbox(boxed).get('mtp', {}))


def attention_flops_per_token(config):
  """The attention's share of flops_per_token plus what the remat policy recomputes of it
  (the batched matmuls a fused attention kernel runs)."""
  recomputed = config.model.remat in ('full', 'dots_no_batch')
  return _attention_flops(config) * (4 if recomputed else 3) // 3


def remat_flops_per_token(config, boxed=None):
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
  n, head = _matmul_params(config, abstract_params(config) if boxed is None else boxed)
  return round(2 * (n - head)) + attention_forward
