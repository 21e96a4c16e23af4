"""Writes tests/slow.txt, the tests left out of the fast tier, from a full run's timings.

    python -m pytest tests --durations=0 > durations.log
    python -m tests.tiers durations.log [--seconds=2]

A test is slow when its setup, call and teardown took `--seconds` or more together in that
run (module fixtures are charged to the first test that builds them). tests/conftest.py
marks the listed tests `slow`; `python -m pytest tests -m "not slow"` runs the rest.
"""

import argparse
import collections
import os
import re

SLOW_LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'slow.txt')
_HEADER = ('# Tests left out of the fast tier (python -m pytest tests -m "not slow"): each took\n'
           '# {seconds:g} s or more in a full run on 2 cores. Made by python -m tests.tiers LOG\n'
           '# (tests/tiers.py); tests/conftest.py marks them slow.\n')


def seconds_per_test(text):
  """{node id: seconds} from pytest's --durations=0 lines."""
  out = collections.Counter()
  for seconds, nodeid in re.findall(r'^([\d.]+)s (?:setup|call|teardown)\s+(\S+)$', text,
                                    re.M):
    out[nodeid] += float(seconds)
  return out


def read():
  """The node ids tests/slow.txt lists."""
  if not os.path.exists(SLOW_LIST):
    return set()
  with open(SLOW_LIST, encoding='utf-8') as f:
    return {line.strip() for line in f if line.strip() and not line.startswith('#')}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('log', help='the output of python -m pytest tests --durations=0')
  parser.add_argument('--seconds', type=float, default=2.0)  # the fast tier under 5 min
  args = parser.parse_args()
  with open(args.log, encoding='utf-8') as f:
    timed = seconds_per_test(f.read())
  slow = sorted(n for n, s in timed.items() if s >= args.seconds)
  with open(SLOW_LIST, 'w', encoding='utf-8') as f:
    f.write(_HEADER.format(seconds=args.seconds) + ''.join(f'{n}\n' for n in slow))
  fast = sum(s for n, s in timed.items() if s < args.seconds)
  print(f'{len(slow)} of {len(timed)} timed tests are slow; the rest took {fast:.0f} s of '
        f'worker time; wrote {SLOW_LIST}')


if __name__ == '__main__':
  main()
