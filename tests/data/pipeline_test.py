import os

import ml_collections
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo.data import pipeline
from zoo.data import tokenizer as tokenizer_lib
from zoo.families import spans


def _spec(data_config, rows):
  return data_config, helpers.batch_spec(data_config, rows)


def _data_config(path='', seq_len=8):
  c = config_lib.base().data
  c.path, c.seq_len = path, seq_len
  return c


def _docs(lengths, start=10):
  """Documents of distinct, recognisable tokens: [BOS, start.., EOS]."""
  docs, next_token = [], start
  for n in lengths:
    docs.append(np.asarray([2, *range(next_token, next_token + n), 3], np.int32))
    next_token += n
  return docs


def test_packed_rows_keep_documents_apart():
  docs = _docs([3, 5, 2, 9, 4, 1, 6])
  ds = pipeline.make_dataset(docs, *_spec(_data_config(seq_len=8), 2), train=True, seed=0)
  for batch in list(ds[:6]) if hasattr(ds, '__getitem__') else [b for _, b in zip(range(6), ds)]:
    assert batch['inputs'].shape == (2, 8) and batch['inputs'].dtype == np.int32
    np.testing.assert_array_equal(batch['loss_weights'], batch['segment_ids'] > 0)
    for row in range(2):
      seg, pos = batch['segment_ids'][row], batch['positions'][row]
      for s in set(seg[seg > 0]):
        where = np.flatnonzero(seg == s)
        assert np.all(np.diff(where) == 1)  # a segment is contiguous
        assert np.all(np.diff(pos[where]) == 1)  # positions count up inside it
        # targets are the next token of the same document: consecutive ids here, or EOS
        inputs, targets = batch['inputs'][row][where], batch['targets'][row][where]
        ok = (targets == inputs + 1) | (targets == 3) | (inputs == 2)
        assert ok.all()
      starts = np.flatnonzero(np.diff(np.concatenate([[0], seg])) != 0)
      assert all(pos[i] == 0 for i in starts if seg[i] > 0)


def test_train_stream_covers_every_token_each_epoch():
  docs = _docs([3, 5, 2, 9, 4, 1, 6])
  n_tokens = sum(len(d) - 1 for d in docs)
  ds = iter(pipeline.make_dataset(docs, *_spec(_data_config(seq_len=8), 1), train=True,
                                  seed=0))
  seen = []
  while len(seen) < n_tokens:
    batch = next(ds)
    seen.extend(batch['inputs'][0][batch['segment_ids'][0] > 0])
  assert sorted(seen[:n_tokens]) == sorted(t for d in docs for t in d[:-1])


def test_iterator_state_resumes_the_exact_stream():
  docs = _docs([3, 5, 2, 9, 4, 1, 6, 7, 2])
  ds = pipeline.make_dataset(docs, *_spec(_data_config(seq_len=8), 2), train=True, seed=3)
  helpers.assert_resumes_exactly(ds, skip=5, count=6)


def test_seeds_change_the_order_and_streams_see_different_documents():
  docs = _docs([4] * 40)
  first = lambda **kw: next(iter(pipeline.make_dataset(
      docs, *_spec(_data_config(), 2), train=True, **kw)))['inputs']
  assert not np.array_equal(first(seed=0), first(seed=1))
  p0, p1 = first(stream=0, num_streams=2), first(stream=1, num_streams=2)
  assert not set(p0.ravel()) - {2} & set(p1.ravel()) - {2}


def test_eval_stream_is_one_padded_pass():
  docs = _docs([3, 5, 2])
  batches = list(pipeline.make_dataset(docs, *_spec(_data_config(seq_len=8), 4), train=False))
  real = sum(int(np.sum(b['loss_weights'])) for b in batches)
  assert real == sum(len(d) - 1 for d in docs)
  assert all(b['inputs'].shape == (4, 8) for b in batches)


def test_tokenizer_is_trained_once_cached_and_round_trips(tmp_path):
  docs = helpers.shakespeare(2000)
  cfg = ml_collections.ConfigDict({'type': 'bpe', 'vocab_size': 600, 'path': ''})
  cached = tmp_path / 'tokenizer' / 'bpe_600.model'
  assert tokenizer_lib.load_or_train(cfg, str(tmp_path), lambda: docs) == str(cached)
  assert tokenizer_lib.load(str(cached)).vocab_size == 600
  mtime = os.path.getmtime(cached)
  reads = []  # a cached model is never retrained: the documents are not even read
  path = tokenizer_lib.load_or_train(cfg, str(tmp_path), lambda: reads.append(1) or [])
  assert os.path.getmtime(cached) == mtime and not reads
  again = tokenizer_lib.load(path)
  text = 'ROMEO:\nBut, soft!  what light through yonder window breaks?'
  ids = again.encode([text])[0]
  assert again.decode(ids) == text and max(ids) < 600


def test_a_vocabulary_too_small_for_the_byte_pieces_is_a_config_error():
  with pytest.raises(config_lib.ConfigError, match='data.tokenizer.vocab_size=200'):
    tokenizer_lib.train(['some text', 'more text'], 200, 'bpe')


def _mlm_dataset(docs, seq_len=32, batch=64, seed=0):
  docs_text = helpers.shakespeare(400)
  tok = tokenizer_lib.train(docs_text, 600, 'bpe')
  tokens = helpers.tokenize(docs or docs_text, tok)
  data = _data_config(seq_len=seq_len)
  data.objective = 'mlm'
  return tok, tokens, iter(pipeline.make_dataset(tokens, *_spec(data, batch), train=True,
                                                 seed=seed, tokenizer=tok))


def test_mlm_masks_15_percent_80_10_10_and_pairs_half_random_next():
  tok, _, it = _mlm_dataset(None)
  chosen = masked = kept = candidates = 0
  labels = []
  for _ in range(10):
    b = next(it)
    real = b['segment_ids'] > 0
    targets, inputs, weights = b['targets'], b['inputs'], b['loss_weights'] > 0
    assert np.all(targets[:, 0] == tok.bos_id)  # [CLS]
    assert np.all(np.sum((targets == tok.eos_id) & real, axis=1) == 2)  # two [SEP]
    special = np.isin(targets, list(tok.special_ids))
    assert not np.any(weights & special)  # specials never chosen
    assert np.all(inputs[~weights] == targets[~weights])  # only chosen tokens change
    candidates += np.sum(real & ~special)
    chosen += weights.sum()
    masked += np.sum(weights & (inputs == tok.mask_id))
    kept += np.sum(weights & (inputs == targets))
    labels.extend(b['next_sentence_labels'])
    first_sep = np.argmax(targets == tok.eos_id, axis=1)
    for row, sep in enumerate(first_sep):  # sentence A (with [CLS], [SEP]) is type 0
      assert np.all(b['token_type_ids'][row, :sep + 1] == 0)
      assert np.all(b['token_type_ids'][row, sep + 1:real[row].sum()] == 1)
  assert abs(chosen / candidates - 0.15) < 0.02
  assert abs(masked / chosen - 0.8) < 0.05 and abs(kept / chosen - 0.1) < 0.04
  assert abs(np.mean(labels) - 0.5) < 0.1


def test_mlm_next_segment_continues_the_document_when_labelled_so():
  # pieces unique to each document, in sentences (a lone sentence is always a random next)
  docs = [' '.join([f'{letter} {letter} {letter}.'] * 5) for letter in 'bcdefghjkm']
  tok, tokens, it = _mlm_dataset(docs, seq_len=24, batch=32)
  b = next(it)
  for row in range(32):
    first_sep, second_sep = np.flatnonzero(b['targets'][row] == tok.eos_id)[:2]
    sentence_a = set(b['targets'][row, 1:first_sep])
    sentence_b = set(b['targets'][row, first_sep + 1:second_sep])
    source = [set(d) for d in tokens if sentence_a <= set(d)]
    assert len(source) == 1  # sentence A comes from one document
    if b['next_sentence_labels'][row] == 0:
      assert sentence_b <= source[0]
  assert 0 < b['next_sentence_labels'].sum() < 32


class _PairTokens:  # a stand-in tokenizer: [CLS] 2, [SEP] 3, [MASK] 4, sentence end 9
  bos_id, eos_id, mask_id, special_ids = 2, 3, 4, frozenset(range(5))


def _sentence_documents(count, sentences, seed=0):
  """Documents of sentences, each 2..7 distinct ids then the sentence end 9; document k's
  ids are 1000 k + ..., so an id says its document and sentence."""
  rng, docs = np.random.default_rng(seed), []
  for k in range(count):
    body = []
    for j in range(sentences):
      body += [1000 * (k + 1) + 10 * j + i for i in range(rng.integers(2, 8))] + [9]
    docs.append(np.asarray([2, *body, 3], np.int32))
  return docs


def _pair(docs, k, seq_len, seed):
  row = pipeline.mlm_example(docs[k], np.random.default_rng(seed), documents=docs,
                             seq_len=seq_len, tokenizer=_PairTokens, mask_rate=0.15,
                             pieces=np.arange(5, 100), sentence_ends=np.asarray([9]),
                             short_rate=0.1)
  ids = row['targets'][row['segment_ids'] > 0]
  first, second = np.flatnonzero(ids == 3)[:2]
  return ids[1:first], ids[first + 1:second], int(row['next_sentence_labels'])


def test_bert_pairs_are_whole_sentences_with_b_next_or_from_another_document():
  docs = _sentence_documents(20, sentences=12)
  labels, truncated = [], 0
  for seed in range(400):
    k = seed % 20
    a, b, label = _pair(docs, k, seq_len=64, seed=seed)
    labels.append(label)
    assert {t // 1000 - 1 for t in a if t != 9} == {k}  # A: this document
    whole = lambda x: x[0] % 10 == 0 and x[-1] == 9  # from a sentence's start to an end
    if len(a) + len(b) == 64 - 3 and not (whole(a) and whole(b)):
      truncated += 1  # cut to fit: the longer side lost pieces
      continue
    assert whole(a) and whole(b)
    b_documents = {t // 1000 - 1 for t in b if t != 9}
    if label:  # B from one other document, from a sentence's start
      assert len(b_documents) == 1 and k not in b_documents
    else:  # B: the sentences right after A's
      assert b_documents == {k} and b[0] == (a[-2] // 10 + 1) * 10
  assert 0.4 < np.mean(labels) < 0.6 and truncated > 0


def test_a_tenth_of_bert_pairs_are_built_to_a_shorter_random_length():
  docs = _sentence_documents(10, sentences=60)  # every document far longer than a row
  pairs = [_pair(docs, seed % 10, seq_len=128, seed=seed) for seed in range(3000)]
  # IsNext pairs (a NotNext B may also end short, where its document does, as in BERT's)
  lengths = np.asarray([len(a) + len(b) for a, b, label in pairs if not label])
  assert 0.06 < np.mean(lengths < 125 - 8) < 0.14  # 8: one sentence's overshoot
  assert np.median(lengths) == 125


def test_a_pair_too_long_loses_pieces_from_its_longer_side():
  rng = np.random.default_rng(0)
  for sizes, room, want in [((10, 3), 8, (5, 3)), ((6, 6), 8, (4, 4)), ((2, 9), 6, (2, 4))]:
    a, b = np.arange(sizes[0]), 100 + np.arange(sizes[1])
    cut_a, cut_b = pipeline._truncate_pair(a, b, room, rng)
    assert (len(cut_a), len(cut_b)) == want
    for cut, whole in ((cut_a, a), (cut_b, b)):  # a contiguous run of the original
      assert np.array_equal(cut, whole[cut[0] - whole[0]:][:len(cut)]) if len(cut) else True


class _IDS:  # the special ids of the documents _docs makes
  bos_id, eos_id = 2, 3


def _span_config(seq_len=64, target_seq_len=24):
  c = config_lib.base()
  c.model.vocab_size = 1000
  c.data.objective, c.data.seq_len, c.data.target_seq_len = 'span_corruption', seq_len, target_seq_len
  return c.data


class _Sentinels(_IDS):
  sentinel_ids = staticmethod(lambda count: tuple(range(999, 999 - count, -1)))


def _restore(inputs, targets):
  """The raw piece an example was made from: each sentinel of the inputs replaced by the
  span that follows it in the targets (sentinels are the ids >= 900, EOS ends both)."""
  span_of, current = {}, None
  for t in targets[:-1]:
    if t >= 900:
      current = span_of.setdefault(t, [])
    else:
      current.append(t)
  return [t for s in inputs[:-1] for t in (span_of[s] if s >= 900 else [s])]


def test_span_lengths_are_t5s_and_a_full_piece_fills_the_inputs_exactly():
  assert spans.lengths(_span_config(512, 114)) == (568, 512, 114)  # T5's helper
  assert spans.lengths(_span_config(64, 24)) == (70, 64, 14)
  data, rng = _span_config(512, 114), np.random.default_rng(0)
  for _ in range(20):
    piece = np.arange(100, 668, dtype=np.int32)
    ex = pipeline.span_corruption_piece(
        {'inputs': piece, 'inputs_segment_ids': np.ones(568, np.int32)}, rng,
        data_config=data, eos_id=3, sentinels=_Sentinels.sentinel_ids(100))
    inputs, targets = list(ex['encoder_inputs']), list(ex['decoder_targets'])
    assert (len(inputs), len(targets)) == (512, 114) and inputs[-1] == targets[-1] == 3
    assert list(ex['decoder_inputs']) == [0] + targets[:-1]
    sentinels = [t for t in targets if t >= 900]
    assert [t for t in inputs if t >= 900] == sentinels == list(range(999, 999 - 28, -1))
    assert _restore(inputs, targets) == list(piece)


def test_one_epoch_of_span_corruption_reads_every_token_exactly_once():
  data, spec = _spec(_span_config(64, 24), 4)
  lengths = np.random.default_rng(1).integers(10, 5000, 24)
  tokens = iter(100 + np.arange(lengths.sum()) % 797)  # ids below the sentinels' 900..999
  docs = [np.asarray([2, *(next(tokens) for _ in range(n)), 3], np.int32) for n in lengths]
  batches = list(pipeline.make_dataset(docs, data, spec, train=False, tokenizer=_Sentinels))
  pieces, full = [], 0
  for b in batches:
    for row in range(len(b['encoder_inputs'])):
      for segment in set(b['encoder_segment_ids'][row]) - {0}:
        inputs = b['encoder_inputs'][row][b['encoder_segment_ids'][row] == segment]
        targets = b['decoder_targets'][row][b['decoder_segment_ids'][row] == segment]
        pieces.append(_restore(list(inputs), list(targets)))
        full += len(inputs) == 64
  stream = [t for doc in docs for t in doc[1:-1]]  # T5: the bodies joined, no separator
  want = [stream[i:i + 70] for i in range(0, len(stream), 70)]
  assert sorted(pieces) == sorted(want)  # every token once, in its piece
  assert full == len(stream) // 70  # every full piece fills its row's 64 inputs


def test_span_corruption_reconstructs_the_text_with_sentinels_from_the_top():
  data = _span_config()
  rng = np.random.default_rng(0)
  noise = total = spans = 0
  for n in (40, 10, 55, 3, 1, 70):
    piece = np.arange(10, 10 + n, dtype=np.int32)
    ex = pipeline.span_corruption_piece(
        {'inputs': piece, 'inputs_segment_ids': np.ones(n, np.int32)}, rng, data_config=data,
        eos_id=3, sentinels=_Sentinels.sentinel_ids(100))
    inputs, targets = list(ex['encoder_inputs']), list(ex['decoder_targets'])
    assert inputs[-1] == 3 and targets[-1] == 3
    sentinels = [t for t in targets if t >= 900]
    assert sentinels == list(range(999, 999 - len(sentinels), -1))
    assert [t for t in inputs if t >= 900] == sentinels
    restored = _restore(inputs, targets)
    assert restored == list(piece)
    noise += len([t for t in targets[:-1] if t < 900])
    total += len(restored)
    spans += len(sentinels)
    assert len(inputs) <= 64 and len(targets) <= 24
  assert 0.12 < noise / total < 0.2 and 2 < noise / spans < 4


def test_span_lengths_that_cannot_fit_are_one_line_naming_the_fields():
  with pytest.raises(config_lib.ConfigError, match=r'makes 14-token targets, past '
                                                   r'data.target_seq_len=12; raise it to 14'):
    spans.check(_span_config(64, 12))


def test_span_corruption_batches_follow_the_encoder_decoder_contract():
  tok = tokenizer_lib.train(helpers.shakespeare(400), 600, 'bpe')
  c = config_lib.base()
  c.model.vocab_size = 728
  c.data.objective, c.data.seq_len, c.data.target_seq_len = 'span_corruption', 64, 24
  c.data.reserved_ids = 128
  tokens = helpers.tokenize(helpers.shakespeare(400), tok)
  batch = next(iter(pipeline.make_dataset(tokens, *_spec(c.data, 4), train=True,
                                          tokenizer=tok)))
  assert set(batch) == {'encoder_inputs', 'encoder_segment_ids', 'encoder_positions',
                        'decoder_inputs', 'decoder_targets', 'decoder_segment_ids',
                        'decoder_positions', 'decoder_loss_weights'}
  assert batch['encoder_inputs'].shape == (4, 64) and batch['decoder_targets'].shape == (4, 24)
  np.testing.assert_array_equal(batch['decoder_loss_weights'], batch['decoder_segment_ids'] > 0)
  # packed examples line up: segment k of the decoder belongs to segment k of the encoder
  assert set(batch['decoder_segment_ids'].ravel()) - {0} == set(
      batch['encoder_segment_ids'].ravel())
  assert np.all(batch['encoder_segment_ids'] == 1)  # full raw pieces fill their rows


def test_a_batch_that_differs_from_the_spec_is_an_error_naming_both():
  data, spec = _spec(_data_config(seq_len=8), 2)
  spec['loss_weights'] = (spec['loss_weights'][0], np.dtype(np.int32))
  with pytest.raises(ValueError, match="'loss_weights': 'float32'.*the batch spec says.*"
                                       "'loss_weights': 'int32'"):
    next(iter(pipeline.make_dataset(_docs([4] * 8), data, spec, train=True)))
