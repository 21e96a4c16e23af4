"""zoo/progress.py: a long wait says so at its cadence, and says nothing once it is over."""

import time

from zoo import progress


def test_a_heartbeat_beats_while_the_block_runs_and_stops_with_it():
  lines = []
  record = lines.append
  with progress.heartbeat('compiling the train step', every=0.05, out=record):
    time.sleep(0.28)
  beats = len(lines)
  time.sleep(0.15)
  assert 3 <= beats <= 6 and len(lines) == beats
  assert lines[0].startswith('  still compiling the train step: ') and lines[0].endswith(' s')
