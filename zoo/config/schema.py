"""The config schema: every field of a run with its default and its unit or source.

Config files in configs/ start from `base()` and set the fields of their shape; the
constants here are the values a field may take (zoo/config/checks.py holds them to it).
"""

import os

import ml_collections

ACTIVATIONS = ('relu', 'gelu', 'gelu_tanh', 'swiglu', 'geglu', 'clamped_swiglu')
NORMS = ('layernorm', 'rmsnorm')
NORM_POSITIONS = ('pre', 'post')
BLOCKS = ('sequential', 'parallel')
POSITIONS = ('learned', 'sinusoidal', 'rope', 'alibi', 't5_bias', 'none')
# image-text pairs' losses (the image_text family): their rows' text is data.text_len tokens
CONTRASTIVE = ('sigmoid_contrastive', 'softmax_contrastive')


def text_length(data_config):
  """The text tokens a row holds: an image-text pair's caption (data.text_len; its
  data.seq_len counts the image's tokens), else data.seq_len."""
  d = data_config
  return d.text_len if d.objective in CONTRASTIVE else d.seq_len
OBJECTIVES = ('causal_lm', 'mlm', 'span_corruption', 'image_classification') + CONTRASTIVE
TRAIN_OBJECTIVES = ('lm', 'dpo', 'ipo', 'simpo', 'grpo')  # train.objective (zoo/objectives)
# fine-tuning tasks (data.task.kind): the eval metrics each reports by default, and the
# others it can (data.task.metrics)
DEFAULT_TASK_METRICS = {
    'classification': ('accuracy', 'f1', 'mcc'),
    'regression': ('pearson', 'spearman'),
    'text_to_text': ('exact_match', 'bleu', 'rouge_l'),
    'prompt_completion': ('exact_match', 'mc_accuracy', 'perplexity'),
    'chat': (),  # the held-out loss over the assistant's tokens
    'preference': (),  # the held-out preference loss and accuracy (train.objective)
    'prompts': (),  # grpo's held-out prompts: reward and exact answers (zoo/post/grpo.py)
    'image_classification': ('accuracy', 'f1', 'mcc'),
    'image_text': (),  # the held-out loss and retrieval accuracy (zoo/families/image_text.py)
}
OTHER_TASK_METRICS = {'classification': (), 'regression': (), 'text_to_text': ('perplexity',),
                      'prompt_completion': ('bleu', 'rouge_l'), 'chat': (), 'preference': (),
                      'prompts': (), 'image_classification': (),
                      'image_text': ()}
TASK_METRICS = {kind: DEFAULT_TASK_METRICS[kind] + OTHER_TASK_METRICS[kind]
                for kind in DEFAULT_TASK_METRICS}
TOKENIZERS = ('bpe', 'unigram')
# data.task.path of the image task built in: scikit-learn's digits (zoo/data/digits.py)
DIGITS = 'sklearn:digits'
OPTIMIZERS = ('adamw', 'adafactor', 'muon')
SCHEDULES = ('cosine', 'linear', 'constant', 'rsqrt', 'wsd')
DTYPES = ('float32', 'bfloat16', 'float16')

DEFAULT_RULES = (
    ('batch', ('data', 'fsdp', 'expert')),
    ('length', 'context'),  # the sequence split over mesh.context (ring attention)
    ('embed', 'fsdp'),
    ('heads', 'tensor'),
    ('kv_heads', 'tensor'),
    ('head_dim', None),
    # multi-head latent attention's latents (zoo/models/mla.py): the up-projections [latent,
    # heads, head_dim] split over fsdp by the latent (their heads over tensor)
    ('q_lora', 'fsdp'),
    ('kv_lora', 'fsdp'),
    ('mlp', 'tensor'),
    ('vocab', 'tensor'),
    ('expert', 'expert'),
    ('layers', 'stage'),  # the stacked layers split into pipeline stages (mesh.stage)
    ('stage', 'stage'),  # the pipeline's per-stage buffers
    # the residual stream between blocks (what a layer scan carries and remat saves): its
    # embed dim is split over tensor too, or big shapes keep a full copy per tensor shard
    ('activation_embed', 'tensor'),
)
SPIKE_ACTIONS = ('off', 'log', 'rollback')
SPIKE_SIGNALS = ('loss', 'grad_norm')


def base():
  """Every field with its default; config files override what their shape needs."""
  c = ml_collections.ConfigDict()
  c.model = _model()
  c.data = _data(c.model)
  c.train = _train()
  c.optim = optim()
  c.generate = _generate()
  c.serve = _serve()
  # slices: TPU slices (or GPU hosts) joined over DCN, which split the axis dcn_axis
  # ('data': gradients cross DCN once a step; 'fsdp': every layer's weights are gathered
  # across it, for a model too large for one slice's fsdp; 'stage': only the activations
  # at stage boundaries cross it)
  # context: the sequence split over devices; attention by ring attention (zoo/kernels/ring.py)
  # stage: the layer stacks split into pipeline stages (zoo/models/pipeline.py)
  c.mesh = ml_collections.ConfigDict({'data': -1, 'fsdp': 1, 'tensor': 1, 'expert': 1,
                                      'context': 1, 'stage': 1, 'slices': 1,
                                      'dcn_axis': 'data'})
  c.sharding = ml_collections.ConfigDict({'rules': DEFAULT_RULES})
  return c

def _model():
  m = ml_collections.ConfigDict()
  m.family = 'decoder'  # 'decoder' | 'encoder' | 'encoder_decoder'
  m.vocab_size = 32000  # tokens; the tokenizer is trained to this size
  m.d_model = 512
  m.num_layers = 6
  m.num_encoder_layers = 0  # encoder_decoder only
  m.num_decoder_layers = 0  # encoder_decoder only
  m.num_heads = 8
  m.num_kv_heads = 0  # 0 = num_heads (MHA); 1 = MQA; between = GQA
  m.head_dim = 0  # 0 = d_model // num_heads
  m.mlp_dim = 2048
  m.activation = 'swiglu'
  # 'clamped_swiglu' (gpt-oss): min(g, limit) sigmoid(alpha min(g, limit)) (clip(u, +-limit) + 1)
  m.swiglu_limit, m.swiglu_alpha = 7.0, 1.702  # gpt-oss config.json's swiglu_limit, _alpha
  m.norm = 'rmsnorm'
  m.norm_position = 'pre'
  m.norm_eps = 1e-6
  m.block = 'sequential'  # 'parallel' = PaLM: x + attn(norm(x)) + mlp(norm(x))
  m.position = 'rope'
  m.max_length = 2048  # learned positions: table size; others: longest supported
  m.rope_theta = 10_000.0
  # RoPE scaling (zoo/models/rope.py, each as transformers computes it), type: 'none';
  # 'llama3' (Llama 3.1: wavelengths > original_max_length / low_freq_factor divided by
  # `factor`, < original / high_freq_factor kept, the band between blended, if any); 'linear'
  # (positions / factor); 'dynamic' (NTK: past original_max_length the base grows with the
  # longest position); 'yarn' (dimensions turning < beta_slow times over original_max_length
  # interpolated, > beta_fast kept; cos and sin x attention_factor, 0 = 0.1 ln(factor) + 1,
  # or DeepSeek's ratio with mscale and mscale_all_dim)
  m.rope_scaling = ml_collections.ConfigDict({
      'type': 'none', 'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
      'original_max_length': 8192, 'beta_fast': 32.0, 'beta_slow': 1.0,
      'attention_factor': 0.0, 'mscale': 0.0, 'mscale_all_dim': 0.0, 'truncate': True})
  # with model.attention.pattern: the local layers' RoPE base (Gemma 3: 10,000 where global
  # layers have 1,000,000), without rope_scaling, which is the global layers'; 0 = rotated
  # as the global layers, rope_scaling included (gpt-oss)
  m.rope_local_theta = 0.0
  m.rope_fraction = 1.0  # the share of each head's channels RoPE rotates (Qwen3-Next: 0.25)
  m.relative_buckets, m.relative_max_distance = 32, 128  # t5_bias: buckets; offsets past it: last
  m.relative_bias_per_layer = False  # t5_bias: a table in every layer (umT5), not per stack
  m.use_bias = False
  m.tie_embeddings = False
  m.scale_tied_logits = False  # T5 v1.0, PaLM: tied head reads x * d_model^-0.5
  m.embed_init_std = 1.0  # token embedding init
  m.kernel_init_std = 0.0  # dense kernels: 0 = fan-in scaled truncated normal; > 0 = N(0, std)
  m.scale_residual_init = False  # GPT-2: output projections' init std / sqrt(2 layers)
  m.type_vocab_size = 0  # encoder: token-type (sentence A/B) embeddings; 0 = none
  m.embedding_norm = False  # encoder (BERT): a norm right after the embeddings
  m.embed_scale = False  # Gemma: token embeddings x sqrt(d_model)
  # encoder_decoder: the encoder reads its own token table (T5Gemma); False: one for both (T5)
  m.separate_encoder_embed = False
  m.qk_norm = False  # Qwen 3, Gemma 3: queries and keys normalised per head (model.norm)
  m.sandwich_norm = False  # Gemma 2, 3: a norm after attention and after the MLP as well
  m.final_softcap = 0.0  # Gemma 2: output logits cap x tanh(logits / cap); 0 = none
  m.nsp_head = False  # encoder (BERT): pooler + next-sentence-prediction head
  # a classification (or regression: 1) head in place of the LM head: on BERT's pooled
  # first token, on a decoder's last real token; 0 = none, or for data.task.kind
  # 'classification' the task's label count (the train split's largest label + 1)
  m.num_labels = 0
  m.label_names = ()  # the classes' names, in label order (a Hugging Face id2label); () = none
  m.dropout_rate = 0.0
  m.dtype = 'float32'  # compute dtype ('bfloat16' on accelerators)
  m.param_dtype = 'float32'
  m.scan_layers = True  # nn.scan over layers keeps compile time flat in depth
  # layers per iteration of that scan: > 1 unrolls it (XLA on CPUs runs the unrolled loop
  # ~10% faster; on TPU/GPU keep 1, compile time grows with it); the parameters stay
  # stacked [layers, ...] either way, so checkpoints do not change
  m.scan_unroll = 1
  m.remat = 'none'  # 'none' | 'full' | 'dots' | 'dots_no_batch'
  # mesh.stage > 1: microbatches the batch flows through the stages in (fill-drain; the
  # bubble is (stages - 1) / (microbatches + stages - 1)); 0 = one per stage
  m.pipeline_microbatches = 0
  # mesh.stage > 1: rounds each microbatch makes through the stages (circular schedule: stage
  # s runs layer groups s, s + stages, ...; the bubble shrinks to (stages - 1) / (repeats x
  # microbatches + stages - 1), the parameters move to their stages every step); 1 =
  # fill-drain over contiguous stages
  m.pipeline_repeats = 1
  _attention_and_matmuls(m)
  m.moe = _moe()
  return m
def _mla():
  """model.mla."""
  # multi-head latent attention (DeepSeek-V2/V3, zoo/models/mla.py): kv_lora_rank > 0 turns
  # it on; keys and values from a kv_lora_rank latent, queries through a q_lora_rank one
  # (0 = a plain projection), head dims qk_nope + qk_rope (one rotary key for all heads) and
  # v_head_dim; model.head_dim and num_kv_heads are unused
  # DeepSeek Sparse Attention (DeepSeek-V3.2, zoo/models/indexer.py, zoo/kernels/sparse.py):
  # index_heads > 0 gives each MLA layer a lightning indexer (index_heads heads of
  # index_head_dim, its queries from the query latent) that keeps index_top_k keys per query;
  # index_block queries are scored and attended at a time (memory: one block's scores [block,
  # S] and kept latents [block, top_k, C + R]). index_stage 'sparse' attends the kept keys
  # and trains the indexer by KL to the main attention over them; 'warmup' attends every key
  # (dense MLA) and trains the indexer alone, by KL to the main attention's distribution
  return ml_collections.ConfigDict({'kv_lora_rank': 0, 'q_lora_rank': 0,
                                    'qk_nope_head_dim': 128, 'qk_rope_head_dim': 64,
                                    'v_head_dim': 128, 'index_heads': 0,
                                    'index_head_dim': 128, 'index_top_k': 2048,
                                    'index_block': 256, 'index_stage': 'sparse'})


def _attention_and_matmuls(m):
  """model.attention, model.mla, model.mtp and model.quant."""
  m.attention = ml_collections.ConfigDict({
      'kernel': 'auto',  # 'auto' | 'xla' | 'splash' | 'flash_bias' | 'gpu' (zoo/kernels)
      'window': 0,  # causal sliding window (keys back, the query included); 0 = none
      # per-layer kinds, repeated over the layers: 'L' local (attention.window, the local
      # RoPE base), 'G' global, 'C' chunked (attention.chunk, RoPE), 'N' global without RoPE
      # (NoPE), 'D' a Gated DeltaNet layer in place of attention (model.delta); Gemma 2
      # 'LG', Gemma 3 'LLLLLG', gpt-oss 'LG', Llama 4 'CCCN', Qwen3-Next 'DDDG'; '' = every
      # layer alike
      'pattern': '',
      # Llama 4: each query attends its own chunk of this many tokens, causally, on the 'C'
      # layers (every layer without a pattern); 0 = none
      'chunk': 0,
      # Llama 4's temperature tuning on the 'N' layers: queries x (log(floor((position + 1) /
      # nope_floor) + 1) nope_scale + 1), for long contexts; nope_scale 0 = off
      'nope_scale': 0.0,
      'nope_floor': 8192,
      # Llama 4: queries and keys of the rotary layers RMS-normalised per head without a
      # gain (transformers' L2Norm, eps model.norm_eps); model.qk_norm is the learned one
      'qk_l2_norm': False,
      'softcap': 0.0,  # Gemma 2: attention logits cap x tanh(logits / cap); 0 = none
      # gpt-oss: a learned logit per head that joins each row's softmax normalizer (the row
      # may give its probability to no key); splash and xla take it, flash_bias and gpu not
      'sinks': False,
      'use_bias': False,  # biases on the q, k, v and out projections (gpt-oss); or model.use_bias
      # Qwen3-Next: each head's output x sigmoid(x W_gate) before the out projection
      'output_gate': False,
      # logits x query_scale^-0.5 (Gemma: query_pre_attn_scalar); 0 = head_dim
      'query_scale': 0.0,
      'block_q': 0,  # splash/flash_bias blocks; 0 = min(512, length); must divide it
      'block_kv': 0,
      # log each layer's max logit q k^T x scale per head (max_logit, max_logit_per_layer):
      # one more logits pass per layer; MuonClip (optim.muon.qk_clip) reads it
      'log_max_logit': False,
  })
  m.mla = _mla()
  # the 'D' layers of model.attention.pattern (Gated DeltaNet, zoo/models/delta_net.py):
  # key_heads q/k heads of key_dim, value_heads v heads of value_dim (each key head serves
  # value_heads / key_heads), a causal depthwise convolution of conv_width tokens, the
  # delta rule solved in chunks of `chunk` tokens (zoo/kernels/delta.py; must divide
  # data.seq_len). Defaults: Qwen3-Next's config.json
  m.delta = ml_collections.ConfigDict({'key_heads': 16, 'value_heads': 32, 'key_dim': 128,
                                       'value_dim': 128, 'conv_width': 4, 'chunk': 64})
  # multi-token prediction (DeepSeek-V3, zoo/models/mtp.py): depth modules after a decoder's
  # stack, module k predicting the token k + 1 ahead; their mean loss x loss_weight joins the
  # total, x late_loss_weight from late_from x train.steps on (V3: 0.3, then 0.1 for the last
  # third of its tokens); 0 = none
  m.mtp = ml_collections.ConfigDict({'depth': 0, 'loss_weight': 0.3,
                                     'late_loss_weight': 0.3, 'late_from': 1.0})
  # quantized training (zoo/models/quant.py): the dense, attention-projection and expert
  # matmuls as int8 or fp8 (e4m3, gradients e5m2) dot_generals, forward and backward;
  # parameters and checkpoints stay float. mode 'none' | 'int8' | 'fp8'; tile: the
  # contracted axis scaled per tile of this many (DeepSeek-V3: 128), 0 = per channel
  m.quant = ml_collections.ConfigDict({'mode': 'none', 'tile': 0})
  # the vision family's tower (zoo/models/vision.py): the resolution its learned position
  # table is made for (pixels, square), patches of patch_size pixels, image channels (3
  # RGB, 1 grey), positions 'learned' (ViT) or 'sincos2d' (fixed), pooling 'token' (the
  # class token's state), 'map' (SigLIP's attention pooling) or 'gap' (the mean)
  m.vision = ml_collections.ConfigDict({'image_size': 224, 'patch_size': 16, 'channels': 3,
                                        'position': 'learned', 'pool': 'token'})
  # images in a decoder's rows (Gemma 3: zoo/models/multimodal.py): tokens_per_image > 0
  # puts a SigLIP tower (model.vision's images, its own shape here; no pooling head) before
  # the decoder, its patch states averaged to tokens_per_image (a square number) per image,
  # RMS-normed and projected to d_model, in place of the image_token_id tokens of a row;
  # an image's tokens attend each other both ways. Gemma 3: 256 tokens of so400m/14 at 896
  m.multimodal = ml_collections.ConfigDict({
      'tokens_per_image': 0, 'image_token_id': 0, 'd_model': 1152, 'num_layers': 27,
      'num_heads': 16, 'mlp_dim': 4304, 'norm_eps': 1e-6})

def _moe():
  return ml_collections.ConfigDict({
      'num_experts': 0,  # 0 = dense MLPs
      'use_bias': False,  # gpt-oss: biases on the router's logits and the experts' matmuls
      'top_k': 2,
      # top-k gates renormalised to sum to 1 (Mixtral, Qwen 3's norm_topk_prob); False: the
      # router's probabilities as they are (top_k = 1 always keeps them: Switch)
      'normalize_top_k': True,
      # 'softmax' (probabilities over the experts) or 'sigmoid' (DeepSeek-V3: each expert's
      # affinity alone; the balance statistics read them normalised to sum to 1)
      'router': 'softmax',
      # group-limited routing (DeepSeek-V3): the experts in num_groups groups, each token's
      # groups ranked by the sum of their two best (bias-adjusted) scores, the top_groups
      # best kept and the top_k experts chosen within them; 0 = no groups
      'num_groups': 0,
      'top_groups': 0,
      'routed_scale': 1.0,  # the routed experts' gates x this (routed_scaling_factor)
      'first_dense': 0,  # the first k layers keep a dense MLP (DeepSeek's first_k_dense)
      # the balance loss over the global batch (Switch) or per sequence, averaged
      # (DeepSeek-V3's sequence-wise loss)
      'balance_scope': 'batch',
      'every': 1,  # a mixture of experts in every k-th layer (the last of each k)
      # Llama 4: the gates scale the tokens going into the experts, not what comes out
      # (dropless only)
      'gate_input': False,
      'capacity_factor': 0.0,  # slots per expert = ceil(k L cf / E) per sequence; 0 = dropless
      'expert_mlp_dim': 0,  # 0 = model.mlp_dim
      'num_shared_experts': 0,  # always-on experts beside the routed ones (DeepSeek)
      # the shared experts' width in all (Qwen3-Next's shared_expert_intermediate_size, any
      # width); 0 = num_shared_experts x the routed experts' width
      'shared_mlp_dim': 0,
      # the shared experts' output x sigmoid(x w), a learned gate per token (Qwen3-Next)
      'shared_gate': False,
      'balance_loss': 0.01,  # coefficient of the Switch load-balancing loss
      'z_loss': 0.001,  # coefficient of the router z-loss
      # auxiliary-loss-free balancing (Wang et al. 2024; DeepSeek-V3 used 0.001): a per-expert
      # bias added to the router scores for selection only, moved by this much after each
      # step toward the experts that got fewer tokens; 0 = off
      'bias_update_rate': 0.0,
      # warn when one expert's share of the tokens exceeds this many times the balanced
      # share top_k / num_experts (2: half the tokens for top-2 of 8) ...
      'collapse_ratio': 2.0,
      'collapse_rows': 5,  # ... in this many logged rows in a row
  })

def _data(m):
  d = ml_collections.ConfigDict()
  d.path = ''  # '' = the embedded tiny Shakespeare; else a text file or a directory of them
  # several corpora mixed by weight, 'PATH:WEIGHT,PATH:WEIGHT' (each PATH as data.path; all
  # with one tokenizer), each source shuffled
  d.mixture = ''
  # what a mixture's weights are shares of: 'tokens' (as papers give them: GPT-3 Table 2.2)
  # or 'documents' (each source's documents interleaved in proportion)
  d.mixture_by = 'tokens'
  d.document_separator = '\n\n'  # a file splits into documents at this string
  # tokens per row (the vision and image_text families: the tokens a tower makes of an image)
  d.seq_len = 256
  # 'image_classification' for the vision family; 'sigmoid_contrastive' (SigLIP) or
  # 'softmax_contrastive' (CLIP) for image_text
  d.objective = 'causal_lm'
  # the vision and image_text families: the pixels (square) and channels of the images a row
  # holds (a tower reads another resolution than its table's by resizing its positions)
  d.image_size = m.vision.get_ref('image_size')
  d.image_channels = m.vision.get_ref('channels')
  # a decoder's image rows (model.multimodal): the tokens an image takes, and their id
  d.image_tokens = m.multimodal.get_ref('tokens_per_image')
  d.image_token_id = m.multimodal.get_ref('image_token_id')
  # image_text: a caption's tokens, EOS and padding included (the text tower's table: SigLIP
  # 64)
  d.text_len = m.get_ref('max_length')
  d.vocab_size = m.get_ref('vocab_size')  # span_corruption: sentinels count down from here
  d.target_seq_len = 114  # span_corruption: decoder length (T5: 114 for 512 inputs)
  d.noise_density = 0.15  # span_corruption: share of tokens in noise spans
  d.mean_noise_span_length = 3.0  # span_corruption
  d.num_sentinels = 100  # span_corruption: at most this many spans per example
  d.mask_rate = 0.15  # mlm: share of tokens chosen (80% [MASK], 10% random, 10% kept)
  # mlm: share of sentence pairs built to a random shorter length (BERT's short_seq_prob,
  # create_pretraining_data.py)
  d.short_pair_rate = 0.1
  d.eval_fraction = 0.05  # share of documents held out for eval, chosen by split_seed
  d.split_seed = 0  # fixed apart from train.seed so the eval set never moves
  d.reserved_ids = 0  # ids at the top of the vocabulary kept out of the tokenizer (sentinels)
  # Independent input streams that make up each global batch (stream s reads documents
  # s::num_streams and fills rows [s*B/n, (s+1)*B/n)); each process reads only the streams
  # its devices hold. 0 = one per process. Fix it (e.g. 8) to keep the same data, and resume
  # the iterator exactly, across process counts.
  d.num_streams = 0
  d.tokenizer = ml_collections.ConfigDict({
      'type': 'bpe',  # 'bpe' | 'unigram'
      'vocab_size': m.get_ref('vocab_size') - d.get_ref('reserved_ids'),  # derived
      'path': '',  # '' = train on the corpus and cache in WORKDIR/tokenizer
      # numbers split into single digits (PaLM's and Llama's tokenizers; arithmetic)
      'split_digits': False,
  })
  # fine-tuning on a task (zoo/data/task.py) in place of pretraining on data.path
  d.task = ml_collections.ConfigDict({
      # '' = pretraining | 'classification' | 'regression' | 'text_to_text' |
      # 'prompt_completion' | 'chat' (instruction tuning) | 'preference' (pairs for
      # train.objective dpo, ipo, simpo) | 'prompts' (grpo) | 'image_classification' (the
      # kinds each family takes: its TASKS)
      'kind': '',
      # a directory holding train.jsonl and eval.jsonl; image_classification and image_text
      # also take DIGITS (scikit-learn's 8 x 8 digits, held out by data.eval_fraction)
      'path': '',
      # image_classification, image_text: how pixels are made (zoo/data/images.py PROCESSORS: its
      # filter, mean and std), at data.image_size
      'processor': 'vit',
      'metrics': (),  # eval metrics (config.TASK_METRICS by kind); () = the kind's defaults
      # chat, preference, prompts: the chat template (zoo/data/chat.py), a .jinja file or a
      # checkpoint directory; '' = the one beside data.tokenizer.path, else ChatML turns
      'template': '',
      # chat, preference, prompts: a conversation over data.seq_len + 1 tokens (a prompt
      # with its new tokens) is 'error' (one line naming it) or 'skip' (left out, counted)
      'too_long': 'error',
  })
  return d

def _train():
  t = ml_collections.ConfigDict()
  t.steps = 1000
  t.batch_size = 16  # global, in sequences
  # shapes the run trains at before train.batch_size x data.seq_len (zoo/phases.py):
  # 'UNTIL:BATCH:SEQ_LEN,...', UNTIL a step or a token count ('4Btokens'); '' = none
  t.phases = ''
  # or a batch ramp, 'START:INCREMENT:UNTIL': from START sequences up by INCREMENT in equal
  # slices of UNTIL (a step or tokens) to train.batch_size; '' = none
  t.batch_ramp = ''
  t.log_every = 10
  t.eval_every = 100
  t.eval_batches = 8  # 0 = the whole eval split
  t.checkpoint_every = 200
  t.keep_checkpoints = 3
  t.seed = 0
  t.z_loss = 0.0  # coefficient of log(Z)^2
  t.max_nonfinite_steps = 5  # stop after this many skipped (NaN/Inf) updates in a row
  # weights to start from, not random: a params checkpoint (zoo.convert.hf) or a run's
  # workdir (its newest checkpoint); parameters it lacks (a new head) are initialised
  t.init_params = ''
  t.drop_unused_params = False  # True: init_params' parameters the model lacks are dropped
  # LoRA (zoo/models/lora.py): rank > 0 puts an adapter beside each dense layer `targets`
  # names (query, key, value, out, wi_0, wi_1, wi, wo; MLA's query_down, query_up, kv_down);
  # only the adapters and a label head train and hold optimizer state; output + dropout(x)
  # a b x alpha / rank
  t.lora = ml_collections.ConfigDict({'rank': 0, 'alpha': 16.0, 'dropout': 0.0,
                                      'targets': 'query,value'})
  t.teacher = _teacher()  # logit distillation (its fields: _teacher below)
  _post_training(t)
  # gradient accumulation: each step's global batch runs as this many microbatches (rows
  # j, j+k, j+2k, ... of every stream's share), gradients summed in float32, one update
  t.microbatches = 1
  # memory-lean loss: the vocabulary projection and cross-entropy run over chunks of this
  # many positions (each chunk recomputed in the backward pass), so the [batch, length,
  # vocab] float32 logits are never held whole; 0 = off; -1 = auto: on at vocab_size >=
  # 32768, in chunks of the largest divisor of the target length up to 512
  t.loss_chunk_len = -1
  # (FIRST, COUNT): trace train steps FIRST..FIRST+COUNT-1 into WORKDIR/profile/process_K/
  # (TensorBoard's profile plugin, xprof); COUNT 0 = no trace
  t.profile_steps = (0, 0)
  # compiled programs kept here across starts, so a restart or an eval does not compile the
  # same step again (JAX's persistent compilation cache; keyed by program, flags and
  # versions); default: $JAX_COMPILATION_CACHE_DIR if set, else ~/.cache/zoo/jax; '' = off
  t.compile_cache_dir = os.environ.get('JAX_COMPILATION_CACHE_DIR') or '~/.cache/zoo/jax'
  # before anything is written or compiled, estimate the train step's bytes per device and
  # refuse a run that cannot fit this machine (zoo/plan/preflight.py); False = skip
  t.preflight = True
  # a step that does not complete within factor x the recent median step time (at least
  # min_seconds) ends the run with stacks in WORKDIR/hang-process_K.txt and exit code 75,
  # for a scheduler to restart it (zoo/train/watchdog.py); factor 0 = no watchdog
  t.hang = ml_collections.ConfigDict({'factor': 10.0, 'min_seconds': 300.0})
  # a fast checkpoint tier (zoo/train/local_tier.py): every `every` steps each process
  # writes its own shards to PATH/process_K on its own disk ('/dev/shm/NAME': host memory),
  # the newest `keep` kept; a start restores the newest checkpoint of either tier; '' = off
  t.local_tier = ml_collections.ConfigDict({'path': '', 'every': 10, 'keep': 2})
  # on a CPU mesh with two or more of data/fsdp/tensor/expert split, the first step is
  # checked against one device before training (zoo/train/canary.py): 'fix' (a mismatch
  # gets a workaround that matches, or the run is refused), 'refuse' (no workaround), 'off'
  t.canary = 'fix'
  # loss spikes (zoo/train/spikes.py, docs/reliability.md): a step whose loss (or a signal
  # in `signals`) is over the mean of the last `window` good steps by `sigmas` standard
  # deviations and by `min_rise` x that mean. action: 'log' (a spike row, train on), 'off',
  # or 'rollback' (PaLM's remedy: back to the newest checkpoint >= rollback_steps older,
  # skip the next skip_batches batches; more than max_rollbacks within rollback_window
  # steps stop the run)
  t.spike = ml_collections.ConfigDict({
      'action': 'log', 'signals': 'loss', 'window': 50, 'sigmas': 6.0, 'min_rise': 0.05,
      'rollback_steps': 100, 'skip_batches': 200, 'max_rollbacks': 3,
      'rollback_window': 1000})
  # batches to skip by hand, 'STEP:COUNT,...': after train step STEP the next COUNT batches
  # of every input stream are drawn and dropped; '' = none
  t.data_skips = ''
  # faults injected for tests: the loop stops making progress before step hang_step; the
  # parameters are multiplied by 4 before step spike_step (once: not again after a rollback
  # to before it); steps nonfinite=(FIRST, COUNT) have a NaN loss; the process SIGKILLs
  # itself while the checkpoint of step kill_in_save is being written (0 = never)
  t.fault = ml_collections.ConfigDict({'hang_step': 0, 'spike_step': 0, 'nonfinite': (0, 0),
                                       'kill_in_save': 0})
  return t

def _post_training(t):
  # what the step minimises (zoo/objectives): 'lm' (the family's loss: language modelling
  # or a task's) | 'dpo' | 'ipo' | 'simpo' (data.task.kind='preference') | 'grpo' (zoo/post)
  t.objective = 'lm'
  # dpo, ipo and grpo's frozen reference: a run's workdir or an import (as train.teacher's);
  # '' = train.init_params, the weights training starts from; with LoRA (train.lora.rank >
  # 0) the model itself with its adapters off, no copy
  t.reference = ''
  t.preference = _preference()
  t.grpo = _grpo()


def _preference():
  # dpo, ipo, simpo (zoo/objectives/preference.py): beta (DPO's KL strength; IPO's tau;
  # SimPO's reward scale), label_smoothing (cDPO's label-noise rate, dpo and simpo),
  # simpo_gamma (SimPO's target reward margin), nll_weight (RPO's alpha: x the chosen
  # completion's mean token NLL, added; 0 = none)
  return ml_collections.ConfigDict({'beta': 0.1, 'label_smoothing': 0.0, 'simpo_gamma': 0.5,
                                    'nll_weight': 0.0})


def _grpo():
  # grpo (zoo/objectives/grpo.py, zoo/post/grpo.py): data.task.path holds prompts
  # ({"prompt", ...} JSON lines; the reward reads the rest); each step samples
  # group_size completions per prompt with the zoo's cached sampler (generate.temperature,
  # top_k, top_p; max_new_tokens each), scores them with `reward` ('module:function',
  # called as function(completion text, example) -> float), and takes `updates` optimizer
  # steps on them; advantages: each reward minus its group's mean, over the group's
  # standard deviation ('group'; DeepSeekMath) or not ('dr_grpo'; Liu et al. 2025); the
  # ratio clipped to [1 - epsilon, 1 + epsilon]; kl_beta x the k3 estimate of KL to the
  # reference (0 = no reference); a reward that raises or is not finite: 'error' stops the
  # run (the last checkpoint kept), 'skip' leaves that prompt's group out and counts it
  return ml_collections.ConfigDict({
      'group_size': 8, 'max_new_tokens': 64, 'reward': '', 'advantages': 'group',
      'epsilon': 0.2, 'kl_beta': 0.04, 'updates': 1, 'on_bad_reward': 'error'})


def _teacher():
  # logit distillation (zoo/families/distill.py): a frozen teacher (a zoo workdir, an
  # imported Hugging Face checkpoint included: zoo.convert.hf) run in the same step on the
  # same mesh; the loss is (1 - weight) x cross-entropy + weight x temperature^2 x KL to
  # the teacher's distribution at that temperature, over its top_k ids (0 = the whole
  # vocabulary); a decoder teacher of the student's vocabulary and tokenizer; quant: its
  # forward's matmuls in 'int8' or 'fp8' (model.quant's), '' = as its config has them
  return ml_collections.ConfigDict({'workdir': '', 'weight': 0.5, 'temperature': 1.0,
                                   'top_k': 0, 'quant': ''})

def optim():
  o = ml_collections.ConfigDict()
  o.name = 'adamw'  # 'adamw' | 'adafactor' (zoo/optim.py) | 'muon' (zoo/muon.py)
  o.learning_rate = 1e-3  # peak (Adafactor with parameter scale: relative to the RMS)
  # 'cosine' | 'linear' | 'constant' (after a linear warmup) | 'rsqrt' (T5: the peak to
  # warmup_steps, then 1/sqrt(step)) | 'wsd' (warmup, stable, decay over decay_fraction)
  o.schedule = 'cosine'
  o.warmup_steps = 100
  # the schedule in tokens trained (train.phases' batches counted), not steps: warmup over
  # warmup_tokens (warmup_steps 0), decayed by decay_tokens (0 = the run's total), the
  # floor after it (GPT-3: 375e6, 260e9); both 0 = the schedule runs in steps
  o.warmup_tokens = 0.0
  o.decay_tokens = 0.0
  o.min_learning_rate_ratio = 0.1  # end of decay, as a share of the peak
  o.decay_fraction = 0.1  # wsd: the share of train.steps spent decaying
  o.weight_decay = 0.1  # decoupled, times the learning rate; not on norm scales or biases
  o.weight_decay_power = 1  # each step decays weights by weight_decay x lr^this (2: PaLM)
  o.b1 = 0.9  # AdamW (under Muon: its AdamW leaves')
  o.b2 = 0.95  # AdamW
  o.eps = 1e-8  # AdamW
  o.clip_norm = 1.0  # global gradient-norm clipping, both optimizers; 0 = none
  o.adafactor = ml_collections.ConfigDict({
      'factored': True,  # row x column second moments (per layer) for 2-D+ slices
      'min_dim_size_to_factor': 128,  # a full moment when the 2nd largest dim is smaller
      'decay_rate': 0.8,  # beta2 at step t = 1 - t^-decay_rate (PaLM, T5X)
      'clipping_threshold': 1.0,  # update clipping: each layer's update RMS at most this; 0 = off
      'multiply_by_parameter_scale': True,  # step relative to the layer's parameter RMS
      'momentum': 0.0,  # beta1 of a first moment; 0 = none (T5)
      'eps': 1e-30,  # added to squared gradients
  })
  # Muon on the hidden weight matrices (zoo/muon.py), AdamW on the rest (Liu et al. 2025)
  o.muon = ml_collections.ConfigDict({
      'momentum': 0.95,  # buf = momentum x buf + g (Moonlight, sec. 2)
      'nesterov': True,  # step on g + momentum x buf
      'ns_steps': 5,  # Newton-Schulz iterations (Jordan's quintic)
      'update_rms': 0.2,  # update x this x sqrt(max(rows, cols)): AdamW's RMS (Moonlight eq. 4)
      'gather': True,  # each matrix's shards moved to its layer/expert dim for the iteration
      # the AdamW leaves' rate, as a share of optim.learning_rate (Moonlight: 1, one rate)
      'adamw_rate': 1.0,
      # MuonClip (Kimi K2): after each step, heads whose max logit passed this get their
      # query and key weights scaled back to it (K2: 100); 0 = off. Needs
      # model.attention.log_max_logit=True
      'qk_clip': 0.0,
  })
  return o

def _generate():
  g = ml_collections.ConfigDict()  # --mode=generate (zoo/infer)
  g.max_new_tokens = 128
  g.min_new_tokens = 0  # EOS cannot come before this many new tokens (transformers'); 0 = off
  g.temperature = 0.0  # 0 = greedy
  g.top_k = 0  # sample among the k likeliest tokens; 0 = all
  g.top_p = 1.0  # nucleus: the smallest set of tokens holding this much probability
  g.min_p = 0.0  # drop tokens under min_p x the likeliest one's probability; 0 = off
  g.repetition_penalty = 1.0  # CTRL (Keskar et al. 2019; 1.2 there): seen tokens' logits / it
  g.frequency_penalty = 0.0  # minus this x how often a token was seen; 0 = off
  g.stop = ()  # stop strings: each completion ends before the first one it contains
  g.seed = 0
  g.num_beams = 1  # > 1: beam search (deterministic; temperature must be 0)
  g.length_alpha = 0.0  # beam scores: log prob / ((5 + length) / 6)^alpha (GNMT; T5 used 0.6)
  # 'zoo' (T5X's: GNMT's penalty, any of the 2 x num_beams candidates may end) or
  # 'transformers' (its beam search: length^alpha, docs/generate.md has the differences)
  g.beam_rules = 'zoo'
  # speculative decoding (zoo/infer/speculative.py): a decoder trained on the same tokenizer
  # in another workdir proposes draft_tokens tokens a round for this model to verify;
  # '' = plain decoding
  g.draft_workdir = ''
  g.draft_tokens = 4
  # or the model's own multi-token prediction module drafts (model.mtp.depth 1: one token a
  # round, as DeepSeek-V3 serves it)
  g.draft_mtp = False
  return g


def _serve():
  s = ml_collections.ConfigDict()  # python -m zoo.serve (zoo/serve, docs/serving.md)
  s.page_size = 16  # tokens a page of the KV cache holds
  s.num_pages = 512  # pages in the pool, page 0 included (it takes padding's writes)
  s.max_seqs = 32  # sequences decoding together: the decode step's rows
  s.prefill_rows = 2  # prompts a prefill step feeds
  s.prefill_chunk = 128  # tokens of each prompt a prefill step feeds
  s.max_len = 0  # a sequence's most tokens, prompt and output; 0 = data.seq_len
  s.max_queue = 256  # requests waiting for a row; more are answered 429
  s.model_name = ''  # the `model` requests name; '' = the workdir's base name
  # 'continuous' (requests join and leave the running batch every step) or 'static' (a
  # batch at a time, each sequence reserving max_len: the baseline benchmarks/serve_load.py
  # measures against)
  s.batching = 'continuous'
  # attention over the pages (zoo/kernels/paged.py): 'auto' (JAX's Pallas ragged paged
  # kernel on TPU where the model needs nothing it lacks, else XLA), 'xla' or 'pallas'
  s.kernel = 'auto'
  return s


# ---------------------------------------------------------------------------- loading
