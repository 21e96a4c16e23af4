"""DeepSeekMath-RL's GRPO on DeepSeekMath-Instruct 7B: 64 completions per question scored for
the exact answer, each step's advantages against the question's group.

    python -m zoo.launch --config=configs/post/deepseekmath_grpo.py --mode=plan \
      --plan_topology=v5p-64
    python -m zoo.launch --config=configs/post/deepseekmath_grpo.py \
      --workdir=runs/post/deepseekmath_grpo

Source: Shao et al. 2024, "DeepSeekMath", sec. 4.2: the policy's learning rate 1e-6, KL
coefficient 0.04, 64 outputs sampled per question, a maximum length of 1024, a training batch
of 1024 (16 questions x 64 outputs), one policy update per exploration stage, on the
chain-of-thought questions of GSM8K and MATH in its SFT data (about 144K); one pass over
them is 9,000 steps. They scored with a reward model; DeepSeek-R1 (2025, sec. 2.2.2) with
rules, as here: zoo.post.math_reward checks the last \\boxed{} answer. The shape:
DeepSeek LLM 7B's (Bi et al. 2024, Table 2: 30 layers, d_model 4096, 32 heads, FFN 11008,
vocabulary 102,400). The data: JSON lines {"prompt", "answer"} in DATA/{train,eval}.jsonl;
the instruct model imported with zoo.convert.hf into POLICY.
"""

from zoo import config as config_lib
from zoo import presets

DATA = 'runs/post/deepseekmath_rl_data'
POLICY = 'runs/post/deepseekmath_instruct_hf'
QUESTIONS = 144_000


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size, m.num_layers, m.d_model = 102_400, 30, 4096
  m.num_heads, m.num_kv_heads, m.mlp_dim = 32, 32, 11008
  presets.llama(c, rope_theta=10_000.0, max_length=4096, norm_eps=1e-6)
  c.data.task.kind, c.data.task.path = 'prompts', DATA
  c.data.tokenizer.path = f'{POLICY}/tokenizer.json'
  c.data.seq_len = 1024  # the maximum length, prompt and completion
  t = c.train
  t.objective, t.init_params = 'grpo', f'{POLICY}/params'
  t.grpo.update(group_size=64, max_new_tokens=768, kl_beta=0.04, updates=1,
                reward='zoo.post.math_reward:boxed_answer', advantages='group')
  t.batch_size = 1024  # completions: 16 questions x 64
  t.steps = QUESTIONS // (t.batch_size // t.grpo.group_size)
  c.generate.temperature = 1.0
  c.optim.update(name='adamw', learning_rate=1e-6, schedule='constant', warmup_steps=0,
                 weight_decay=0.0, b1=0.9, b2=0.95)
  t.eval_every = t.checkpoint_every = 200
  if arg == 'smoke':  # LoRA: the reference is the model without its adapters
    presets.smoke(c)
    c.data.tokenizer.path, t.init_params, t.lora.rank = '', '', 4
    c.data.seq_len, t.batch_size, t.steps = 64, 16, 4
    t.grpo.update(group_size=4, max_new_tokens=8)
    c.optim.learning_rate, t.eval_every, t.checkpoint_every = 1e-3, 2, 2
  elif arg:
    raise ValueError(f'unknown variant {arg!r} of deepseekmath_grpo; use :smoke or nothing')
  return c
