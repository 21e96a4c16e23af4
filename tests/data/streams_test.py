"""Streams side by side: local batches, their resumable state, and padded eval passes."""

import json

import grain
import numpy as np

from tests import helpers
from zoo import config as config_lib
from zoo import phases
from zoo.data import pipeline
from zoo.data import streams


class _Counter:
  """A resumable stream of one-row batches [start, start+1, ...] (rows=True: of rows)."""

  def __init__(self, start, stop=None, rows=False):
    self.start, self.stop, self.rows = start, stop, rows

  def __iter__(self):
    return _CounterIter(self.start, self.stop, self.rows)


class _CounterIter:

  def __init__(self, value, stop, rows):
    self.value, self.stop, self.rows = value, stop, rows

  def __next__(self):
    if self.stop is not None and self.value >= self.stop:
      raise StopIteration
    self.value += 1
    row = {'inputs': np.array([self.value - 1]), 'segment_ids': np.array([1])}
    return row if self.rows else {k: v[None] for k, v in row.items()}

  def get_state(self):
    return {'value': self.value}

  def set_state(self, state):
    self.value = state['value']


def _one_phase(rows):
  return [phases.Phase(1, 100, rows, 1, 0)]


def test_streams_fill_consecutive_rows_and_resume_by_stream_index():
  spec = {'inputs': ((1, 1), np.int64), 'segment_ids': ((1, 1), np.int64)}
  counters = lambda s, phase, start: _Counter(100 * s - 100, rows=True)
  batches = streams.TrainBatches(counters, [spec], _one_phase(4), [2, 3], num_streams=4)
  np.testing.assert_array_equal(batches.batch(1)['inputs'][:, 0], [100, 200])
  state = batches.get_state()
  assert [state[k]['rows'] for k in ('2-of-4', '3-of-4')] == [{'value': 101}, {'value': 201}]
  # a process that now holds streams 1..3 (another process count) resumes 2 and 3
  resumed = streams.TrainBatches(counters, [spec], _one_phase(4), [1, 2, 3], 4)
  assert resumed.set_state(state) == [1]
  np.testing.assert_array_equal(resumed.batch(2)['inputs'][:, 0], [0, 101, 201])


_DOCS = [np.asarray([2, *range(1000 * k, 1000 * k + n), 3], np.int32)
         for k, n in enumerate([5, 13, 3, 9, 21, 7, 4, 11, 6, 17, 8, 2], start=1)]
# steps 1-2: 2 rows of 8; 3-4: 4 rows of 8; 5-8: 2 rows of 16 (2 streams)
_PHASES = [phases.Phase(1, 2, 2, 8, 0), phases.Phase(3, 4, 4, 8, 32),
           phases.Phase(5, 8, 2, 16, 96)]


def _data(seq_len):
  d = config_lib.base().data
  d.seq_len = seq_len
  return d


def _phased():
  rows = lambda s, phase, start: pipeline.make_rows(
      _DOCS, _data(_PHASES[phase].seq_len), train=True, stream=s, num_streams=2, start=start,
      track_documents=True)
  specs = [helpers.batch_spec(_data(p.seq_len), p.batch_size // 2) for p in _PHASES]
  return streams.TrainBatches(rows, specs, _PHASES, [0, 1], 2)


def _document_of(token):
  return token // 1000 - 1 if token >= 1000 else None  # BOS and EOS belong to none


def test_phases_change_the_batch_with_the_next_rows_and_the_length_at_the_next_document():
  batches = _phased()
  got = [batches.batch(step) for step in range(1, 9)]
  assert [b['inputs'].shape for b in got] == [(2, 8)] * 2 + [(4, 8)] * 2 + [(2, 16)] * 4
  for s in range(2):
    rows = lambda steps, n: [b['inputs'][s * n + r] for b in steps for r in range(n)]
    # the same length: the stream's next rows, as an unphased stream gives them
    plain = iter(pipeline.make_rows(_DOCS, _data(8), train=True, stream=s, num_streams=2))
    np.testing.assert_array_equal(rows(got[:2], 1) + rows(got[2:4], 2),
                                  [next(plain)['inputs'] for _ in range(6)])
    # a new length: from the document after the last one the shorter rows reached (whose
    # tail, if the boundary split it, is not read), every document once, in stream order
    order = [_document_of(d[1]) for d in pipeline._stream(
        grain.MapDataset.source(_DOCS), True, 0, s, 2)[:24]]
    before, after = _documents(rows(got[:2], 1) + rows(got[2:4], 2)), _documents(rows(got[4:], 1))
    assert before == order[:len(before)]
    assert after == order[len(before):len(before) + len(after)]


def _documents(rows):
  """The documents rows hold tokens of, in order (each starts at its BOS, 2)."""
  out, starts = [], False
  for token in np.concatenate(rows):
    starts = starts or token == 2
    if _document_of(token) is not None and starts:
      out.append(_document_of(token))
      starts = False
  return out


def test_phased_batches_resume_exactly_from_every_step():
  reference = _phased()
  want = [reference.batch(step) for step in range(1, 9)]
  for done in range(8):
    first = _phased()
    for step in range(1, done + 1):
      first.batch(step)
    resumed = _phased()
    assert resumed.set_state(json.loads(json.dumps(first.get_state()))) == []
    for step in range(done + 1, 9):
      got = resumed.batch(step)
      for key in want[step - 1]:
        np.testing.assert_array_equal(got[key], want[step - 1][key], err_msg=f'{done} {step}')


def test_an_eval_pass_pads_streams_that_ended_until_all_have():
  batches = streams.eval_batches({0: _Counter(0, 3), 1: _Counter(10, 11)})
  assert [b['inputs'][:, 0].tolist() for b in batches] == [[0, 10], [1, 0], [2, 0]]
  assert [b['segment_ids'][:, 0].tolist() for b in batches] == [[1, 1], [1, 0], [1, 0]]
  assert len(streams.eval_batches({0: _Counter(0, 3)}, limit=2)) == 2


def test_a_skip_drops_that_many_batches_of_every_stream_before_the_next_step():
  spec = {'inputs': ((1, 1), np.int64), 'segment_ids': ((1, 1), np.int64)}
  counters = lambda s, phase, start: _Counter(100 * s, rows=True)
  batches = streams.TrainBatches(counters, [spec], _one_phase(2), [0, 1], 2, skips={2: 3})
  got = [batches.batch(step)['inputs'][:, 0].tolist() for step in (1, 2, 3, 4)]
  assert got == [[0, 100], [1, 101], [5, 105], [6, 106]]  # rows 2, 3, 4 of each dropped
