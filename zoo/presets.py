"""Architecture switches shared by the published families, and the smoke shrink.

Presets set how a family computes (norms, activations, positions, biases, tying), never
its shape: d_model, layers, heads and widths stay in the config files, beside their source.
"""

from zoo import families


def gpt2(c, max_length=1024):
  """GPT-2 / GPT-3 (Radford et al. 2019; Brown et al. 2020): pre-LayerNorm, GELU (tanh),
  learned positions, biases everywhere, tied 50257-token embeddings, N(0, 0.02) init with
  residual projections scaled by 1/sqrt(2 layers)."""
  m = c.model
  m.family, m.vocab_size, m.max_length = 'decoder', 50257, max_length
  m.activation, m.norm, m.norm_eps, m.norm_position = 'gelu_tanh', 'layernorm', 1e-5, 'pre'
  m.position, m.use_bias, m.tie_embeddings = 'learned', True, True
  m.embed_init_std, m.kernel_init_std, m.scale_residual_init = 0.02, 0.02, True
  m.num_kv_heads = 0
  m.dtype = 'bfloat16'  # compute; params stay float32
  c.data.seq_len = max_length
  return c


def llama(c, rope_theta, max_length, norm_eps=1e-5):
  """Llama / Mistral: pre-RMSNorm, SwiGLU, RoPE, GQA, no biases, untied head."""
  m = c.model
  m.family, m.max_length, m.rope_theta = 'decoder', max_length, rope_theta
  m.activation, m.norm, m.norm_eps, m.norm_position = 'swiglu', 'rmsnorm', norm_eps, 'pre'
  m.position, m.use_bias, m.tie_embeddings = 'rope', False, False
  m.embed_init_std, m.kernel_init_std = 0.02, 0.02
  m.dtype = 'bfloat16'  # compute; params stay float32
  c.data.seq_len = min(max_length, 4096)
  return c


def deepseek(c, max_length=163_840):
  """DeepSeek-V2/V3 (the models' config.json): Llama's block with multi-head latent
  attention (rotary key 64 dims, no-position 128, values 128, latent 512), YaRN x40 over a
  4,096-token original context, dropless fine-grained experts beside shared ones, the first
  layers dense, RMSNorm eps 1e-6."""
  llama(c, rope_theta=10_000.0, max_length=max_length, norm_eps=1e-6)
  m = c.model
  m.mla.update(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
  m.rope_scaling.update(type='yarn', factor=40.0, original_max_length=4096, beta_fast=32.0,
                        beta_slow=1.0)
  m.moe.capacity_factor, m.moe.every, m.moe.z_loss = 0.0, 1, 0.0
  return c


def gpt_oss(c):
  """gpt-oss (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card"; the models' config.json
  and transformers' GptOss): Llama's pre-RMSNorm block (eps 1e-5) with 64 query heads of 64
  sharing 8, biases on the attention projections, a learned sink logit per head, layers
  alternating a 128-token sliding window and full attention (the window first), YaRN x32
  over a 4,096-token original context (RoPE base 150,000, not truncated) on every layer,
  and in every layer a dropless MoE of clamped-SwiGLU experts (limit 7, alpha 1.702) with
  biases, top-4 of a biased router's softmax, renormalised; a 201,088-token vocabulary
  (o200k_harmony), untied, a 131,072-token context."""
  llama(c, rope_theta=150_000.0, max_length=131_072, norm_eps=1e-5)
  m = c.model
  m.vocab_size, m.d_model, m.num_heads, m.num_kv_heads, m.head_dim = 201_088, 2880, 64, 8, 64
  m.activation, m.swiglu_limit, m.swiglu_alpha = 'clamped_swiglu', 7.0, 1.702
  m.rope_scaling.update(type='yarn', factor=32.0, original_max_length=4096, beta_fast=32.0,
                        beta_slow=1.0, truncate=False)
  a = m.attention
  a.pattern, a.window, a.sinks, a.use_bias = 'LG', 128, True, True
  o = m.moe
  o.top_k, o.every, o.expert_mlp_dim, o.use_bias = 4, 1, 2880, True
  o.normalize_top_k, o.capacity_factor, o.router = True, 0.0, 'softmax'
  return c


def llama4(c, max_length):
  """Llama 4 (Meta 2025, the Llama 4 model cards; the models' config.json and transformers'
  Llama4): Llama's pre-RMSNorm block (eps 1e-5), 40 query heads of 128 sharing 8, RoPE base
  500,000 on three layers of four, which attend their own 8,192-token chunk, and every
  fourth layer global without RoPE (NoPE) with its temperature tuning (floor 8,192, scale
  0.1); dropless top-1 experts of width 8,192 gated by the sigmoid of the router's logit,
  the gate scaling the token going in, beside one shared expert of the same width; dense
  MLPs of width 16,384; a 202,048-token vocabulary, untied."""
  llama(c, rope_theta=500_000.0, max_length=max_length, norm_eps=1e-5)
  m = c.model
  m.vocab_size, m.d_model, m.num_heads, m.num_kv_heads, m.head_dim = 202_048, 5120, 40, 8, 128
  m.mlp_dim = 16_384  # intermediate_size_mlp: the dense layers'
  a = m.attention
  a.pattern, a.chunk, a.nope_scale, a.nope_floor = 'CCCN', 8192, 0.1, 8192
  o = m.moe
  o.top_k, o.router, o.normalize_top_k, o.gate_input = 1, 'sigmoid', False, True
  o.expert_mlp_dim, o.num_shared_experts, o.capacity_factor = 8192, 1, 0.0
  o.balance_loss, o.z_loss = 0.001, 0.0  # config.json router_aux_loss_coef
  return c


def gemma(c, version, max_length):
  """Gemma 2 / 3 (Gemma Team 2024, 2025; the models' config.json): pre- and post-RMSNorm
  around each sublayer (eps 1e-6), GeGLU (tanh GELU), RoPE, no biases, embeddings x
  sqrt(d_model) and tied to the output; version 3 adds QK-norm."""
  m = c.model
  m.family, m.max_length, m.position = 'decoder', max_length, 'rope'
  m.activation, m.norm, m.norm_eps, m.norm_position = 'geglu', 'rmsnorm', 1e-6, 'pre'
  m.sandwich_norm, m.embed_scale, m.qk_norm = True, True, version == 3
  m.use_bias, m.tie_embeddings = False, True
  m.embed_init_std, m.kernel_init_std = 0.02, 0.02
  m.dtype = 'bfloat16'  # compute; params stay float32
  c.data.seq_len = min(max_length, 4096)
  return c


def t5gemma(c):
  """T5Gemma (Zhang et al. 2025, "Encoder-Decoder Gemma"): Gemma 2's blocks in an encoder
  and a decoder with cross-attention (sandwich-normed and soft-capped as self-attention),
  the encoder's local windows two-sided (|q - k| <= window), each stack embedding with its
  own table, the decoder's tied to the output; trained here by span corruption (T5's
  lengths and 100 sentinels at the top of the vocabulary)."""
  gemma(c, version=2, max_length=8192)
  m = c.model
  m.family, m.num_layers, m.separate_encoder_embed = 'encoder_decoder', 0, True
  c.data.reserved_ids = 100
  c.data.objective, c.data.seq_len, c.data.target_seq_len = 'span_corruption', 512, 114
  return c


def qwen3(c, max_length=40_960):
  """Qwen 3 dense (Qwen Team 2025; the models' config.json): Llama's block with QK-norm,
  RoPE base 1,000,000, RMSNorm eps 1e-6."""
  llama(c, rope_theta=1_000_000.0, max_length=max_length, norm_eps=1e-6)
  c.model.qk_norm = True
  return c


def qwen3_next(c):
  """Qwen3-Next (Qwen Team 2025, "Qwen3-Next"; the models' config.json and transformers'
  Qwen3Next): three Gated DeltaNet layers to one gated-attention layer ('DDDG'): the linear
  layers with 16 q/k heads of 128 and 32 value heads of 128, a 4-token convolution; the
  attention layers 16 query heads of 256 sharing 2, QK-norm, an output gate, RoPE base
  10,000,000 on the first quarter of each head; in every layer 512 SwiGLU experts of width
  512, top 10 renormalised, beside one shared expert of width 512 behind a sigmoid gate;
  RMSNorm eps 1e-6 (zero-centred on import: zoo/convert/hf_qwen3_next.py); a 151,936-token
  vocabulary, untied, a 262,144-token context."""
  llama(c, rope_theta=10_000_000.0, max_length=262_144, norm_eps=1e-6)
  m = c.model
  m.vocab_size, m.num_heads, m.num_kv_heads, m.head_dim = 151_936, 16, 2, 256
  m.qk_norm, m.rope_fraction = True, 0.25
  m.attention.pattern, m.attention.output_gate = 'DDDG', True
  m.delta.update(key_heads=16, value_heads=32, key_dim=128, value_dim=128, conv_width=4,
                 chunk=64)
  o = m.moe
  o.top_k, o.normalize_top_k, o.expert_mlp_dim, o.capacity_factor = 10, True, 512, 0.0
  o.num_shared_experts, o.shared_gate = 1, True
  o.balance_loss, o.z_loss = 0.001, 0.0  # config.json router_aux_loss_coef
  return c


def palm(c):
  """PaLM (Chowdhery et al. 2022, sec. 2): parallel blocks with one bias-free LayerNorm,
  multi-query attention with head_dim 256, SwiGLU with d_ff = 4 d_model, RoPE, no biases,
  shared input/output embeddings, a 256k SentencePiece vocabulary, 2048-token context."""
  m = c.model
  m.family, m.vocab_size, m.max_length = 'decoder', 256_000, 2048
  m.block, m.norm, m.norm_eps, m.norm_position = 'parallel', 'layernorm', 1e-6, 'pre'
  m.activation, m.position, m.use_bias, m.tie_embeddings = 'swiglu', 'rope', False, True
  m.num_kv_heads, m.head_dim = 1, 256
  m.mlp_dim = 4 * m.d_model
  m.embed_init_std = 1.0  # sec. 5: N(0, 1), no norm on the embeddings...
  m.scale_tied_logits = True  # ...so the shared output reads x * d_model^-0.5
  m.dtype = 'bfloat16'  # compute; params stay float32
  c.data.seq_len = 2048
  return c


def bert(c):
  """BERT (Devlin et al. 2019): post-LayerNorm (eps 1e-12), exact-erf GELU, 512 learned
  positions, 2 token types, embedding LayerNorm, MLM head tied to the word embeddings plus a
  bias, pooler and next-sentence head; WordPiece vocabulary of 30522."""
  m = c.model
  m.family, m.vocab_size, m.max_length, m.type_vocab_size = 'encoder', 30522, 512, 2
  m.activation, m.norm, m.norm_eps, m.norm_position = 'gelu', 'layernorm', 1e-12, 'post'
  m.position, m.use_bias, m.tie_embeddings = 'learned', True, True
  m.embedding_norm, m.nsp_head = True, True
  m.embed_init_std, m.kernel_init_std = 0.02, 0.02
  m.dtype = 'bfloat16'  # compute; params stay float32
  c.data.objective, c.data.seq_len = 'mlm', 512
  return c


def t5(c, version):
  """T5 (Raffel et al. 2020): pre-RMSNorm without mean or bias (eps 1e-6), no biases,
  relative position bias (32 buckets, max distance 128, one table per stack), logits not
  scaled by head_dim^-0.5 (folded into the query init), 32128-entry vocabulary whose top 100
  ids are span-corruption sentinels. v1.0: ReLU, tied embeddings (decoder output scaled by
  d_model^-0.5), dropout 0.1; v1.1: GEGLU (gelu_tanh), untied head, no pretraining dropout.
  Its training recipe (Adafactor, rsqrt) is zoo/recipes.py: t5.
  """
  m = c.model
  m.family, m.vocab_size, m.num_layers = 'encoder_decoder', 32128, 0
  m.norm, m.norm_eps, m.norm_position, m.use_bias = 'rmsnorm', 1e-6, 'pre', False
  m.position, m.relative_buckets, m.relative_max_distance = 't5_bias', 32, 128
  m.activation, m.tie_embeddings = ('relu', True) if version == '1.0' else ('geglu', False)
  m.scale_tied_logits = m.tie_embeddings
  m.dropout_rate = 0.1 if version == '1.0' else 0.0
  m.embed_init_std = 1.0
  m.dtype = 'bfloat16'  # compute; params stay float32
  c.data.reserved_ids = 128  # 100 sentinels + 28 unused ids above the 32000 pieces
  c.data.objective, c.data.seq_len, c.data.target_seq_len = 'span_corruption', 512, 114
  return c


def umt5(c):
  """umT5 (Chung et al. 2023, "UniMax"): T5 v1.1 blocks (GEGLU, untied head, pre-RMSNorm)
  with a relative bias table in every layer's self-attention, not only the first; the
  mT5/umT5 vocabulary of 256,384 ids (256,000 pieces, the rest sentinels and unused)."""
  t5(c, version='1.1')
  c.model.relative_bias_per_layer = True
  c.model.vocab_size = 256_384
  c.data.reserved_ids = 384
  return c


def vit(c, image_size, patch_size, num_labels):
  """ViT (Dosovitskiy et al. 2020): patches of patch_size pixels, a class token and a learned
  position table (with the class token's row), pre-LayerNorm blocks with biases and
  exact-erf GELU, the class token's final state to a label head; trained on labelled images
  (data.task.kind 'image_classification', RGB with ViT's processor)."""
  m = c.model
  m.family, m.position, m.norm, m.norm_eps = 'vision', 'none', 'layernorm', 1e-12
  m.activation, m.use_bias, m.norm_position = 'gelu', True, 'pre'
  m.kernel_init_std, m.num_labels = 0.02, num_labels
  m.vision.update(image_size=image_size, patch_size=patch_size, channels=3,
                  position='learned', pool='token')
  d = c.data
  d.objective = d.task.kind = 'image_classification'
  d.task.processor = 'vit'
  d.seq_len = (image_size // patch_size) ** 2 + 1
  return c


def siglip(c, image_size, patch_size):
  """SigLIP (Zhai et al. 2023): a vision tower (learned positions without a class token,
  attention pooling) and a text tower (a 64-token table, the last position's state through
  a linear head) of the same shape, pre-LayerNorm blocks with biases and tanh-GELU, trained
  by the sigmoid loss on image-text pairs (data.task.kind 'image_text', RGB with SigLIP's
  processor, captions padded to 64 tokens of a 32,000-piece vocabulary)."""
  m = c.model
  m.family, m.position, m.norm, m.norm_eps = 'image_text', 'learned', 'layernorm', 1e-6
  m.activation, m.use_bias, m.norm_position = 'gelu_tanh', True, 'pre'
  m.kernel_init_std, m.vocab_size, m.max_length = 0.02, 32_000, 64
  m.vision.update(image_size=image_size, patch_size=patch_size, channels=3,
                  position='learned', pool='map')
  d = c.data
  d.objective, d.task.kind, d.task.processor = 'sigmoid_contrastive', 'image_text', 'siglip'
  d.seq_len = (image_size // patch_size) ** 2
  return c


def variant(c, arg):
  """The variant `arg` of a published shape: none = as published, 'smoke' = smoke(c)."""
  if arg == 'smoke':
    return smoke(c)
  if arg:
    raise ValueError(f'unknown variant {arg!r}; use :smoke or nothing')
  return c


def smoke(c):
  """Shrinks every dimension so a few steps train on a CPU in seconds; keeps the switches."""
  m = c.model
  kv_ratio = (m.num_kv_heads or m.num_heads) / m.num_heads
  m.vocab_size, m.d_model, m.num_heads, m.mlp_dim = 512, 64, 4, 128
  m.num_layers = 0
  for field in families.get(m).LAYER_FIELDS:  # two blocks in each stack
    m[field] = 2
  if c.data.objective == 'span_corruption':
    c.data.target_seq_len = 24
  c.data.reserved_ids = min(c.data.reserved_ids, 128)  # the tokenizer keeps 384 ids
  m.dropout_rate = 0.0
  m.num_kv_heads = 0 if kv_ratio == 1 else max(1, int(4 * kv_ratio))
  m.head_dim = 0 if not m.head_dim else 16
  m.max_length = 64
  m.dtype = 'float32'  # CPUs run float32 fastest, and the smoke numbers stay exact
  if m.attention.window:
    m.attention.window = 16
  if m.attention.pattern:  # one whole pattern and one more layer: the tail is kept too
    for field in families.get(m).LAYER_FIELDS:
      m[field] = len(m.attention.pattern) + 1
  if m.attention.query_scale:
    m.attention.query_scale = 16.0
  if 'D' in m.attention.pattern:  # Gated DeltaNet layers, narrower, two chunks a row
    m.delta.update(key_heads=2, value_heads=4, key_dim=16, value_dim=16, chunk=32)
  if m.attention.chunk:  # Llama 4: chunks and the NoPE temperature's floor that bite at 64
    m.attention.chunk, m.attention.nope_floor = 16, 16
  if m.moe.num_experts:  # keep the routing (experts, top-k, every), shrink the widths
    m.moe.num_experts = min(m.moe.num_experts, 16)
    m.moe.top_k = min(m.moe.top_k, m.moe.num_experts)
    m.moe.expert_mlp_dim = 32 if m.moe.expert_mlp_dim else 0
    m.moe.first_dense = min(m.moe.first_dense, 1)  # one dense layer, one MoE
  if m.mla.kv_lora_rank:  # latent attention kept, narrower
    m.mla.update(kv_lora_rank=32, q_lora_rank=24 if m.mla.q_lora_rank else 0,
                 qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
    if m.mla.index_heads:  # the indexer kept, keeping a quarter of the smoke's 64 keys
      m.mla.update(index_heads=4, index_head_dim=16, index_top_k=16, index_block=16)
  c.data.seq_len = 64
  shrink = getattr(families.get(m), 'smoke', None)  # a family's own inputs shrink there
  if shrink:
    shrink(c)
  t = c.train
  t.steps, t.batch_size, t.log_every, t.eval_every, t.eval_batches = 6, 8, 1, 3, 2
  t.checkpoint_every = 3
  if t.phases or t.batch_ramp:  # the switch kept: the first 3 steps at half the length
    t.phases, t.batch_ramp = '3:8:32', ''
  o = c.optim
  o.learning_rate, o.warmup_steps = 3e-3, 2
  if o.warmup_tokens or o.decay_tokens:  # a schedule in tokens stays one: 2 steps' warmup
    o.warmup_tokens, o.decay_tokens, o.warmup_steps = 2 * 4 * 32, 0.0, 0
  return c
