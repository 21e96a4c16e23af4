"""Streams side by side: local batches, their resumable state, and padded eval passes."""

import numpy as np

from zoo.data import streams


class _Counter:
  """A resumable stream of one-row batches [start, start+1, ...]."""

  def __init__(self, start, stop=None):
    self.start, self.stop = start, stop

  def __iter__(self):
    return _CounterIter(self.start, self.stop)


class _CounterIter:

  def __init__(self, value, stop):
    self.value, self.stop = value, stop

  def __next__(self):
    if self.stop is not None and self.value >= self.stop:
      raise StopIteration
    self.value += 1
    return {'inputs': np.array([[self.value - 1]]), 'segment_ids': np.array([[1]])}

  def get_state(self):
    return {'value': self.value}

  def set_state(self, state):
    self.value = state['value']


def test_streams_fill_consecutive_rows_and_resume_by_stream_index():
  batches = streams.TrainBatches({2: _Counter(100), 3: _Counter(200)}, num_streams=4)
  np.testing.assert_array_equal(next(batches)['inputs'][:, 0], [100, 200])
  state = batches.get_state()
  assert state == {'2-of-4': {'value': 101}, '3-of-4': {'value': 201}}
  # a process that now holds streams 1..3 (another process count) resumes 2 and 3
  resumed = streams.TrainBatches({1: _Counter(0), 2: _Counter(100), 3: _Counter(200)}, 4)
  assert resumed.set_state(state) == [1]
  np.testing.assert_array_equal(next(resumed)['inputs'][:, 0], [0, 101, 201])


def test_an_eval_pass_pads_streams_that_ended_until_all_have():
  batches = streams.eval_batches({0: _Counter(0, 3), 1: _Counter(10, 11)})
  assert [b['inputs'][:, 0].tolist() for b in batches] == [[0, 10], [1, 0], [2, 0]]
  assert [b['segment_ids'][:, 0].tolist() for b in batches] == [[1, 1], [1, 0], [1, 0]]
  assert len(streams.eval_batches({0: _Counter(0, 3)}, limit=2)) == 2
