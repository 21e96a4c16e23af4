"""Config schema, loading and validation.

Every config file in configs/ starts from `base()` and sets the fields of its shape; the
CLI and the Python API load it through `load()`, which applies overrides, validates and
locks it. A bad value is a `ConfigError` whose message names the field and the fix.
"""

import ast
import importlib.util
import os

import ml_collections

from zoo import families
from zoo import kernels
from zoo import phases as phases_lib
from zoo import sharding
from zoo import storage
from zoo.errors import ConfigError  # the error of every layer, raised here the most
from zoo.kernels import flash_bias
from zoo.kernels import splash
from zoo.models import dims
from zoo.models import layers
from zoo.models import transformer

ACTIVATIONS = ('relu', 'gelu', 'gelu_tanh', 'swiglu', 'geglu')
NORMS = ('layernorm', 'rmsnorm')
NORM_POSITIONS = ('pre', 'post')
BLOCKS = ('sequential', 'parallel')
POSITIONS = ('learned', 'sinusoidal', 'rope', 'alibi', 't5_bias', 'none')
REMAT_POLICIES = ('none', *transformer.REMAT_POLICIES)
OBJECTIVES = ('causal_lm', 'mlm', 'span_corruption')
# fine-tuning tasks (data.task.kind): the eval metrics each reports by default, and the
# others it can (data.task.metrics)
DEFAULT_TASK_METRICS = {
    'classification': ('accuracy', 'f1', 'mcc'),
    'regression': ('pearson', 'spearman'),
    'text_to_text': ('exact_match', 'bleu', 'rouge_l'),
    'prompt_completion': ('exact_match', 'mc_accuracy', 'perplexity'),
}
OTHER_TASK_METRICS = {'classification': (), 'regression': (), 'text_to_text': ('perplexity',),
                      'prompt_completion': ('bleu', 'rouge_l')}
TASK_METRICS = {kind: DEFAULT_TASK_METRICS[kind] + OTHER_TASK_METRICS[kind]
                for kind in DEFAULT_TASK_METRICS}
TOKENIZERS = ('bpe', 'unigram')
OPTIMIZERS = ('adamw', 'adafactor')
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


def base():
  """Every field with its default; config files override what their shape needs."""
  c = ml_collections.ConfigDict()
  c.model = _model()
  c.data = _data(c.model)
  c.train = _train()
  c.optim = _optim()
  c.generate = _generate()
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
  m.norm = 'rmsnorm'
  m.norm_position = 'pre'
  m.norm_eps = 1e-6
  m.block = 'sequential'  # 'parallel' = PaLM: x + attn(norm(x)) + mlp(norm(x))
  m.position = 'rope'
  m.max_length = 2048  # learned positions: table size; others: longest supported
  m.rope_theta = 10_000.0
  # RoPE scaling (zoo/models/rope.py, each as transformers computes it), type: 'none';
  # 'llama3' (Llama 3.1: wavelengths > original_max_length / low_freq_factor divided by
  # `factor`, < original / high_freq_factor kept, the band between blended); 'linear'
  # (positions / factor); 'dynamic' (NTK: past original_max_length the base grows with the
  # longest position); 'yarn' (dimensions turning < beta_slow times over original_max_length
  # interpolated, > beta_fast kept; cos and sin x attention_factor, 0 = 0.1 ln(factor) + 1,
  # or DeepSeek's ratio with mscale and mscale_all_dim)
  m.rope_scaling = ml_collections.ConfigDict({
      'type': 'none', 'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
      'original_max_length': 8192, 'beta_fast': 32.0, 'beta_slow': 1.0,
      'attention_factor': 0.0, 'mscale': 0.0, 'mscale_all_dim': 0.0, 'truncate': True})
  # with model.attention.pattern: the local layers' RoPE base (Gemma 3: 10,000 where global
  # layers have 1,000,000), without rope_scaling, which is the global layers'; 0 = rope_theta
  m.rope_local_theta = 0.0
  m.relative_buckets = 32  # t5_bias: buckets per stack's table
  m.relative_max_distance = 128  # t5_bias: offsets beyond share the last bucket
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
  m.attention = ml_collections.ConfigDict({
      'kernel': 'auto',  # 'auto' | 'xla' | 'splash' | 'flash_bias' | 'gpu' (zoo/kernels)
      'window': 0,  # causal sliding window (keys back, the query included); 0 = none
      # per-layer kinds, repeated over the layers: 'L' local (attention.window, the local
      # RoPE base), 'G' global; Gemma 2 'LG', Gemma 3 'LLLLLG'; '' = every layer alike
      'pattern': '',
      'softcap': 0.0,  # Gemma 2: attention logits cap x tanh(logits / cap); 0 = none
      # logits x query_scale^-0.5 (Gemma: query_pre_attn_scalar); 0 = head_dim
      'query_scale': 0.0,
      'block_q': 0,  # splash/flash_bias blocks; 0 = min(512, length); must divide it
      'block_kv': 0,
  })
  # multi-head latent attention (DeepSeek-V2/V3, zoo/models/mla.py): kv_lora_rank > 0 turns
  # it on; keys and values from a kv_lora_rank latent, queries through a q_lora_rank one
  # (0 = a plain projection), head dims qk_nope + qk_rope (one rotary key for all heads) and
  # v_head_dim; model.head_dim and num_kv_heads are unused
  m.mla = ml_collections.ConfigDict({'kv_lora_rank': 0, 'q_lora_rank': 0,
                                     'qk_nope_head_dim': 128, 'qk_rope_head_dim': 64,
                                     'v_head_dim': 128})
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
  m.moe = ml_collections.ConfigDict({
      'num_experts': 0,  # 0 = dense MLPs
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
      'capacity_factor': 0.0,  # slots per expert = ceil(k L cf / E) per sequence; 0 = dropless
      'expert_mlp_dim': 0,  # 0 = model.mlp_dim
      'num_shared_experts': 0,  # always-on experts beside the routed ones (DeepSeek)
      'balance_loss': 0.01,  # coefficient of the Switch load-balancing loss
      'z_loss': 0.001,  # coefficient of the router z-loss
      # auxiliary-loss-free balancing (Wang et al. 2024; DeepSeek-V3 used 0.001): a per-expert
      # bias added to the router scores for selection only, moved by this much after each
      # step toward the experts that got fewer tokens; 0 = off
      'bias_update_rate': 0.0,
      'collapse_share': 0.5,  # warn when one expert gets more than this share of the tokens
      'collapse_rows': 5,  # ... in this many logged rows in a row
  })
  return m


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
  d.seq_len = 256
  d.objective = 'causal_lm'
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
  })
  # fine-tuning on a task (zoo/data/task.py) in place of pretraining on data.path
  d.task = ml_collections.ConfigDict({
      # '' = pretraining | 'classification' | 'regression' | 'text_to_text' |
      # 'prompt_completion' (the kinds each family takes: its TASKS)
      'kind': '',
      'path': '',  # a directory holding train.jsonl and eval.jsonl
      'metrics': (),  # eval metrics (config.TASK_METRICS by kind); () = the kind's defaults
  })
  return d


SPIKE_ACTIONS = ('off', 'log', 'rollback')
SPIKE_SIGNALS = ('loss', 'grad_norm')


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
  # refuse a run that cannot fit this machine (zoo/train/preflight.py); False = skip
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


def _optim():
  o = ml_collections.ConfigDict()
  o.name = 'adamw'  # 'adamw' | 'adafactor' (zoo/train/optim.py)
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
  o.b1 = 0.9  # AdamW
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
  return o


def _generate():
  g = ml_collections.ConfigDict()  # --mode=generate (zoo/infer)
  g.max_new_tokens = 128
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


# ---------------------------------------------------------------------------- loading

def load(spec, overrides=()):
  """'configs/NAME.py[:arg]' (+ 'a.b=value' overrides) -> the validated, locked config."""
  path, _, arg = spec.rpartition(':')
  if not path.endswith('.py'):  # no ':arg' (a gs:// path has a ':' of its own)
    path, arg = spec, ''
  if not storage.isfile(path):
    raise ConfigError(f'--config={spec}: no such file {path!r}; pass a file in configs/')
  local = storage.local_copy(path)  # a workdir's config.py may be in a bucket (zoo.convert.hf)
  module_spec = importlib.util.spec_from_file_location('zoo_config_file', local)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  if local != path:
    os.remove(local)
  try:
    config = module.get_config(arg) if arg else module.get_config()
  except ValueError as e:  # e.g. an unknown variant after the ':'
    raise ConfigError(f'--config={spec}: {e}') from None
  config.lock()
  for override in overrides:
    apply_override(config, override)
  validate(config)
  return config


def apply_override(config, override):
  """'train.steps=100' sets that field; the value is a Python literal or a bare string."""
  key, sep, text = override.partition('=')
  if not sep:
    raise ConfigError(f'override {override!r}: write it as --config.{key}=VALUE')
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    value = text
  *parents, leaf = key.split('.')
  node = config
  for i, name in enumerate(parents):
    if not isinstance(node, ml_collections.ConfigDict) or name not in node:
      raise ConfigError(f'unknown config key {".".join(parents[:i + 1])!r} in --config.{key}')
    node = node[name]
  if not isinstance(node, ml_collections.ConfigDict) or leaf not in node:
    raise ConfigError(f'unknown config key {key!r}; check the spelling against the config file')
  if isinstance(node[leaf], float) and isinstance(value, int):
    value = float(value)
  try:
    node[leaf] = value
  except TypeError as e:
    kind = type(node[leaf]).__name__
    raise ConfigError(f'--config.{key}={text}: wrong type ({e}); expected '
                      f'{"an" if kind[0] in "aeiou" else "a"} {kind}') from None


# ------------------------------------------------------------------------- validation

def _one_of(name, value, allowed):
  if value not in allowed:
    raise ConfigError(f'{name}={value!r} is not one of {", ".join(map(repr, allowed))}')


def _positive(name, value):
  if not value > 0:
    raise ConfigError(f'{name}={value} must be positive')


def _validate_moe(m, mesh):
  moe = m.moe
  if moe.num_experts < 0:
    raise ConfigError(f'model.moe.num_experts={moe.num_experts} must be >= 0 (0 = dense)')
  if not moe.num_experts:
    if mesh.expert not in (1, -1):
      raise ConfigError(f'mesh.expert={mesh.expert} needs experts; set model.moe.num_experts '
                        'or mesh.expert=1')
    return
  if not 1 <= moe.top_k <= moe.num_experts:
    raise ConfigError(f'model.moe.top_k={moe.top_k} must be in [1, model.moe.num_experts='
                      f'{moe.num_experts}]')
  if moe.capacity_factor < 0:
    raise ConfigError(f'model.moe.capacity_factor={moe.capacity_factor} must be >= 0 '
                      '(0 = dropless)')
  for n in (m[field] for field in families.get(m).LAYER_FIELDS):
    if not 0 <= moe.first_dense < n:
      raise ConfigError(f'model.moe.first_dense={moe.first_dense} must leave MoE layers: '
                        f'in [0, {n})')
    n -= moe.first_dense
    if not 1 <= moe.every <= n or n % moe.every:
      raise ConfigError(f'model.moe.every={moe.every} must divide the layer count {n} '
                        '(a MoE in every k-th layer, after model.moe.first_dense)')
  _one_of('model.moe.router', moe.router, ('softmax', 'sigmoid'))
  _one_of('model.moe.balance_scope', moe.balance_scope, ('batch', 'sequence'))
  if moe.num_groups:
    if moe.num_experts % moe.num_groups or moe.num_experts // moe.num_groups < 2:
      raise ConfigError(f'model.moe.num_experts={moe.num_experts} does not split into '
                        f'model.moe.num_groups={moe.num_groups} groups of 2 or more; use a '
                        'divisor (DeepSeek-V3: 8 groups of 32)')
    if not 1 <= moe.top_groups <= moe.num_groups:
      raise ConfigError(f'model.moe.top_groups={moe.top_groups} must be in [1, '
                        f'model.moe.num_groups={moe.num_groups}] (DeepSeek-V3: 4 of 8)')
    if moe.top_k > moe.top_groups * (moe.num_experts // moe.num_groups):
      raise ConfigError(f'model.moe.top_k={moe.top_k} exceeds the experts in '
                        f'model.moe.top_groups={moe.top_groups} groups; keep more groups')
  if moe.first_dense and mesh.stage > 1:
    raise ConfigError(f'model.moe.first_dense={moe.first_dense} with mesh.stage={mesh.stage}: '
                      'the dense layers are not pipelined; set mesh.stage=1')
  if moe.balance_scope == 'sequence' and mesh.context > 1:
    raise ConfigError("model.moe.balance_scope='sequence' with mesh.context > 1: each device "
                      "holds a chunk of a sequence; use 'batch' there")
  if mesh.expert > 1 and moe.num_experts % mesh.expert:
    raise ConfigError(f'model.moe.num_experts={moe.num_experts} does not split over '
                      f'mesh.expert={mesh.expert}; use a divisor of the expert count')
  for name in ('balance_loss', 'z_loss', 'bias_update_rate', 'expert_mlp_dim',
               'num_shared_experts', 'routed_scale'):
    if moe[name] < 0:
      raise ConfigError(f'model.moe.{name}={moe[name]} must be >= 0')


def _validate_generate(g, m):
  _positive('generate.max_new_tokens', g.max_new_tokens)
  if g.temperature < 0 or g.top_k < 0:
    raise ConfigError(f'generate.temperature={g.temperature} and generate.top_k={g.top_k} '
                      'must be >= 0 (0 = greedy, 0 = no top-k)')
  if not 0 < g.top_p <= 1:
    raise ConfigError(f'generate.top_p={g.top_p} must be in (0, 1]')
  if g.top_k > m.vocab_size:
    raise ConfigError(f'generate.top_k={g.top_k} exceeds model.vocab_size={m.vocab_size}')
  _positive('generate.num_beams', g.num_beams)
  if g.num_beams > 1 and g.temperature:
    raise ConfigError(f'generate.num_beams={g.num_beams} searches, it does not sample; set '
                      f'generate.temperature=0 (now {g.temperature}) or num_beams=1')
  if g.length_alpha < 0:
    raise ConfigError(f'generate.length_alpha={g.length_alpha} must be >= 0')
  _one_of('generate.beam_rules', g.beam_rules, ('zoo', 'transformers'))
  if not 0 <= g.min_p < 1:
    raise ConfigError(f'generate.min_p={g.min_p} must be in [0, 1) (0 = off; 0.05 to 0.1 '
                      'is usual)')
  if g.repetition_penalty < 1:
    raise ConfigError(f'generate.repetition_penalty={g.repetition_penalty} must be >= 1 (1 = '
                      'off; below 1 would favour repeats); CTRL used 1.2')
  if g.frequency_penalty < 0:
    raise ConfigError(f'generate.frequency_penalty={g.frequency_penalty} must be >= 0 (0 = '
                      'off)')
  if g.draft_mtp and (g.draft_workdir or m.mtp.depth != 1):
    raise ConfigError(f'generate.draft_mtp=True drafts with the model\'s one prediction '
                      f'module (model.mtp.depth=1, now {m.mtp.depth}) and no other draft '
                      f'(generate.draft_workdir={g.draft_workdir!r}); set draft_mtp=False or '
                      'fix the other field')
  if g.draft_workdir or g.draft_mtp:
    _positive('generate.draft_tokens', g.draft_tokens)
    neutral = {'generate.num_beams': (g.num_beams, 1),
               'generate.repetition_penalty': (g.repetition_penalty, 1.0),
               'generate.frequency_penalty': (g.frequency_penalty, 0.0)}
    for name, (value, off) in neutral.items():
      if value != off:
        raise ConfigError(f'{name}={value} with speculative decoding (generate.draft_workdir '
                          'or draft_mtp), which samples or takes the argmax token by token; '
                          f'set {name}={off} or turn the draft off')
  if isinstance(g.stop, str) or not all(isinstance(x, str) and x for x in g.stop):
    raise ConfigError(f'generate.stop={g.stop!r} must be a tuple of non-empty strings, e.g. '
                      '--config.generate.stop="(\'THE END\',)"')


def validate(config):
  """Raises ConfigError naming the first field that cannot work; returns the config."""
  family = families.get(config.model)
  _validate_model(config.model)
  _validate_family(config.model, family)
  _validate_attention(config.model, config.data, family)
  _validate_moe(config.model, config.mesh)
  d = config.data
  if d.objective not in family.OBJECTIVES:
    raise ConfigError(f'data.objective={d.objective!r} does not train model.family='
                      f'{family.NAME!r}; use one of {family.OBJECTIVES}')
  _validate_data(d, config.model, config.train)
  _validate_task(d.task, config.model, family)
  _validate_train(config.train, config.optim, config.data)
  _validate_lora(config.train.lora, config.model)
  _validate_generate(config.generate, config.model)
  _validate_mesh(config.mesh, config.sharding)
  _validate_context(config.mesh.context, config.model, config.data)
  _validate_stage(config.mesh, config.model, config.train.batch_size)
  _validate_phases(config)
  return config


def _validate_phases(config):
  """Each phase checked as a run of its own shape (zoo/phases.py)."""
  def check(phase_config):
    if config.data.task.kind and phase_config.data.seq_len != config.data.seq_len:
      raise ConfigError(f'a fine-tuning task trains at data.seq_len={config.data.seq_len} '
                        'throughout; its phases may change the batch only')
    validate(phase_config)
  phases_lib.check_each(config, check)


def _validate_model(m):
  for name in ('vocab_size', 'd_model', 'num_heads', 'mlp_dim', 'max_length'):
    _positive(f'model.{name}', m[name])
  if m.head_dim == 0 and m.d_model % m.num_heads:
    raise ConfigError(f'model.num_heads={m.num_heads} does not divide model.d_model={m.d_model}; '
                      'change num_heads or set model.head_dim')
  if m.num_kv_heads < 0 or m.num_heads % dims.kv_heads(m):
    raise ConfigError(f'model.num_kv_heads={m.num_kv_heads} does not divide '
                      f'model.num_heads={m.num_heads}; use a divisor (1 = MQA)')
  _one_of('model.activation', m.activation, ACTIVATIONS)
  _one_of('model.norm', m.norm, NORMS)
  _one_of('model.norm_position', m.norm_position, NORM_POSITIONS)
  _one_of('model.block', m.block, BLOCKS)
  _one_of('model.position', m.position, POSITIONS)
  _one_of('model.remat', m.remat, REMAT_POLICIES)
  _one_of('model.dtype', m.dtype, DTYPES)
  _one_of('model.param_dtype', m.param_dtype, DTYPES)
  if m.block == 'parallel' and m.norm_position != 'pre':
    raise ConfigError("model.block='parallel' needs model.norm_position='pre'")
  if m.position == 'rope' and dims.head_dim(m) % 2:
    raise ConfigError(f'model.position=rope needs an even head_dim, got {dims.head_dim(m)}')
  r = m.rope_scaling
  _one_of('model.rope_scaling.type', r.type, ('none', 'llama3', 'linear', 'dynamic', 'yarn'))
  if r.type != 'none' and r.factor < 1:
    raise ConfigError(f'model.rope_scaling.factor={r.factor} must be >= 1 for type {r.type!r}')
  if r.type in ('llama3', 'dynamic', 'yarn') and r.original_max_length <= 0:
    raise ConfigError(f'model.rope_scaling.type={r.type!r} needs original_max_length (the '
                      'trained context, config.json original_max_position_embeddings) > 0')
  if r.type == 'llama3' and not 0 < r.low_freq_factor < r.high_freq_factor:
    raise ConfigError(f"model.rope_scaling.type='llama3' needs 0 < low_freq_factor="
                      f'{r.low_freq_factor} < high_freq_factor={r.high_freq_factor}')
  if r.type == 'yarn' and not 0 < r.beta_slow < r.beta_fast:
    raise ConfigError(f"model.rope_scaling.type='yarn' needs 0 < beta_slow={r.beta_slow} < "
                      f'beta_fast={r.beta_fast} (32 and 1 by default)')
  if not 0 <= m.dropout_rate < 1:
    raise ConfigError(f'model.dropout_rate={m.dropout_rate} must be in [0, 1)')
  _positive('model.scan_unroll', m.scan_unroll)


def _validate_family(m, family):
  """What the family's model builds: its block counts, positions, blocks, windows."""
  for field in family.LAYER_FIELDS:
    if m[field] <= 0:
      raise ConfigError(f'model.{field}={m[field]} must be positive: model.family='
                        f'{family.NAME!r} counts its blocks in model.'
                        f'{" and model.".join(family.LAYER_FIELDS)}')
  for name, allowed in (('position', family.POSITIONS), ('block', family.BLOCKS)):
    if m[name] not in allowed:
      raise ConfigError(f'model.{name}={m[name]!r} is not built for model.family='
                        f'{family.NAME!r}; use one of {", ".join(map(repr, allowed))}')
  if m.relative_bias_per_layer and m.position != 't5_bias':
    raise ConfigError(f'model.relative_bias_per_layer=True gives each layer a T5 bias table, '
                      f"and model.position={m.position!r} has none; set position='t5_bias' "
                      'or the flag False')
  if m.separate_encoder_embed and family.NAME != 'encoder_decoder':
    raise ConfigError(f'model.separate_encoder_embed=True: model.family={family.NAME!r} has '
                      'no encoder beside a decoder; set it False')
  if (m.attention.window and family.NAME == 'encoder_decoder' and m.position == 't5_bias' and
      m.attention.kernel in ('auto', 'flash_bias')):
    raise ConfigError(f"model.attention.window={m.attention.window} with model.position="
                      "'t5_bias': the encoder's window is two-sided and flash_bias takes "
                      "causal windows only; set model.attention.kernel='xla' (or position "
                      "'rope', as T5Gemma)")
  _validate_mla(m, family)
  _validate_mtp(m, family)
  _validate_quant(m)
  if m.attention.window and not family.SLIDING_WINDOW:
    raise ConfigError(f'model.attention.window={m.attention.window}: a sliding window is not '
                      f'built for model.family={family.NAME!r}; set it to 0')


def _validate_mtp(m, family):
  """model.mtp: a decoder's token stream, positions from RoPE, weights that make sense."""
  t = m.mtp
  if t.depth < 0:
    raise ConfigError(f'model.mtp.depth={t.depth} must be >= 0 (0 = no multi-token prediction; '
                      'DeepSeek-V3: 1)')
  if not t.depth:
    return
  if family.NAME != 'decoder' or m.position not in ('rope', 'none') or m.num_labels:
    raise ConfigError(f'model.mtp.depth={t.depth}: multi-token prediction is built for '
                      "language-model decoders with model.position='rope' (or 'none'); "
                      f'model.family={family.NAME!r}, position={m.position!r}; set '
                      'model.mtp.depth=0')
  if t.loss_weight < 0 or t.late_loss_weight < 0 or not 0 <= t.late_from <= 1:
    raise ConfigError(f'model.mtp: loss_weight={t.loss_weight} and late_loss_weight='
                      f'{t.late_loss_weight} must be >= 0 and late_from={t.late_from} in [0, 1] '
                      '(a fraction of train.steps; 1 = loss_weight throughout)')


def _dense_layers(m):
  """The dense layers a model builds -> (contracted width, output width) by layer name."""
  h, q = m.num_heads, m.num_heads * dims.head_dim(m)
  if m.mla.kv_lora_rank:
    a = m.mla
    rope = a.qk_nope_head_dim + a.qk_rope_head_dim
    out = {'kv_down': (m.d_model, a.kv_lora_rank + a.qk_rope_head_dim),
           'out': (h * a.v_head_dim, m.d_model)}
    if a.q_lora_rank:
      out.update(query_down=(m.d_model, a.q_lora_rank), query_up=(a.q_lora_rank, h * rope))
    else:
      out['query'] = (m.d_model, h * rope)
  else:
    kv = dims.kv_heads(m) * dims.head_dim(m)
    out = {'query': (m.d_model, q), 'key': (m.d_model, kv), 'value': (m.d_model, kv),
           'out': (q, m.d_model)}
  moe = m.moe
  if not moe.num_experts or moe.first_dense or moe.every > 1:
    inner = ('wi_0', 'wi_1') if m.activation in layers.GATED else ('wi',)
    out.update({name: (m.d_model, m.mlp_dim) for name in inner}, wo=(m.mlp_dim, m.d_model))
  return out


def _validate_quant(m):
  """model.quant: a mode Qwix trains in, a tile that divides what each matmul contracts."""
  q = m.quant
  _one_of('model.quant.mode', q.mode, ('none', 'int8', 'fp8'))
  if q.tile < 0:
    raise ConfigError(f'model.quant.tile={q.tile} must be >= 0 (0 = a scale per channel)')
  if q.tile and q.mode != 'none':
    widths = {n: k for n, (k, _) in _dense_layers(m).items()}
    if m.moe.num_experts and m.moe.num_shared_experts:
      widths['shared wo'] = (m.moe.expert_mlp_dim or m.mlp_dim) * m.moe.num_shared_experts
    bad = {n: k for n, k in widths.items() if k % q.tile}
    if bad:
      raise ConfigError(f'model.quant.tile={q.tile} does not divide what '
                        f'{", ".join(f"{n} contracts ({k})" for n, k in bad.items())}; use a '
                        'common divisor (e.g. 128) or tile=0 (a scale per channel)')
  if q.mode != 'none' and m.dtype == 'float16':
    raise ConfigError(f"model.quant.mode={q.mode!r} rescales in model.dtype and float16's range "
                      "overflows int8 and fp8 products; use model.dtype='bfloat16' or 'float32'")


def _validate_lora(lora, m):
  """train.lora: a rank each target can hold, targets the model has."""
  if lora.rank < 0:
    raise ConfigError(f'train.lora.rank={lora.rank} must be >= 0 (0 = no adapters)')
  if not lora.rank:
    return
  if lora.alpha <= 0 or not 0 <= lora.dropout < 1:
    raise ConfigError(f'train.lora.alpha={lora.alpha} must be > 0 and train.lora.dropout='
                      f'{lora.dropout} in [0, 1)')
  layers = _dense_layers(m)
  targets = [t.strip() for t in lora.targets.split(',') if t.strip()]
  missing = [t for t in targets if t not in layers]
  if missing or not targets:
    raise ConfigError(f'train.lora.targets={lora.targets!r}: {", ".join(missing) or "none"} '
                      f'names no dense layer of this model; choose from {", ".join(layers)}')
  for t in targets:
    if lora.rank > min(layers[t]):
      raise ConfigError(f'train.lora.rank={lora.rank} exceeds {t}\'s smaller dimension '
                        f'{min(layers[t])} (in {layers[t][0]}, out {layers[t][1]}); use a rank '
                        f'<= {min(layers[t])}')


def _validate_mla(m, family):
  """model.mla: ranks within the width, rotary dims that pair up, what it is built with."""
  a = m.mla
  if not a.kv_lora_rank:
    return
  for name in ('kv_lora_rank', 'q_lora_rank'):
    if not 0 <= a[name] <= m.d_model:
      raise ConfigError(f'model.mla.{name}={a[name]} must be in [0, model.d_model={m.d_model}]: '
                        'a latent narrower than the model (DeepSeek-V3: 512 and 1536 of 7168)')
  if a.qk_rope_head_dim <= 0 or a.qk_rope_head_dim % 2:
    raise ConfigError(f'model.mla.qk_rope_head_dim={a.qk_rope_head_dim} must be a positive even '
                      'number (RoPE rotates pairs; DeepSeek-V3: 64)')
  for name in ('qk_nope_head_dim', 'v_head_dim'):
    _positive(f'model.mla.{name}', a[name])
  if a.v_head_dim > a.qk_nope_head_dim + a.qk_rope_head_dim:
    raise ConfigError(f'model.mla.v_head_dim={a.v_head_dim} must be at most qk_nope_head_dim + '
                      f'qk_rope_head_dim = {a.qk_nope_head_dim + a.qk_rope_head_dim} (the '
                      'kernels pad values to the query and key head dim)')
  if family.NAME != 'decoder' or m.position != 'rope' or m.attention.window:
    raise ConfigError(f'model.mla.kv_lora_rank={a.kv_lora_rank}: latent attention is built for '
                      "decoders with model.position='rope' and no window; set kv_lora_rank=0 "
                      'for this model')


def _validate_attention(m, d, family):
  a = m.attention
  _one_of('model.attention.kernel', a.kernel, kernels.KERNELS)
  if a.kernel == 'splash' and dims.has_position_bias(m):
    raise ConfigError(f"model.attention.kernel='splash' takes no additive bias, which "
                      f"model.position={m.position!r} adds; use 'flash_bias' (TPU), 'auto' or "
                      "'xla'")
  if a.kernel == 'flash_bias':
    if not dims.has_position_bias(m):
      raise ConfigError(f"model.attention.kernel='flash_bias' computes a position bias, and "
                        f"model.position={m.position!r} adds none; use 'splash' or 'auto'")
    lengths = {shape[1] for shape, _ in family.batch_spec(d, 1).values() if len(shape) == 2}
    for length in sorted(lengths):
      try:
        flash_bias.block_sizes(length, length, a.block_q, a.block_kv)
      except ValueError as e:
        raise ConfigError(str(e)) from None
  if a.kernel == 'splash':
    if d.seq_len % 128:
      raise ConfigError(f"model.attention.kernel='splash' needs data.seq_len={d.seq_len} to be a "
                        "multiple of 128 (its block width); change seq_len or use 'xla'")
    for name in ('block_q', 'block_kv'):
      block = a[name]
      if block < 0 or block % 128 or (block and d.seq_len % block):
        raise ConfigError(f'model.attention.{name}={block} must be a multiple of 128 dividing '
                          f'data.seq_len={d.seq_len}; or 0 for min(512, seq_len)')
  if a.window < 0:
    raise ConfigError(f'model.attention.window={a.window} must be >= 0 (0 = none)')
  if a.softcap < 0 or a.query_scale < 0 or m.final_softcap < 0:
    raise ConfigError(f'model.attention.softcap={a.softcap}, model.attention.query_scale='
                      f'{a.query_scale} and model.final_softcap={m.final_softcap} must be >= 0 '
                      '(0 = none)')
  if a.softcap and a.kernel in kernels.SOFTCAP_REFUSED:
    raise ConfigError(f'model.attention.kernel={a.kernel!r} cannot soft-cap the logits '
                      f"(model.attention.softcap={a.softcap}); use 'auto', 'splash' or 'xla'")
  _validate_pattern(m, family)


def _validate_pattern(m, family):
  """model.attention.pattern: its letters, its window, the layers it repeats over."""
  pattern = m.attention.pattern
  if not pattern:
    return
  if set(pattern) - set('LG'):
    raise ConfigError(f'model.attention.pattern={pattern!r}: use L (local) and G (global), '
                      "e.g. 'LG' (Gemma 2) or 'LLLLLG' (Gemma 3)")
  if 'L' in pattern and not m.attention.window:
    raise ConfigError(f'model.attention.pattern={pattern!r} has local layers but '
                      'model.attention.window=0; set the local window (Gemma 2: 4096)')
  for field in family.LAYER_FIELDS:
    if len(pattern) > m[field]:
      raise ConfigError(f'model.attention.pattern={pattern!r} is longer than model.{field}='
                        f'{m[field]}; shorten it or add layers')
  if m.moe.num_experts and m.moe.first_dense:
    raise ConfigError(f'model.attention.pattern={pattern!r} with model.moe.first_dense='
                      f'{m.moe.first_dense}: a pattern takes experts in every layer; set '
                      'first_dense=0')
  if m.moe.num_experts and m.moe.every > 1:
    raise ConfigError(f'model.attention.pattern={pattern!r} with model.moe.every='
                      f'{m.moe.every}: a pattern takes experts in every layer (every=1) only')


def _validate_data(d, m, t):
  _one_of('data.objective', d.objective, OBJECTIVES)
  if d.objective == 'span_corruption':
    _positive('data.target_seq_len', d.target_seq_len)
    if not 0 < d.noise_density < 1 or d.mean_noise_span_length < 1:
      raise ConfigError('data.noise_density must be in (0, 1) and data.mean_noise_span_length '
                        '>= 1')
    # a task (fine-tuning) writes its targets: no sentinels
    if d.tokenizer.vocab_size + d.num_sentinels > m.vocab_size and not d.task.kind:
      raise ConfigError(f'data.tokenizer.vocab_size={d.tokenizer.vocab_size} + '
                        f'data.num_sentinels={d.num_sentinels} exceed model.vocab_size='
                        f'{m.vocab_size}; sentinels need the top of the vocabulary')
  if not 0 < d.mask_rate < 1:
    raise ConfigError(f'data.mask_rate={d.mask_rate} must be in (0, 1)')
  if not 0 <= d.short_pair_rate <= 1:
    raise ConfigError(f'data.short_pair_rate={d.short_pair_rate} must be in [0, 1]')
  _one_of('data.tokenizer.type', d.tokenizer.type, TOKENIZERS)
  _positive('data.seq_len', d.seq_len)
  if m.position == 'learned' and d.seq_len > m.max_length:
    raise ConfigError(f'data.seq_len={d.seq_len} exceeds model.max_length={m.max_length} '
                      'of the learned position table; lower seq_len')
  if not 0 < d.eval_fraction < 1:
    raise ConfigError(f'data.eval_fraction={d.eval_fraction} must be in (0, 1)')
  if d.num_streams < 0:
    raise ConfigError(f'data.num_streams={d.num_streams} must be >= 0 (0 = one per process)')
  if d.num_streams and t.batch_size % d.num_streams:
    raise ConfigError(f'train.batch_size={t.batch_size} does not split into '
                      f'data.num_streams={d.num_streams} streams; use a multiple of it')
  if d.tokenizer.vocab_size > m.vocab_size:
    raise ConfigError(f'data.tokenizer.vocab_size={d.tokenizer.vocab_size} exceeds '
                      f'model.vocab_size={m.vocab_size}')
  storage.check(d.path, 'data.path')
  storage.check(d.tokenizer.path, 'data.tokenizer.path')
  for source in filter(None, d.mixture.split(',')):
    storage.check(source.strip(), 'data.mixture')
  _one_of('data.mixture_by', d.mixture_by, ('tokens', 'documents'))


def _validate_task(task, m, family):
  if not task.kind:
    if task.path or task.metrics:
      raise ConfigError("data.task.path and data.task.metrics need a data.task.kind; set one "
                        f'of {", ".join(map(repr, TASK_METRICS))} or clear them')
    if m.num_labels:
      raise ConfigError(f'model.num_labels={m.num_labels} builds a classification head, '
                        'which pretraining does not train; set data.task.kind or '
                        'model.num_labels=0')
    return
  _one_of('data.task.kind', task.kind, tuple(TASK_METRICS))
  if task.kind not in family.TASKS:
    raise ConfigError(f'data.task.kind={task.kind!r} is not built for model.family='
                      f'{family.NAME!r}; use one of {", ".join(map(repr, family.TASKS))}')
  if not task.path:
    raise ConfigError(f'data.task.kind={task.kind!r} needs data.task.path: a directory '
                      'holding train.jsonl and eval.jsonl')
  storage.check(task.path, 'data.task.path')
  for metric in task.metrics:
    if metric not in TASK_METRICS[task.kind]:
      raise ConfigError(f'data.task.metrics: {metric!r} does not apply to data.task.kind='
                        f'{task.kind!r}; use some of {", ".join(TASK_METRICS[task.kind])}')
  headed = task.kind in ('classification', 'regression')
  if not headed and m.num_labels:
    raise ConfigError(f'model.num_labels={m.num_labels} builds a classification head, which '
                      f'data.task.kind={task.kind!r} does not read; set model.num_labels=0')
  if task.kind == 'regression' and m.num_labels not in (0, 1):
    raise ConfigError(f'model.num_labels={m.num_labels}: a regression head predicts one '
                      'value; set model.num_labels=1 or 0')
  if m.label_names and m.num_labels and len(m.label_names) != m.num_labels:
    raise ConfigError(f'model.label_names has {len(m.label_names)} names for '
                      f'model.num_labels={m.num_labels}; give one per label, or ()')
  if task.kind == 'classification' and m.num_labels == 1:
    raise ConfigError('model.num_labels=1 cannot classify; set 2 or more, or 0 for the '
                      "task's label count")


def _validate_train(t, o, d):
  storage.check(t.init_params, 'train.init_params')
  for name in ('steps', 'batch_size', 'log_every', 'eval_every', 'checkpoint_every',
               'keep_checkpoints', 'max_nonfinite_steps', 'microbatches'):
    _positive(f'train.{name}', t[name])
  if t.eval_batches < 0 or t.z_loss < 0:
    raise ConfigError('train.eval_batches and train.z_loss must be >= 0')
  stream_rows = t.batch_size // (d.num_streams or 1)
  if stream_rows % t.microbatches:
    raise ConfigError(f'train.microbatches={t.microbatches} does not divide the rows of each '
                      f'input stream (train.batch_size={t.batch_size} / '
                      f'{d.num_streams or 1} streams = {stream_rows}); use a divisor of it')
  if t.hang.factor < 0 or t.hang.min_seconds <= 0:
    raise ConfigError(f'train.hang.factor={t.hang.factor} must be >= 0 (0 = no watchdog) and '
                      f'train.hang.min_seconds={t.hang.min_seconds} positive')
  _validate_spike(t)
  _one_of('train.canary', t.canary, ('fix', 'refuse', 'off'))
  if t.local_tier.path and storage.is_remote(t.local_tier.path):
    raise ConfigError(f'train.local_tier.path={t.local_tier.path!r} is a bucket; the local '
                      "tier is each process's own disk (or /dev/shm): pass a local path")
  if t.local_tier.every <= 0 or t.local_tier.keep <= 0:
    raise ConfigError(f'train.local_tier.every={t.local_tier.every} and '
                      f'train.local_tier.keep={t.local_tier.keep} must be positive')
  if t.loss_chunk_len < -1:
    raise ConfigError(f'train.loss_chunk_len={t.loss_chunk_len} must be >= 0, or -1 (auto)')
  _validate_profile_steps(t)
  storage.check(t.compile_cache_dir, 'train.compile_cache_dir')
  _validate_optim(o, t)


def _validate_spike(t):
  """train.spike and train.data_skips (zoo/train/spikes.py)."""
  s = t.spike
  if s.action not in SPIKE_ACTIONS:
    raise ConfigError(f'train.spike.action={s.action!r}; use one of {", ".join(SPIKE_ACTIONS)}')
  signals = [name for name in s.signals.split(',') if name]
  if not signals or any(name not in SPIKE_SIGNALS for name in signals):
    raise ConfigError(f'train.spike.signals={s.signals!r}; use a comma-separated list of '
                      f'{", ".join(SPIKE_SIGNALS)}')
  if s.window < 2:
    raise ConfigError(f'train.spike.window={s.window} cannot hold a mean and a standard '
                      'deviation; use 2 or more steps (50 is the default)')
  if s.sigmas <= 0 or s.min_rise < 0:
    raise ConfigError(f'train.spike.sigmas={s.sigmas} must be positive and '
                      f'train.spike.min_rise={s.min_rise} >= 0')
  for name in ('rollback_steps', 'max_rollbacks', 'rollback_window'):
    if s[name] <= 0:
      raise ConfigError(f'train.spike.{name}={s[name]} must be positive')
  if s.skip_batches < 0:
    raise ConfigError(f'train.spike.skip_batches={s.skip_batches} must be >= 0')
  kept = (t.keep_checkpoints - 1) * t.checkpoint_every
  if s.action == 'rollback' and kept < s.rollback_steps - 1:
    need = -(-(s.rollback_steps - 1) // t.checkpoint_every) + 1
    raise ConfigError(
        f'train.spike.rollback_steps={s.rollback_steps} needs a checkpoint that old, but '
        f'train.keep_checkpoints={t.keep_checkpoints} x train.checkpoint_every='
        f'{t.checkpoint_every} keeps {kept} steps back; set train.keep_checkpoints={need} '
        'or lower train.spike.rollback_steps')
  data_skips(t.data_skips)


def data_skips(text, field='train.data_skips'):
  """'STEP:COUNT,...' -> [(STEP, COUNT), ...]; a ConfigError naming `field` otherwise."""
  skips = []
  for part in filter(None, (p.strip() for p in text.split(','))):
    try:
      step, count = (int(v) for v in part.split(':'))
    except ValueError:
      step = count = -1
    if step < 0 or count <= 0:
      raise ConfigError(f"{field}={text!r}: {part!r} is not 'STEP:COUNT' (after train step "
                        'STEP >= 0, skip COUNT > 0 batches)')
    skips.append((step, count))
  return skips


def _validate_profile_steps(t):
  steps = tuple(t.profile_steps)
  if len(steps) != 2 or not all(isinstance(v, int) for v in steps):
    raise ConfigError(f'train.profile_steps={t.profile_steps!r} must be (FIRST, COUNT): two '
                      'integers, e.g. (10, 5); (0, 0) = no trace')
  first, count = steps
  if count < 0 or (count and not 1 <= first <= first + count - 1 <= t.steps):
    raise ConfigError(f'train.profile_steps={steps} traces steps outside the run (1..'
                      f'train.steps={t.steps}); use FIRST >= 1 and FIRST + COUNT - 1 <= '
                      f'{t.steps}, or (0, 0) for no trace')


def _validate_optim(o, t):
  _one_of('optim.name', o.name, OPTIMIZERS)
  _positive('optim.learning_rate', o.learning_rate)
  _one_of('optim.schedule', o.schedule, SCHEDULES)
  if o.warmup_steps < 0 or o.warmup_steps >= t.steps:
    raise ConfigError(f'optim.warmup_steps={o.warmup_steps} must be in [0, train.steps={t.steps})')
  if o.warmup_tokens < 0 or o.decay_tokens < 0 or (
      o.decay_tokens and o.warmup_tokens >= o.decay_tokens):
    raise ConfigError(f'optim.warmup_tokens={o.warmup_tokens:g} and optim.decay_tokens='
                      f'{o.decay_tokens:g} must be >= 0, warmup below the decay horizon')
  if o.warmup_tokens and o.warmup_steps:
    raise ConfigError(f'optim.warmup_tokens={o.warmup_tokens:g} and optim.warmup_steps='
                      f'{o.warmup_steps} are both set; a schedule in tokens warms up in '
                      'tokens: set optim.warmup_steps=0')
  if o.weight_decay_power not in (1, 2):
    raise ConfigError(f'optim.weight_decay_power={o.weight_decay_power} must be 1 (weight_decay '
                      'x lr, decoupled) or 2 (weight_decay x lr^2, PaLM)')
  for name in ('weight_decay', 'clip_norm', 'eps', 'min_learning_rate_ratio'):
    if o[name] < 0:
      raise ConfigError(f'optim.{name}={o[name]} must be >= 0')
  for name in ('b1', 'b2'):
    if not 0 <= o[name] < 1:
      raise ConfigError(f'optim.{name}={o[name]} must be in [0, 1)')
  if o.schedule == 'wsd':
    if not 0 < o.decay_fraction < 1:
      raise ConfigError(f'optim.decay_fraction={o.decay_fraction} must be in (0, 1): the share '
                        "of train.steps the 'wsd' schedule spends decaying")
    if o.warmup_steps + o.decay_fraction * t.steps > t.steps:
      raise ConfigError(f'optim.warmup_steps={o.warmup_steps} + the wsd decay '
                        f'(optim.decay_fraction={o.decay_fraction} x {t.steps} steps) exceed '
                        'train.steps; shorten one of them')
  _validate_adafactor(o)


def _validate_adafactor(o):
  a, defaults = o.adafactor, _optim()
  if o.name != 'adafactor':
    changed = [k for k in a if a[k] != defaults.adafactor[k]]
    if changed:
      raise ConfigError(f'optim.adafactor.{changed[0]}={a[changed[0]]!r} is read only by '
                        "Adafactor; set optim.name='adafactor' or leave it at "
                        f'{defaults.adafactor[changed[0]]!r}')
    return
  for name, own in (('b1', 'momentum'), ('b2', 'decay_rate'), ('eps', 'eps')):
    if o[name] != defaults[name]:
      raise ConfigError(f"optim.{name}={o[name]} is AdamW's; optim.name='adafactor' reads "
                        f'optim.adafactor.{own} instead (leave optim.{name} at '
                        f'{defaults[name]})')
  if not 0 < a.decay_rate <= 1:
    raise ConfigError(f'optim.adafactor.decay_rate={a.decay_rate} must be in (0, 1] '
                      '(beta2 = 1 - step^-decay_rate)')
  if not 0 <= a.momentum < 1:
    raise ConfigError(f'optim.adafactor.momentum={a.momentum} must be in [0, 1) (0 = none)')
  if a.clipping_threshold < 0 or a.eps <= 0:
    raise ConfigError(f'optim.adafactor.clipping_threshold={a.clipping_threshold} must be >= 0 '
                      f'(0 = off) and optim.adafactor.eps={a.eps} > 0')
  if not a.factored and a.min_dim_size_to_factor != defaults.adafactor.min_dim_size_to_factor:
    raise ConfigError(f'optim.adafactor.min_dim_size_to_factor={a.min_dim_size_to_factor} '
                      'says which moments to factor, but optim.adafactor.factored=False '
                      'factors none; drop one of them')
  _positive('optim.adafactor.min_dim_size_to_factor', a.min_dim_size_to_factor)


def context_unsupported(m):
  """Why mesh.context > 1 (the sequence split, ring attention) is not built for model
  config `m`, or None when it is."""
  if not families.get(m).CONTEXT_CHUNKS:
    return (f"ring attention is not built for model.family={m.family!r} (cross-attention "
            "over a split sequence)")
  if m.position in ('t5_bias', 'alibi'):
    return (f"ring attention takes no position bias, and model.position={m.position!r} adds "
            "one; use 'rope' or 'learned'")
  if m.attention.kernel not in ('auto', 'xla', 'splash'):
    return ("ring attention runs its local blocks in splash or XLA; set "
            f"model.attention.kernel='auto', 'splash' or 'xla', not {m.attention.kernel!r}")
  if m.moe.num_experts and m.moe.capacity_factor:
    return (f'model.moe.capacity_factor={m.moe.capacity_factor} gives each expert slots per '
            'whole sequence, which a split sequence does not hold; route dropless '
            '(model.moe.capacity_factor=0)')
  if m.mtp.depth:
    return (f'model.mtp.depth={m.mtp.depth}: the prediction modules read the sequence in order, '
            'not split; set model.mtp.depth=0')
  return None


def _validate_context(context, m, d):
  """mesh.context != 1: a combination it is built for, and a sequence that splits into its
  chunks (a -1 is checked once the mesh is known, by sharding.check_divisible)."""
  if context == 1:
    return
  reason = context_unsupported(m)
  if reason:
    raise ConfigError(f'mesh.context={context}: {reason}; or use mesh.context=1')
  per_device = families.get(m).CONTEXT_CHUNKS
  chunks = context * per_device
  if context > 1 and d.seq_len % chunks:
    raise ConfigError(f'data.seq_len={d.seq_len} does not split into {chunks} chunks for '
                      f'mesh.context={context}' +
                      (' (a causal model holds two chunks per device, one early and one '
                       'late)' if per_device == 2 else '') +
                      f'; use a multiple of {chunks}')
  if context > 1 and m.attention.kernel == 'splash':
    chunk = d.seq_len // chunks
    if chunk % splash.LANES:
      raise ConfigError(f"model.attention.kernel='splash' with mesh.context={context}: each "
                        f'ring chunk (data.seq_len / {chunks} = {chunk} tokens) must be a '
                        f"multiple of {splash.LANES}; lengthen data.seq_len or use 'auto' or "
                        "'xla'")
    try:
      splash.block_sizes(chunk, chunk, m.attention.block_q, m.attention.block_kv)
    except ValueError as e:
      raise ConfigError(f'{e} (mesh.context={context}: {chunk}-token ring chunks)') from None


def _validate_stage(mesh, m, batch_size):
  """mesh.stage != 1: stacks the stages divide, enough microbatches, a combination built
  (the rows each microbatch holds are checked against the batch axes with the mesh)."""
  stages = mesh.stage
  if m.pipeline_microbatches < 0:
    raise ConfigError(f'model.pipeline_microbatches={m.pipeline_microbatches} must be >= 0 '
                      '(0 = one per stage)')
  if m.pipeline_repeats < 1:
    raise ConfigError(f'model.pipeline_repeats={m.pipeline_repeats} must be >= 1 (1 = '
                      'fill-drain)')
  if stages == 1:
    if m.pipeline_repeats != 1:
      raise ConfigError(f'model.pipeline_repeats={m.pipeline_repeats} needs a pipeline; set '
                        'mesh.stage > 1 or model.pipeline_repeats=1')
    return
  field = f'mesh.stage={stages}'
  if m.attention.pattern:
    raise ConfigError(f'{field} with model.attention.pattern={m.attention.pattern!r}: a '
                      'pipeline of patterned layers is not built; set mesh.stage=1')
  if not m.scan_layers:
    raise ConfigError(f'{field} pipelines the scanned layer stack; set model.scan_layers=True')
  if stages < 1:
    return  # -1: checked with the mesh (sharding.check_divisible)
  microbatches = sharding.check_stage_split(m, families.get(m).LAYER_FIELDS, stages, field)
  if batch_size % microbatches:
    raise ConfigError(f'model.pipeline_microbatches={microbatches} does not divide '
                      f'train.batch_size={batch_size}; use a divisor of it')


def _validate_mesh(mesh, sharding_config):
  for axis in sharding.MESH_AXES:
    if mesh[axis] == 0 or mesh[axis] < -1:
      raise ConfigError(f'mesh.{axis}={mesh[axis]} must be positive or -1 (the rest)')
  if mesh.slices < 1:
    raise ConfigError(f'mesh.slices={mesh.slices} must be >= 1 (slices joined over DCN)')
  if mesh.dcn_axis not in sharding.DCN_AXES:
    raise ConfigError(f'mesh.dcn_axis={mesh.dcn_axis!r}: the slices can split '
                      f'{", ".join(sharding.DCN_AXES)}; use one of those')
  rest = [axis for axis in sharding.MESH_AXES if mesh[axis] == -1]
  if len(rest) > 1:
    keep = next(axis for axis in rest if axis != 'data')  # the one set on purpose
    fix = ' '.join(f'--config.mesh.{axis}=1' for axis in rest if axis != keep)
    raise ConfigError(f'mesh: {" and ".join(f"mesh.{a}=-1" for a in rest)}, but at most one '
                      'axis may take the remaining devices' +
                      (' (mesh.data is -1 by default)' if 'data' in rest else '') +
                      f'; give the others a size, e.g. {fix} to keep mesh.{keep}=-1')
  for rule in sharding_config.rules:
    if len(rule) != 2:
      raise ConfigError(f'sharding.rules entry {rule!r}: write (logical_axis, mesh_axes)')
    targets = rule[1] if isinstance(rule[1], (tuple, list)) else (rule[1],)
    for target in targets:
      if target is not None and target not in sharding.MESH_AXES:
        raise ConfigError(f'sharding.rules: {rule[0]!r} -> unknown mesh axis {target!r}; '
                          f'use {sharding.MESH_AXES}')
