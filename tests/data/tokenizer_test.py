"""Pretrained tokenizers: T5-style SentencePiece, GPT-2 byte-level BPE and BERT WordPiece
(tokenizer.json) give their own libraries' ids, their special ids are read from them, and
each family's objective uses those ids."""

import numpy as np
import pytest
import sentencepiece as spm
import tokenizers

from tests import helpers
from tests.data.pretrained import bert_json, gpt2_json, t5_sentencepiece
from zoo import config as config_lib
from zoo.data import pipeline
from zoo.data import tokenizer as tokenizer_lib

TEXT = ['ROMEO:\nBut, soft! what light through yonder window breaks?', 'It is the east.']


def test_t5_sentencepiece_ids_specials_and_sentinels(tmp_path):
  path = t5_sentencepiece(tmp_path / 'spiece.model')
  tok = tokenizer_lib.from_file(path)
  own = spm.SentencePieceProcessor(model_file=path)
  assert tok.encode(TEXT) == own.encode(TEXT)
  assert (tok.pad_id, tok.eos_id, tok.bos_id, tok.mask_id) == (0, 1, None, None)
  assert {0, 1, 2} <= tok.special_ids
  # T5's extra ids sit above the pieces, <extra_id_0> highest
  assert tok.sentinel_ids(100)[:2] == (399, 398) and tok.sentinel_ids(100)[-1] == 300
  np.testing.assert_array_equal(tok.document([7, 8]), [7, 8, 1])  # no BOS, EOS 1
  assert tok.decode(tok.encode(TEXT[:1])[0]) == own.decode(own.encode(TEXT[0]))


def test_gpt2_byte_level_bpe_json_ids_and_specials(tmp_path):
  path = gpt2_json(tmp_path / 'tokenizer.json')
  tok, own = tokenizer_lib.from_file(path), tokenizers.Tokenizer.from_file(path)
  assert tok.encode(TEXT) == [e.ids for e in own.encode_batch(TEXT)]
  eot = own.token_to_id('<|endoftext|>')
  assert (tok.eos_id, tok.pad_id, tok.bos_id, tok.mask_id) == (eot, eot, None, None)
  assert tok.vocab_size == 384 and tok.special_ids == {eot}
  assert tok.decode(tok.encode(TEXT[:1])[0]) == TEXT[0]  # byte-level: exact round trip


def test_bert_wordpiece_json_ids_and_specials(tmp_path):
  path = bert_json(tmp_path / 'tokenizer.json')
  tok, own = tokenizer_lib.from_file(path), tokenizers.Tokenizer.from_file(path)
  assert tok.encode(TEXT) == [e.ids for e in own.encode_batch(TEXT, add_special_tokens=False)]
  ids = {name: own.token_to_id(name) for name in ('[PAD]', '[CLS]', '[SEP]', '[MASK]')}
  assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.mask_id) == (
      ids['[PAD]'], ids['[CLS]'], ids['[SEP]'], ids['[MASK]'])
  # the zoo's [CLS] A [SEP] is the library's own single-sentence encoding
  np.testing.assert_array_equal(tok.document(tok.encode(TEXT[:1])[0]), own.encode(TEXT[0]).ids)


def test_a_file_that_is_no_tokenizer_is_one_line(tmp_path):
  (tmp_path / 'junk.model').write_bytes(b'not a model')
  with pytest.raises(config_lib.ConfigError, match=r'junk.model: not a tokenizer the zoo reads'):
    tokenizer_lib.from_file(str(tmp_path / 'junk.model'))


def _first_batch(objective, tok, rows=8, **data):
  c = config_lib.base()
  c.model.vocab_size = 512
  c.data.objective, c.data.seq_len = objective, 48
  c.data.update(data)
  tokens = helpers.tokenize(helpers.shakespeare(300), tok)
  return next(iter(pipeline.make_dataset(tokens, c.data, helpers.batch_spec(c.data, rows),
                                         train=True, tokenizer=tok)))


def _segments(segment_ids):
  return sum(len(np.unique(row[row > 0])) for row in segment_ids)


def test_each_objective_uses_the_tokenizers_own_special_ids(tmp_path):
  gpt2 = tokenizer_lib.from_file(gpt2_json(tmp_path / 'gpt2.json'))
  batch = _first_batch('causal_lm', gpt2)
  ends = batch['targets'][batch['segment_ids'] > 0] == gpt2.eos_id
  assert ends.sum() >= _segments(batch['segment_ids']) - 8  # all but a row's last end in EOT
  assert gpt2.eos_id not in batch['inputs'][batch['positions'] == 0]  # no BOS: text starts

  bert = tokenizer_lib.from_file(bert_json(tmp_path / 'bert.json'))
  batch = _first_batch('mlm', bert)
  assert np.all(batch['targets'][:, 0] == bert.bos_id)  # [CLS]
  real = batch['segment_ids'] > 0
  assert np.all(np.sum((batch['targets'] == bert.eos_id) & real, axis=1) == 2)  # [SEP] x2
  chosen = batch['loss_weights'] > 0
  assert np.any(batch['inputs'][chosen] == bert.mask_id)
  assert not np.any(np.isin(batch['targets'][chosen], list(bert.special_ids)))

  t5 = tokenizer_lib.from_file(t5_sentencepiece(tmp_path / 'spiece.model'))
  batch = _first_batch('span_corruption', t5, target_seq_len=24, num_sentinels=100)
  inputs, targets = batch['encoder_inputs'], batch['decoder_targets']
  assert 399 in inputs and 399 in targets  # <extra_id_0>, T5's id for it
  assert not np.any(inputs >= 400) and not np.any(targets >= 400)
  assert not np.any(np.isin(inputs, [t5.pad_id]) & (batch['encoder_segment_ids'] > 0))
  assert np.sum(targets == t5.eos_id) == _segments(batch['decoder_segment_ids'])


@pytest.mark.parametrize('split', [False, True])
def test_split_digits_keeps_every_digit_a_piece_of_its_own(split):
  texts = [f'{a}+{b}={a + b}' for a in range(60) for b in range(0, 60, 7)]
  tokenizer = tokenizer_lib.train(texts, 320, 'bpe', split_digits=split)
  pieces = [tokenizer.decode([i]) for i in tokenizer.encode(['123+456=579'])[0]]
  digits = [p for p in pieces if any(c.isdigit() for c in p)]
  if split:
    assert all(len(p.strip()) == 1 for p in digits), pieces
  else:  # the corpus's frequent digit pairs merge
    assert any(len(p.strip()) > 1 for p in digits), pieces
