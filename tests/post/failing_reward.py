"""A reward for tests/post/arithmetic_test.py that works for its first CALLS calls, then
raises: a run stopped by its reward mid-training."""

CALLS = 200
calls = 0


def reward(completion, example):
  global calls
  calls += 1
  if calls > CALLS:
    raise ValueError('the grader is down')
  return float(completion.strip() == str(example['answer']))
