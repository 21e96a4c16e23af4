"""A rule-based reward for math answers (configs/post/deepseekmath_grpo.py): 1.0 when the
completion's last \\boxed{...} holds the example's answer (spaces, a trailing period and
the $ signs aside; numbers compared as numbers), else 0.0."""

import math


def last_boxed(text):
  """The contents of the last \\boxed{...} in text (braces balanced), or None."""
  start = text.rfind('\\boxed{')
  if start < 0:
    return None
  depth, at = 0, start + len('\\boxed{')
  for i in range(at, len(text)):
    depth += {'{': 1, '}': -1}.get(text[i], 0)
    if depth < 0:
      return text[at:i]
  return None


def _normal(answer):
  answer = str(answer).strip().strip('$').rstrip('.').replace(' ', '')
  try:
    return float(answer.replace(',', ''))
  except ValueError:
    return answer


def boxed_answer(completion, example):
  found = last_boxed(completion)
  if found is None:
    return 0.0
  got, want = _normal(found), _normal(example['answer'])
  if isinstance(got, float) and isinstance(want, float):
    return float(math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9))
  return float(got == want)
