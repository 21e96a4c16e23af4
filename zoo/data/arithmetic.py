"""The worked post-training task, made by the zoo (no download): sums of two whole numbers
with one exact answer, as conversations for instruction tuning, preference pairs and
prompts with a verifiable reward (docs/post.md):

  chat        {"messages": [{"role": "user", "content": "17+25="},
                            {"role": "assistant", "content": "42"}]}
  preference  {"prompt": "17+25=", "chosen": "42", "rejected": "32"}
  prompts     {"prompt": "17+25=", "answer": 42}

The instruction-tuning data carries a systematic mistake, as scraped and written data do:
in DROPPED_CARRY of the sums whose units carry, the answer forgets the carry (17+25=32), so
a model tuned on it learns to drop it more often than not. The preference pairs prefer the
exact answer to that mistake (to a near miss where nothing carries); GRPO's reward is the
exact answer. Both should unlearn the mistake on sums never trained on (train and eval
sums are disjoint). `reward` is GRPO's reward (train.grpo.reward=
'zoo.data.arithmetic:reward').

    python -m zoo.data.arithmetic --output=runs/arithmetic/data
"""

import argparse
import json
import os
import re

import numpy as np

KINDS = ('chat', 'preference', 'prompts')
LARGEST = 99  # operands 0..LARGEST
EVAL_SUMS = 200  # held-out (a, b) pairs
DROPPED_CARRY = 0.6  # share of carrying sums whose tuning answer forgets the carry


def problems(seed=0, largest=LARGEST):
  """-> (train, eval): lists of (a, b), every pair of 0..largest once, eval (EVAL_SUMS, at
  most a fifth) drawn apart."""
  pairs = [(a, b) for a in range(largest + 1) for b in range(largest + 1)]
  order = np.random.default_rng(seed).permutation(len(pairs))
  held = min(EVAL_SUMS, len(pairs) // 5)
  return [pairs[i] for i in order[held:]], [pairs[i] for i in order[:held]]


def prompt(a, b):
  return f'{a}+{b}='


def carries(a, b):
  return a % 10 + b % 10 >= 10


def _mistake(a, b, rng):
  """The carry forgotten where the units carry, else a near miss (one or ten off)."""
  if carries(a, b):
    return a + b - 10
  wrong = a + b + int(rng.choice([-10, -1, 1, 10]))
  return wrong if wrong >= 0 else a + b + 1


def example(kind, a, b, rng, dropped_carry=DROPPED_CARRY):
  """One JSON line's object of `kind` for a + b."""
  answer = a + b
  if kind == 'chat':
    told = a + b - 10 if carries(a, b) and rng.random() < dropped_carry else answer
    return {'messages': [{'role': 'user', 'content': prompt(a, b)},
                         {'role': 'assistant', 'content': str(told)}]}
  if kind == 'preference':
    return {'prompt': prompt(a, b), 'chosen': str(answer),
            'rejected': str(_mistake(a, b, rng))}
  return {'prompt': prompt(a, b), 'answer': answer}


def write(directory, seed=0, largest=LARGEST, dropped_carry=DROPPED_CARRY):
  """Writes DIRECTORY/KIND/{train,eval}.jsonl for every kind; returns the directory. The
  held-out conversations are exact (their loss measures the truth)."""
  train, held_out = problems(seed, largest)
  for kind in KINDS:
    os.makedirs(os.path.join(directory, kind), exist_ok=True)
    rng = np.random.default_rng(seed + 1)
    for split, pairs in (('train', train), ('eval', held_out)):
      noise = dropped_carry if split == 'train' else 0.0
      with open(os.path.join(directory, kind, f'{split}.jsonl'), 'w') as f:
        f.writelines(json.dumps(example(kind, a, b, rng, noise)) + '\n' for a, b in pairs)
  return directory


_NUMBER = re.compile(r'\s*(-?\d+)')


def reward(completion, example_):
  """1.0 when the completion starts with the exact answer (the first number in it, spaces
  aside), else 0.0."""
  found = _NUMBER.match(completion)
  return float(found is not None and int(found.group(1)) == int(example_['answer']))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--output', required=True, help='where KIND/{train,eval}.jsonl go')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  print(write(args.output, args.seed))


if __name__ == '__main__':
  main()
