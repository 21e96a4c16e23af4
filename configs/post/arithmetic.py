"""The worked post-training example, offline on 2 CPU cores: a small decoder instruction-tuned
on sums (zoo/data/arithmetic.py), then trained on preference pairs with DPO, or with GRPO
against the exact answer as its reward. docs/post.md has the numbers and the figure.

    python -m zoo.data.arithmetic --output=runs/arithmetic/data
    python -m zoo.launch --config=configs/post/arithmetic.py:sft --workdir=runs/arithmetic/sft
    python -m zoo.launch --config=configs/post/arithmetic.py:dpo --workdir=runs/arithmetic/dpo
    python -m zoo.launch --config=configs/post/arithmetic.py:grpo --workdir=runs/arithmetic/grpo

The DPO and GRPO runs start from the SFT run (train.init_params), which is also their
frozen reference, and read its tokenizer. `_smoke` after a variant (`:sft_smoke`) shrinks it
to seconds.
"""

from zoo import config as config_lib

DATA = 'runs/arithmetic/data'
SFT = 'runs/arithmetic/sft'


def get_config(arg='sft'):
  variant, _, size = (arg or 'sft').partition('_')
  c = config_lib.base()
  m = c.model
  m.family, m.vocab_size, m.d_model, m.num_layers = 'decoder', 320, 128, 4
  m.num_heads, m.num_kv_heads, m.mlp_dim, m.max_length = 4, 4, 384, 64
  m.activation, m.norm, m.norm_position, m.position = 'swiglu', 'rmsnorm', 'pre', 'rope'
  m.scan_unroll, m.dropout_rate, m.dtype = 4, 0.0, 'float32'
  c.data.seq_len = 32  # a rendered sum is about 25 pieces
  c.data.tokenizer.split_digits = True  # one piece per digit: sums carry digit by digit
  c.train.log_every = 25
  c.train.eval_batches = 0
  c.optim.weight_decay = 0.0
  if variant == 'sft':
    c.data.task.kind, c.data.task.path = 'chat', f'{DATA}/chat'
    c.train.steps, c.train.batch_size = 600, 64
    c.train.eval_every = c.train.checkpoint_every = 200
    c.optim.learning_rate, c.optim.warmup_steps = 3e-3, 50
  elif variant in ('dpo', 'ipo', 'simpo'):
    c.data.task.kind, c.data.task.path = 'preference', f'{DATA}/preference'
    c.data.tokenizer.path = f'{SFT}/tokenizer/bpe_320.model'
    c.train.objective, c.train.init_params = variant, SFT
    c.train.steps, c.train.batch_size = 200, 32
    c.train.eval_every = c.train.checkpoint_every = 50
    c.train.preference.beta = 0.1
    # RPO's term (Pang et al. 2024): without it DPO lowers the chosen answers' likelihood
    # with the rejected ones' and greedy answers get worse (docs/post.md)
    c.train.preference.nll_weight = 1.0
    c.optim.learning_rate, c.optim.warmup_steps, c.optim.schedule = 5e-4, 10, 'constant'
  elif variant == 'grpo':
    c.data.task.kind, c.data.task.path = 'prompts', f'{DATA}/prompts'
    c.data.tokenizer.path = f'{SFT}/tokenizer/bpe_320.model'
    c.train.objective, c.train.init_params = 'grpo', SFT
    c.train.steps, c.train.batch_size = 100, 128  # 16 prompts x 8 completions per step
    c.train.eval_every = c.train.checkpoint_every = 25
    c.train.grpo.group_size, c.train.grpo.max_new_tokens = 8, 4
    c.train.grpo.reward = 'zoo.data.arithmetic:reward'
    c.generate.temperature = 1.0
    c.optim.learning_rate, c.optim.warmup_steps, c.optim.schedule = 1e-4, 5, 'constant'
  else:
    raise ValueError(f'unknown variant {arg!r} of arithmetic; use :sft, :dpo, :ipo, :simpo or '
                     ':grpo, each optionally with _smoke')
  if size == 'smoke':
    c.train.steps, c.train.eval_every, c.train.checkpoint_every = 4, 2, 2
    c.train.log_every, c.optim.warmup_steps = 1, 1
    c.train.batch_size = 16 if variant == 'grpo' else 8
  elif size:
    raise ValueError(f'unknown size {size!r}; use :{variant}_smoke or :{variant}')
  return c
