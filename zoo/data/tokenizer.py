"""SentencePiece tokenizer: trained on the corpus on first use, cached in the workdir."""

import hashlib
import io
import os

import sentencepiece as spm

from zoo.errors import ConfigError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
USER_SYMBOLS = ('\n', '<mask>')  # ids 4 and 5: newlines survive, MLM has a [MASK]
_MAX_TRAINING_DOCUMENTS = 200_000


class Tokenizer:
  """Thin wrapper: encode/decode plus the special ids the pipeline uses."""

  def __init__(self, model_proto):
    self.processor = spm.SentencePieceProcessor(model_proto=model_proto)
    self.model_proto = model_proto
    self.vocab_size = self.processor.vocab_size()
    self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID
    self.mask_id = self.processor.piece_to_id('<mask>')
    self.first_piece_id = max(BOS_ID, EOS_ID, self.mask_id) + 1  # below: control symbols

  def encode(self, texts):
    return self.processor.encode(list(texts))

  def decode(self, ids):
    return self.processor.decode([int(i) for i in ids])


def from_file(path):
  """The tokenizer saved at `path`."""
  with open(path, 'rb') as f:
    return Tokenizer(f.read())


def checksum(path):
  """sha256 of a tokenizer file: prepared shards name the tokenizer that made them."""
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


def train(documents, vocab_size, model_type):
  """Trains a byte-fallback tokenizer that keeps newlines and spacing exactly."""
  proto = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(documents[:_MAX_TRAINING_DOCUMENTS]), model_writer=proto,
        vocab_size=vocab_size, model_type=model_type, character_coverage=1.0,
        byte_fallback=True, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        user_defined_symbols=list(USER_SYMBOLS), remove_extra_whitespaces=False,
        normalization_rule_name='identity', max_sentence_length=1 << 16,
        hard_vocab_limit=False, num_threads=os.cpu_count() or 1, minloglevel=2)
  except RuntimeError as e:
    if 'Vocabulary size is smaller than required_chars' not in str(e):
      raise
    raise ConfigError(f'data.tokenizer.vocab_size={vocab_size} is too small for the 256 byte '
                      'pieces plus the characters of this corpus; raise model.vocab_size '
                      '(e.g. 512)') from None
  return Tokenizer(proto.getvalue())


def path(tokenizer_config, workdir):
  """tokenizer.path, else where the workdir caches the tokenizer it trained."""
  return tokenizer_config.path or os.path.join(
      workdir, 'tokenizer', f'{tokenizer_config.type}_{tokenizer_config.vocab_size}.model')


def load(model_path):
  """The tokenizer at `model_path`; never trains."""
  if not os.path.isfile(model_path):
    raise ConfigError(f'no tokenizer in {model_path}; train first (it is made from the corpus '
                      'on first use) or set data.tokenizer.path to a SentencePiece model')
  return from_file(model_path)


def load_or_train(tokenizer_config, workdir, documents):
  """The path of tokenizer.path, else of the model cached in WORKDIR/tokenizer, else of a
  new one trained on documents() and cached there."""
  cache = path(tokenizer_config, workdir)
  if not tokenizer_config.path and not os.path.exists(cache):
    tokenizer = train(documents(), tokenizer_config.vocab_size, tokenizer_config.type)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    partial = f'{cache}.{os.getpid()}.tmp'
    with open(partial, 'wb') as f:
      f.write(tokenizer.model_proto)
    try:  # the first process to finish wins; all then read the same model
      os.link(partial, cache)
    except FileExistsError:
      pass
    os.remove(partial)
  load(cache)  # a readable model, or the one-line error
  return cache
