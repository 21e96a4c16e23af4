"""Zephyr-7B-beta's DPO on Mistral 7B: preference pairs of UltraFeedback, the reference the
SFT model the policy starts from (train.init_params).

    python -m zoo.launch --config=configs/post/zephyr_dpo.py --mode=plan --plan_topology=v5p-32
    python -m zoo.launch --config=configs/post/zephyr_dpo.py --workdir=runs/post/zephyr_dpo

Source: Tunstall et al. 2023, "Zephyr: Direct Distillation of LM Alignment", sec. 4 (beta
0.1), and the HuggingFaceH4/zephyr-7b-beta model card: learning rate 5e-7, Adam (0.9,
0.999, 1e-8), linear decay after a 10% warmup, 32 pairs a step, 3 epochs of
HuggingFaceH4/ultrafeedback_binarized's train_prefs (61,135 pairs), sequences of up to
1024 tokens (the alignment-handbook recipe). The data: JSON lines {"prompt", "chosen",
"rejected"} in DATA/{train,eval}.jsonl, chosen and rejected the assistant's turns after
the prompt (the dataset's lists without their first, user, message); the SFT model
(zephyr-7b-sft-full, imported with zoo.convert.hf) and its chat template in SFT.
"""

import os

from zoo import config as config_lib

DATA = 'runs/post/ultrafeedback_data'
SFT = 'runs/post/zephyr_sft_hf'
PAIRS = 61_135  # ultrafeedback_binarized train_prefs


def get_config(arg=None):
  shape = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'mistral_7b.py')
  c = config_lib.load(shape + (':smoke' if arg == 'smoke' else ''))
  with c.unlocked():
    c.data.task.kind, c.data.task.path = 'preference', DATA
    c.data.tokenizer.path = f'{SFT}/tokenizer.json'
    c.train.objective, c.train.init_params = 'dpo', f'{SFT}/params'
    c.train.preference.beta = 0.1
    c.data.seq_len = 1024
    c.train.batch_size = 32  # pairs
    c.train.steps = -(-3 * PAIRS // c.train.batch_size)  # 3 epochs: 5,732
    c.optim.update(name='adamw', learning_rate=5e-7, schedule='linear',
                   min_learning_rate_ratio=0.0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8,
                   warmup_steps=round(0.1 * c.train.steps))
    c.train.eval_every = c.train.checkpoint_every = 500
    if arg == 'smoke':  # LoRA: the reference is the model without its adapters
      c.data.tokenizer.path, c.train.init_params, c.train.lora.rank = '', '', 4
      c.data.seq_len, c.train.batch_size, c.train.steps = 64, 8, 4
      c.optim.learning_rate = 1e-3
      c.optim.warmup_steps, c.train.eval_every, c.train.checkpoint_every = 1, 2, 2
    elif arg:
      raise ValueError(f'unknown variant {arg!r} of zephyr_dpo; use :smoke or nothing')
  return c
