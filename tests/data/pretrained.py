"""Small pretrained-style tokenizers made in the tests (the libraries' own trainers): T5's
SentencePiece layout, GPT-2's byte-level BPE and BERT's WordPiece as tokenizer.json."""

import io

import sentencepiece as spm
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from tests import helpers


def t5_sentencepiece(path, vocab_size=300):
  """A SentencePiece model laid out as T5's: pad 0, EOS 1, UNK 2, no BOS."""
  proto = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(helpers.shakespeare(800)), model_writer=proto,
      vocab_size=vocab_size, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
  path.write_bytes(proto.getvalue())
  return str(path)


def gpt2_json(path, vocab_size=384):
  """A GPT-2-style byte-level BPE tokenizer.json with <|endoftext|> as its one special."""
  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.train_from_iterator(helpers.shakespeare(800), trainers.BpeTrainer(
      vocab_size=vocab_size, special_tokens=['<|endoftext|>'],
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  tok.save(str(path))
  return str(path)


def bert_json(path, vocab_size=400):
  """A BERT-style WordPiece tokenizer.json: [PAD] [UNK] [CLS] [SEP] [MASK], lower case."""
  specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
  tok = tokenizers.Tokenizer(models.WordPiece(unk_token='[UNK]'))
  tok.normalizer = normalizers.BertNormalizer(lowercase=True)
  tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  tok.decoder = decoders.WordPiece()
  tok.train_from_iterator(helpers.shakespeare(800), trainers.WordPieceTrainer(
      vocab_size=vocab_size, special_tokens=specials))
  tok.post_processor = processors.TemplateProcessing(
      single='[CLS] $A [SEP]', pair='[CLS] $A [SEP] $B:1 [SEP]:1',
      special_tokens=[('[CLS]', 2), ('[SEP]', 3)])
  tok.save(str(path))
  return str(path)
