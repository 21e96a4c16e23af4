"""Mixtures: two sources interleaved in the configured proportions, per-source token counts
in every batch, exact resume, and the one-line errors."""

import subprocess
import sys

import grain
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo import run as run_lib
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


@pytest.fixture(scope='module')
def two_sources(tmp_path_factory):
  """Prepared sources of short (5-25 words) and long (60-140 words) documents."""
  from zoo.data import prepare  # pylint: disable=g-import-not-at-top
  from zoo.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('sources')
  (root / 'spm.model').write_bytes(
      tokenizer_lib.train(helpers.shakespeare(1500), 500, 'bpe').model_proto)
  words = ' '.join(helpers.shakespeare(300)).split()
  rng = np.random.default_rng(0)
  for name, (low, high) in (('short', (5, 25)), ('long', (60, 140))):
    (root / f'{name}.txt').write_text('\n\n'.join(
        ' '.join(rng.choice(words, rng.integers(low, high))) for _ in range(600)))
    prepare.prepare([str(root / f'{name}.txt')], str(root / name), str(root / 'spm.model'))
  return root


def _mixture_config(root, by, *overrides):
  return helpers.smoke('gpt_shakespeare', f'data.mixture={root / "short"}:0.8,'
                       f'{root / "long"}:0.2', f'data.mixture_by={by}', *overrides)


@pytest.mark.parametrize('by', ['tokens', 'documents'])
def test_a_mixture_by_tokens_gives_each_source_its_share_of_the_tokens(two_sources, by):
  config = _mixture_config(two_sources, by)
  opened = corpus_lib.open_corpus(config.data, str(two_sources / 'run'))
  batches = pipeline.make_dataset(opened.train, config.data, helpers.batch_spec(config.data, 8),
                                  train=True, tokenizer=opened.tokenizer)
  counted = sum(batch[pipeline.SOURCE_TOKENS] for batch, _ in zip(batches, range(400)))
  share = counted[0] / counted.sum()
  if by == 'tokens':
    assert abs(share - 0.8) < 0.01, share
  else:  # 80% of the documents, but the short ones hold far fewer tokens
    assert share < 0.6, share


def test_each_row_counts_the_tokens_of_its_own_steps(two_sources, tmp_path):
  from zoo.train import loop  # pylint: disable=g-import-not-at-top
  from zoo.train import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  config = _mixture_config(two_sources, 'tokens', 'train.steps=6', 'train.log_every=1',
                           'train.eval_every=3', 'optim.warmup_steps=1')
  loop.train(run_lib.resolve(config), str(tmp_path))
  rows = [r for r in metrics_lib.read(str(tmp_path)) if 'loss' in r]
  per_step = config.train.batch_size * config.data.seq_len  # causal_lm rows: no padding
  assert [r['step'] for r in rows] == [1, 2, 3, 4, 5, 6]
  assert [r['tokens_short'] + r['tokens_long'] for r in rows] == [per_step] * 6


def test_source_token_totals_after_a_sigkill_and_resume_equal_an_uninterrupted_runs(
    two_sources, tmp_path):
  from zoo.train import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  overrides = [f'data.mixture={two_sources / "short"}:0.8,{two_sources / "long"}:0.2',
               'train.steps=16', 'train.log_every=1', 'train.checkpoint_every=1',
               'train.eval_every=1000']
  command = lambda workdir: [sys.executable, '-m', 'zoo.launch',
                             f'--config={helpers.config_file("gpt_shakespeare")}',
                             f'--workdir={workdir}', *[f'--config.{o}' for o in overrides]]
  for workdir in ('reference', 'run'):
    if workdir == 'run':
      helpers.kill_after_step(command(tmp_path / workdir), 6, helpers.cpu_env())
    result = subprocess.run(command(tmp_path / workdir), env=helpers.cpu_env(),
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
  rows = {w: helpers.rows_by_step(metrics_lib.read(str(tmp_path / w))) for w in ('reference', 'run')}
  starts = [r['step'] for r in metrics_lib.read(str(tmp_path / 'run')) if r.get('event') == 'start']
  assert len(starts) == 2 and 0 < starts[1] < 16  # killed mid-run, resumed
  for name in ('tokens_short', 'tokens_long'):
    assert [rows['run'][s][name] for s in range(1, 17)] == \
        [rows['reference'][s][name] for s in range(1, 17)]
