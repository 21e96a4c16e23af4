"""The worked post-training task, made by the zoo (no download): sums of two whole numbers
with one exact answer, as conversations for instruction tuning, preference pairs and
prompts with a verifiable reward (docs/post.md):

  chat        {"messages": [{"role": "user", "content": "17+25="},
                            {"role": "assistant", "content": "42"}]}
  preference  {"prompt": "17+25=", "chosen": "42", "rejected": "43"}
  prompts     {"prompt": "17+25=", "answer": 42}

The rejected answer is a near miss (one off, or a wrong carry: ten off), the mistakes a
half-trained model makes. Train and eval sums are disjoint. `reward` is GRPO's reward
(train.grpo.reward='zoo.data.arithmetic:reward').

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


def problems(seed=0, largest=LARGEST):
  """-> (train, eval): lists of (a, b), every pair of 0..largest once, eval (EVAL_SUMS, at
  most a fifth) drawn apart."""
  pairs = [(a, b) for a in range(largest + 1) for b in range(largest + 1)]
  order = np.random.default_rng(seed).permutation(len(pairs))
  held = min(EVAL_SUMS, len(pairs) // 5)
  return [pairs[i] for i in order[held:]], [pairs[i] for i in order[:held]]


def prompt(a, b):
  return f'{a}+{b}='


def _near_miss(answer, rng):
  wrong = answer + int(rng.choice([-10, -1, 1, 10]))
  return wrong if wrong >= 0 else answer + 1


def example(kind, a, b, rng):
  """One JSON line's object of `kind` for a + b."""
  answer = a + b
  if kind == 'chat':
    return {'messages': [{'role': 'user', 'content': prompt(a, b)},
                         {'role': 'assistant', 'content': str(answer)}]}
  if kind == 'preference':
    return {'prompt': prompt(a, b), 'chosen': str(answer),
            'rejected': str(_near_miss(answer, rng))}
  return {'prompt': prompt(a, b), 'answer': answer}


def write(directory, seed=0, largest=LARGEST):
  """Writes DIRECTORY/KIND/{train,eval}.jsonl for every kind; returns the directory."""
  train, held_out = problems(seed, largest)
  for kind in KINDS:
    os.makedirs(os.path.join(directory, kind), exist_ok=True)
    rng = np.random.default_rng(seed + 1)
    for split, pairs in (('train', train), ('eval', held_out)):
      with open(os.path.join(directory, kind, f'{split}.jsonl'), 'w') as f:
        f.writelines(json.dumps(example(kind, a, b, rng)) + '\n' for a, b in pairs)
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
