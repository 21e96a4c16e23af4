"""Mixtures: two sources interleaved in the configured proportions, per-source token counts
in every batch, exact resume, and the one-line errors."""

import grain
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo.data import corpus as corpus_lib
from zoo.data import pipeline

BOS, EOS = 2, 3


def _source(low, count=50):
  """Documents [BOS, 4 pieces from low.., EOS]: the piece after BOS names the source."""
  return [np.asarray([BOS, *range(low + i % 20, low + i % 20 + 4), EOS], np.int32)
          for i in range(count)]


def _mixture_dataset(weights=(0.7, 0.3), seed=0):
  c = config_lib.base().data
  c.seq_len = 16
  mixture = pipeline.Mixture(tuple(grain.MapDataset.source(_source(low))
                                   for low in (10, 200)), weights)
  return pipeline.make_dataset(mixture, c, helpers.batch_spec(c, 4), train=True, seed=seed)


def test_a_two_source_mixture_gives_the_configured_proportions_and_counts():
  it = iter(_mixture_dataset())
  documents, counted = np.zeros(2), np.zeros(2)
  for _ in range(1000):
    batch = next(it)
    starts = (batch['positions'] == 0) & (batch['segment_ids'] > 0)
    first_piece = batch['targets'][starts]  # BOS predicts the document's first piece
    documents += [np.sum(first_piece < 100), np.sum(first_piece >= 200)]
    counted += batch[pipeline.SOURCE_TOKENS]
    assert batch[pipeline.SOURCE_TOKENS].sum() == np.sum(batch['segment_ids'] > 0)
  assert abs(documents[0] / documents.sum() - 0.7) < 0.02
  assert abs(counted[0] / counted.sum() - 0.7) < 0.02  # equal lengths: tokens follow documents


def test_a_mixture_resumes_exactly():
  helpers.assert_resumes_exactly(_mixture_dataset(seed=3), skip=500)


@pytest.mark.parametrize('spec,message', [
    ('books:0.7,wiki:-0.3', r"data.mixture: 'wiki:-0.3' is not PATH:WEIGHT with a positive"),
    ('books:0.7,wiki', r"data.mixture: 'wiki' is not PATH:WEIGHT"),
    ('books:0', r"'books:0' is not PATH:WEIGHT with a positive weight"),
])
def test_a_weight_that_is_not_positive_is_one_line(spec, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    corpus_lib.parse_mixture(spec)
  assert corpus_lib.parse_mixture('gs://b/books:0.7,/data/wiki:0.3') == [
      ('gs://b/books', 0.7), ('/data/wiki', 0.3)]


class _Sentinels:
  bos_id, eos_id = BOS, EOS
  sentinel_ids = staticmethod(lambda count: tuple(range(999, 999 - count, -1)))


def _span_mixture_dataset(seed=0):
  c = config_lib.base()
  c.model.vocab_size = 1000
  c.data.objective, c.data.seq_len, c.data.target_seq_len = 'span_corruption', 32, 16
  mixture = pipeline.Mixture(tuple(grain.MapDataset.source(_source(low))
                                   for low in (10, 200)), (0.7, 0.3))
  return pipeline.make_dataset(mixture, c.data, helpers.batch_spec(c.data, 4), train=True,
                               seed=seed, tokenizer=_Sentinels)


def test_span_corruption_of_a_mixture_counts_each_sources_input_tokens():
  it = iter(_span_mixture_dataset())
  counted, kept = np.zeros(2), np.zeros(2)
  for _ in range(200):
    batch = next(it)
    real = batch['encoder_segment_ids'] > 0
    assert batch[pipeline.SOURCE_TOKENS].sum() == np.sum(real)  # sentinels and EOS counted
    counted += batch[pipeline.SOURCE_TOKENS]
    pieces = batch['encoder_inputs'][real]
    kept += [np.sum(pieces < 100), np.sum((pieces >= 200) & (pieces < 900))]
  assert abs(counted[0] / counted.sum() - 0.7) < 0.03 and abs(kept[0] / kept.sum() - 0.7) < 0.03


def test_span_corruption_of_a_mixture_resumes_exactly():
  helpers.assert_resumes_exactly(_span_mixture_dataset(seed=3), skip=100)
