"""Rewards for tests/post/arithmetic_test.py: `reward` works for its first CALLS calls, then
raises (a run stopped by its reward mid-training); `nan_for_odd` is NaN wherever the answer
is odd (groups skipped)."""

CALLS = 200
calls = 0


def reward(completion, example):
  global calls
  calls += 1
  if calls > CALLS:
    raise ValueError('the grader is down')
  return float(completion.strip() == str(example['answer']))


def nan_for_odd(completion, example):
  if example['answer'] % 2:
    return float('nan')
  return float(completion.strip() == str(example['answer']))
