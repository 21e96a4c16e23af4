"""Tülu 3 SFT on Llama 3.1 8B: instruction tuning on the Tülu 3 SFT mixture's conversations,
the loss on every assistant turn (data.task.kind='chat').

    python -m zoo.convert.hf --model=meta-llama/Llama-3.1-8B --out=runs/post/llama3_8b_hf
    python -m zoo.launch --config=configs/post/tulu3_sft.py --mode=plan --plan_topology=v5p-64
    python -m zoo.launch --config=configs/post/tulu3_sft.py --workdir=runs/post/tulu3_sft

Source: Lambert et al. 2024, "Tülu 3: Pushing Frontiers in Open Language Model
Post-Training", sec. 4 and its SFT hyperparameters (8B): learning rate 5e-6, linear decay
after a 3% warmup, no weight decay, 128 sequences of up to 4096 tokens a step, 2 epochs of
the allenai/tulu-3-sft-mixture (939,344 conversations). The data: that dataset's `messages`
as JSON lines ({"messages": [...]}) in DATA/train.jsonl and a held-out DATA/eval.jsonl; the
template: the Llama 3.1 chat template shipped with the tokenizer (Tülu 3 trained with its
own, which data.task.template can name).
"""

import os

from zoo import config as config_lib

DATA = 'runs/post/tulu3_sft_data'
BASE = 'runs/post/llama3_8b_hf'
CONVERSATIONS = 939_344  # allenai/tulu-3-sft-mixture


def get_config(arg=None):
  shape = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'llama3_8b.py')
  c = config_lib.load(shape + (':smoke' if arg == 'smoke' else ''))
  with c.unlocked():
    c.data.task.kind, c.data.task.path = 'chat', DATA
    c.data.tokenizer.path = f'{BASE}/tokenizer.json'
    c.train.init_params = f'{BASE}/params'
    c.data.seq_len = 4096  # the mixture's conversations cut at 4096 tokens
    c.train.batch_size = 128
    c.train.steps = -(-2 * CONVERSATIONS // c.train.batch_size)  # 2 epochs: 14,678
    c.optim.update(name='adamw', learning_rate=5e-6, schedule='linear',
                   min_learning_rate_ratio=0.0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8,
                   warmup_steps=round(0.03 * c.train.steps))
    c.train.eval_every = c.train.checkpoint_every = 1000
    if arg == 'smoke':
      c.data.tokenizer.path, c.train.init_params = '', ''
      c.data.seq_len, c.train.batch_size, c.train.steps = 64, 8, 4
      c.optim.warmup_steps, c.train.eval_every, c.train.checkpoint_every = 1, 2, 2
    elif arg:
      raise ValueError(f'unknown variant {arg!r} of tulu3_sft; use :smoke or nothing')
  return c
