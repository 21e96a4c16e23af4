"""The papers' training recipes: optimizer, schedule, peak learning rate, warmup, weight decay,
betas, clipping, dropout, global batch, sequence length and steps, each beside its source.

A config file calls its recipe after its shape's preset (zoo/presets.py). Where a paper does
not say, the comment says so and names the documented practice chosen instead. Batch ramps
(GPT-3, PaLM) and BERT's two sequence lengths are train.phases / train.batch_ramp
(zoo/phases.py); the step count keeps the paper's token budget (or its steps). Llama
3's ramp (405B only, sec. 3.4.1) is not modelled: its final batch runs from the first step.
"""

from zoo import phases


def _adamw(c, learning_rate, warmup_steps, b2, eps, weight_decay, schedule='cosine',
           floor=0.1):
  c.optim.update(name='adamw', schedule=schedule, learning_rate=learning_rate,
                 warmup_steps=warmup_steps, b1=0.9, b2=b2, eps=eps, weight_decay=weight_decay,
                 min_learning_rate_ratio=floor)


def _steps_for(c, tokens):
  return round(tokens / (c.train.batch_size * c.data.seq_len))


def _steps_with_phases(c, tokens):
  """train.steps that trains `tokens` in all, the phases' tokens counted."""
  c.train.steps = 10 ** 15  # past every boundary, to resolve them
  last = phases.resolve(c)[-1]
  return last.first - 1 + max(1, round((tokens - last.tokens_before) / last.tokens_per_step))


def bert(c):
  """Devlin et al. 2019, "BERT", appendix A.2, and the released optimization.py."""
  _adamw(c, learning_rate=1e-4,  # A.2
         warmup_steps=10_000,  # A.2: warmup over the first 10,000 steps
         b2=0.999,  # A.2: beta1 0.9, beta2 0.999
         eps=1e-6,  # optimization.py: AdamWeightDecayOptimizer(epsilon=1e-6)
         weight_decay=0.01,  # A.2: L2 weight decay 0.01 (decoupled in optimization.py)
         schedule='linear', floor=0.0)  # A.2: linear decay (to zero: polynomial_decay end 0)
  c.optim.clip_norm = 1.0  # optimization.py: clip_by_global_norm(grads, clip_norm=1.0)
  c.model.dropout_rate = 0.1  # A.2: dropout 0.1 on all layers
  c.train.batch_size = 256  # A.2: 256 sequences
  c.data.seq_len = 512  # A.2: 512 tokens ...
  c.train.phases = '900000:256:128'  # ... after 90% of the steps at 128 (A.2; its batch too)
  c.train.steps = 1_000_000  # A.2: 1,000,000 steps, ~40 epochs over 3.3B words
  return c


def t5(c, version):
  """Raffel et al. 2020, "T5", sec. 3.1.2 (the baseline pre-training recipe; the released
  checkpoints of sec. 3.7 ran 1M steps of 2048 x 512 instead); v1.1: the T5X release notes."""
  o = c.optim
  o.name, o.schedule = 'adafactor', 'rsqrt'  # 3.1.2: AdaFactor, inverse square root schedule
  o.learning_rate = 0.01  # 3.1.2: 1/sqrt(max(n, k)) with k = 10^4: 0.01 held ...
  o.warmup_steps = 10_000  # ... for the first 10^4 steps, then 1/sqrt(n)
  # Adafactor as Mesh TensorFlow ran it for T5 (not restated in the paper): factored second
  # moments, beta2 = 1 - t^-0.8, update clipping 1.0, steps relative to the parameter scale,
  # no momentum, no weight decay, no gradient-norm clipping (optim.adafactor defaults)
  o.weight_decay, o.clip_norm = 0.0, 0.0
  c.model.dropout_rate = 0.1 if version == '1.0' else 0.0  # 3.1.2: 0.1; v1.1: off in pre-training
  c.train.batch_size = 128  # 3.1.2: 128 sequences ...
  c.data.seq_len = 512  # ... of 512 tokens (2^16 per batch)
  c.train.steps = 2 ** 19  # 3.1.2: 524,288 steps = 2^35 (~34B) tokens
  return c


GPT3_RAMP_START = 16  # App. B: the batch ramps up "from a small value (32k tokens)"


def gpt3_ramp(batch_size):
  """GPT-3's batch ramp as train.batch_ramp, by a rule (App. B gives "over the first 4-12
  billion tokens of training, depending on the model size" and no increment): the ramp's
  length grows linearly with the final batch, from 4B tokens at the smallest sizes' 256
  sequences to 12B at 175B's 1536; the batch grows by the smallest multiple of 16
  sequences that divides the ramp into at most 32 equal increments (each increment
  compiles one more step): 256 -> 16, 512 -> 16, 1024 -> 48, 1536 -> 80."""
  tokens = 4e9 + 8e9 * (batch_size - 256) / (1536 - 256)
  span = batch_size - GPT3_RAMP_START
  increment = next(k for k in range(16, span + 1, 16) if span % k == 0 and span // k <= 32)
  return f'{GPT3_RAMP_START}:{increment}:{tokens / 1e9:.4g}Btokens'


def gpt3(c, batch_size, learning_rate):
  """Brown et al. 2020, "GPT-3", Table 2.1 (batch, learning rate) and appendix B."""
  c.train.batch_size = batch_size  # Table 2.1
  c.train.batch_ramp = gpt3_ramp(batch_size)  # App. B: from 32k tokens, over 4-12B tokens
  c.data.seq_len = 2048  # sec. 2.1: n_ctx 2048
  _adamw(c, learning_rate=learning_rate,  # Table 2.1
         warmup_steps=0,  # the warmup is in tokens (below)
         b2=0.95, eps=1e-8,  # App. B: beta1 0.9, beta2 0.95, eps 1e-8
         weight_decay=0.1,  # App. B: 0.1
         floor=0.1)  # App. B: cosine down to 10% ...
  c.optim.warmup_tokens = 375e6  # App. B: linear warmup over the first 375M tokens
  c.optim.decay_tokens = 260e9  # App. B: ... over 260B tokens, then 10% to the end
  c.optim.clip_norm = 1.0  # App. B: global norm clipping at 1.0
  # dropout: not stated; 0.1 as OPT (Zhang et al. 2022, sec. 2.2), the open replication
  c.model.dropout_rate = 0.1
  c.train.steps = _steps_with_phases(c, 300e9)  # sec. 2.2: 300B training tokens
  return c


def gpt2(c, learning_rate):
  """Radford et al. 2019, "GPT-2", sec. 2.3: a batch of 512 sequences of 1024 tokens; the
  learning rate was "manually tuned" per size and not published, nor the optimizer settings
  or steps: GPT-3's recipe (App. B) at the nearest GPT-3 size stands in."""
  c.train.batch_size = 512  # sec. 2.3
  c.data.seq_len = 1024  # sec. 2.3: context 1024
  _adamw(c, learning_rate=learning_rate,  # not published; GPT-3 Table 2.1 at the nearest size
         warmup_steps=_steps_for(c, 375e6),  # GPT-3 App. B: warmup over 375M tokens
         b2=0.95, eps=1e-8, weight_decay=0.1)  # GPT-3 App. B
  c.optim.clip_norm = 1.0  # GPT-3 App. B
  c.model.dropout_rate = 0.1  # the released hyperparameters (resid/attn/embd pdrop 0.1)
  c.train.steps = _steps_for(c, 300e9)  # not published; GPT-3's 300B tokens
  return c


def llama(c, learning_rate, tokens, warmup_steps=2000, floor=0.1, batch_tokens=4 * 2**20):
  """Touvron et al. 2023, "Llama 2", sec. 2.2 (what Llama 3's paper does not restate for its
  8B and 70B): AdamW (0.9, 0.95, eps 1e-5), cosine to 10% of the peak, warmup 2000 steps,
  weight decay 0.1, clipping 1.0, 4M-token batches. Callers give the rest with its source."""
  c.train.batch_size = batch_tokens // c.data.seq_len  # sec. 2.2: 4M tokens per batch
  _adamw(c, learning_rate=learning_rate, warmup_steps=warmup_steps, b2=0.95, eps=1e-5,
         weight_decay=0.1, floor=floor)
  c.optim.clip_norm = 1.0  # sec. 2.2
  c.model.dropout_rate = 0.0  # not stated; no dropout, as every open Llama pre-training run
  c.train.steps = _steps_for(c, tokens)
  return c


# sec. 5, for 540B: batch 512 until step 50k, 1024 until step 115k, then 2048 (sequences of
# 2048): the doublings at these token counts
PALM_DOUBLINGS = (50_000 * 512 * 2048, (50_000 * 512 + 65_000 * 1024) * 2048)


def palm_phases(batch_size, doublings):
  """PaLM's batch phases as train.phases: the final batch halved `doublings` times at the
  start, doubled at PALM_DOUBLINGS' token counts. sec. 5 states the boundaries for 540B
  (two doublings: steps 50k and 115k) and says the smaller models "followed similar
  schedules"; Table 1 gives them one doubling (8B: 256 -> 512, 62B: 512 -> 1024), which
  the zoo puts at 540B's first boundary in tokens (52.4B)."""
  return ','.join(f'{tokens:.0f}tokens:{batch_size >> (doublings - k)}:2048'
                  for k, tokens in enumerate(PALM_DOUBLINGS[:doublings]))


def palm(c, batch_size, doublings, tokens=780e9):
  """Chowdhery et al. 2022, "PaLM", sec. 5 (Training setup)."""
  o, a = c.optim, c.optim.adafactor
  o.name, o.schedule = 'adafactor', 'rsqrt'  # sec. 5: Adafactor; 1e-2 for 10k steps, then
  o.learning_rate, o.warmup_steps = 1e-2, 10_000  # ... decayed as 1/sqrt(k)
  a.factored = False  # sec. 5: "without factorization" (Adam with parameter scaling)
  a.momentum = 0.9  # sec. 5: beta1 = 0.9
  a.decay_rate = 0.8  # sec. 5: beta2 = 1 - k^-0.8
  a.clipping_threshold = 1.0  # sec. 5: update clipping at 1.0 (per parameter, as Adafactor)
  o.clip_norm = 1.0  # sec. 5: global norm gradient clipping at 1.0
  o.weight_decay, o.weight_decay_power = 1.0, 2  # sec. 5: "dynamic weight decay of lr^2.0"
  c.model.dropout_rate = 0.0  # sec. 5: no dropout in pre-training
  c.train.batch_size = batch_size  # sec. 5: the largest of its ramp (Table 1) ...
  c.data.seq_len = 2048  # sec. 5: 2048-token sequences
  c.train.phases = palm_phases(batch_size, doublings)  # ... after the smaller ones
  c.train.steps = _steps_with_phases(c, tokens)  # sec. 5 / Table 1: 780B tokens, every size
  return c


def deepseek_v3(c):
  """DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", sec. 4.2 (hyper-parameters)."""
  c.data.seq_len = 4096  # 4.2: maximum sequence length 4K in pre-training
  c.train.batch_size = 15_360  # 4.2: the batch grows from 3072 to 15360 ...
  c.train.batch_ramp = '3072:768:469Btokens'  # ... over the first 469B tokens (16 equal steps:
  # the report gives no increment)
  _adamw(c, learning_rate=2.2e-4,  # 4.2: 2.2e-4 after a linear warmup ...
         warmup_steps=2000,  # ... over the first 2K steps, held to 10T tokens, then decayed
         b2=0.95, eps=1e-8,  # 4.2: beta1 0.9, beta2 0.95 (eps not stated: optax's default)
         weight_decay=0.1,  # 4.2
         schedule='wsd', floor=0.1)  # to 2.2e-5 over the last 4.8T (the report: a cosine
  c.optim.decay_fraction = 4.8 / 14.8  # curve over 4.3T, then 2.2e-5 and 7.3e-6 steps)
  c.optim.clip_norm = 1.0  # 4.2: gradient clipping norm 1.0
  m = c.model
  m.embed_init_std = m.kernel_init_std = 0.006  # 4.2: weights N(0, 0.006)
  m.moe.bias_update_rate = 0.001  # 4.2: gamma 0.001 for the first 14.3T tokens (then 0)
  m.moe.balance_loss, m.moe.balance_scope = 0.0001, 'sequence'  # 4.2: alpha 0.0001
  first_10t = _steps_with_phases(c, 10e12)
  c.train.steps = _steps_with_phases(c, 14.8e12)  # 4.2: 14.8T tokens
  # 4.2: the MTP loss weight 0.3 for the first 10T tokens, 0.1 for the remaining 4.8T
  m.mtp.loss_weight, m.mtp.late_loss_weight = 0.3, 0.1
  m.mtp.late_from = first_10t / c.train.steps
  return c


def deepseek_v3_2(c, stage):
  """DeepSeek-AI 2025, "DeepSeek-V3.2", sec. 2.1 (continued pre-training from
  DeepSeek-V3.1-Terminus at 128K tokens): `stage` 'warmup', the dense warm-up (the indexer
  alone trains, by KL to the main attention), or 'sparse', DSA's training (every parameter;
  the indexer by its KL over the kept keys, its input detached)."""
  c.data.seq_len = 131_072  # 2.1: both stages train at 128K tokens
  c.model.mla.index_stage = stage
  if stage == 'warmup':
    c.train.batch_size = 16  # 2.1: 16 sequences of 128K tokens a step, ...
    c.train.steps = 1000  # ... for 1000 steps (2.1B tokens)
    learning_rate = 1e-3  # 2.1
  else:
    c.model.mla.index_top_k = 2048  # 2.1: 2048 keys per query
    c.train.batch_size = 480  # 2.1: 480 sequences of 128K tokens a step, ...
    c.train.steps = 15_000  # ... for 15,000 steps (943.7B tokens)
    learning_rate = 7.3e-6  # 2.1
  # not stated: DeepSeek-V3's AdamW (sec. 4.2) held at the stage's rate, no warm-up
  _adamw(c, learning_rate=learning_rate, warmup_steps=0, b2=0.95, eps=1e-8, weight_decay=0.1,
         schedule='constant')
  c.optim.clip_norm = 1.0
  return c


def deepseek_v2_lite(c):
  """DeepSeek-AI 2024, "DeepSeek-V2", appendix B (DeepSeek-V2-Lite's pre-training)."""
  c.data.seq_len = 4096
  c.train.batch_size = 4608  # B: 4608 sequences
  _adamw(c, learning_rate=4.2e-4,  # B: maximum learning rate 4.2e-4
         warmup_steps=2000, b2=0.95, eps=1e-8, weight_decay=0.1,  # as DeepSeek-V2 (sec. 3.1)
         schedule='wsd', floor=0.1)  # x0.316 at 80% and 90% of training: the zoo decays
  c.optim.decay_fraction = 0.2  # linearly over the last 20% to the same 0.1
  c.optim.clip_norm = 1.0
  c.model.moe.balance_loss, c.model.moe.balance_scope = 0.001, 'sequence'  # B: alpha1 0.001
  c.train.steps = _steps_for(c, 5.7e12)  # B: 5.7T tokens
  return c


def deepseek_moe(c):
  """Dai et al. 2024, "DeepSeekMoE", sec. 4.1 (the training settings of its 2B model)."""
  c.data.seq_len = 2048  # 4.1: sequences of up to 2K tokens ...
  c.train.batch_size = 2048  # ... in batches of 2K (4M tokens)
  _adamw(c, learning_rate=1.08e-3,  # 4.1: the 2B model's maximum learning rate
         warmup_steps=2000,  # 4.1: linear warmup over the first 2K steps
         b2=0.95, eps=1e-8,  # 4.1: beta1 0.9, beta2 0.95 (eps not stated: optax's default)
         weight_decay=0.1,  # 4.1
         schedule='wsd', floor=0.1)  # 4.1: x0.316 at 80% and again at 90% of the steps; the
  c.optim.decay_fraction = 0.2  # zoo decays linearly over the last 20% to the same 0.1
  c.optim.clip_norm = 1.0  # 4.1: gradient clipping norm 1.0
  c.model.dropout_rate = 0.0  # 4.1: no dropout
  c.train.steps = _steps_for(c, 100e9)  # 4.1: 100B tokens
  return c


def moonlight_muon(c, learning_rate):
  """Liu et al. 2025, "Muon is Scalable for LLM Training" (Moonlight), sec. 2 and
  Algorithm 1, as MoonshotAI's released Muon runs it: the optimizer only; the schedule,
  batch and steps stay the config's."""
  c.optim.name = 'muon'
  c.optim.learning_rate = learning_rate  # sec. 2: AdamW's rate carries over (the scale)
  c.optim.muon.update(
      momentum=0.95,  # Algorithm 1: mu 0.95
      nesterov=True,  # the released Muon's default (Algorithm 1 writes plain momentum)
      ns_steps=5,  # Newton-Schulz iterations, Jordan's quintic coefficients
      update_rms=0.2)  # sec. 2: update x 0.2 sqrt(max(A, B)), AdamW's typical RMS
  # sec. 2: weight decay on Muon's matrices too, as AdamW's (decoupled, times the rate);
  # c.optim.weight_decay stays the config's. AdamW (b1, b2, eps) takes the embeddings,
  # norms and heads, at the same rate (sec. 2; the zoo's split: zoo/muon.py).
  return c


def kimi_k2(c):
  """Kimi Team 2025, "Kimi K2: Open Agentic Intelligence", sec. 2.1 (MuonClip) and 2.4
  (the pre-training recipe): the optimizer, schedule, batch and tokens of the 4K stage."""
  c.data.seq_len = 4096  # 2.4: a 4,096-token context window
  c.train.batch_size = 16_384  # 2.4: ~67M tokens a batch (2^26 = 16,384 x 4,096)
  moonlight_muon(c, learning_rate=2e-4)  # 2.1: Muon at Moonlight's RMS-matched update
  c.optim.update(schedule='wsd',  # 2.4: the WSD schedule, ...
                 warmup_steps=500,  # ... a 500-step warm-up, ...
                 min_learning_rate_ratio=0.1,  # ... 2e-4 for 10T tokens, then down to 2e-5
                 decay_fraction=5.5 / 15.5,  # over the last 5.5T (the report: a cosine decay;
                 weight_decay=0.1)  # the zoo's wsd decays linearly); 2.4: weight decay 0.1
  c.optim.muon.qk_clip = 100.0  # 2.1: QK-Clip threshold tau = 100
  c.model.attention.log_max_logit = True  # QK-Clip reads each head's max logit
  c.train.steps = _steps_for(c, 15.5e12)  # 2.4: 15.5T tokens
  m = c.model
  # not stated in the report: DeepSeek-V3's loss-free bias and sequence-wise loss, whose
  # router and release layout (e_score_correction_bias) K2 keeps
  m.moe.bias_update_rate = 0.001
  m.moe.balance_loss, m.moe.balance_scope = 0.0001, 'sequence'
  return c


def gemma_distillation(c, teacher):
  """Gemma Team 2024, "Gemma 2", sec. 3.2: the small models learn from a larger teacher's
  probability of each token given its context, the cross-entropy to them in place of
  next-token prediction; Gemma Team 2025, "Gemma 3", sec. 2.3: 256 logits a token. The
  teacher is read from the workdir `teacher` (an import: python -m zoo.convert.hf)."""
  t = c.train.teacher
  t.workdir = teacher  # the reports do not name the teacher
  t.weight = 1.0  # Gemma 2 sec. 3.2: the teacher's distribution replaces the targets
  t.temperature = 1.0  # not stated: the teacher's own probabilities
  # Gemma 3 sec. 2.3 samples 256 logits a token by the teacher's probabilities; the zoo
  # takes the 256 most likely, renormalised (deterministic, the bulk of the mass)
  t.top_k = 256
  return c
