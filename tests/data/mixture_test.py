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
