"""Tokenizers: a SentencePiece model (the zoo trains one on the corpus on first use and caches
it in the workdir, or a pretrained one such as T5's) or a Hugging Face tokenizer.json (GPT-2
byte-level BPE, BERT WordPiece, Llama 3 BPE) through the `tokenizers` library.

Special ids are read from the tokenizer, never assumed: SentencePiece's own pad/unk/bos/eos
ids and `<mask>`/`[MASK]` and `<extra_id_k>` pieces; a tokenizer.json's special added
tokens by their usual names. encode() adds no special tokens; document() does.
"""

import hashlib
import io
import json
import os

import numpy as np
import sentencepiece as spm

from zoo import storage
from zoo.errors import ConfigError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3  # the layout of tokenizers the zoo trains
USER_SYMBOLS = ('\n', '<mask>')  # ids 4 and 5: newlines survive, MLM has a [MASK]
TRAINING_DOCUMENTS = 200_000  # a tokenizer trained by the zoo sees at most this many
# SentencePiece's result depends on its thread count: fixed, every machine (and every
# process of a pod) trains the same model from the same documents
TRAINING_THREADS = 8
_CLOSING = ' \'")]}\u2019\u201d\u00bb'  # after a sentence's last mark
# the names special tokens go by in tokenizer.json files, by role (first match wins)
_ROLES = {
    'bos': ('<s>', '<|begin_of_text|>', '<|startoftext|>', '[CLS]'),
    'eos': ('</s>', '<|end_of_text|>', '<|endoftext|>', '[SEP]'),
    'pad': ('<pad>', '[PAD]', '<|pad|>'),
    'unk': ('<unk>', '[UNK]'),
    'mask': ('<mask>', '[MASK]'),
}


class Tokenizer:
  """encode/decode plus the special ids the objectives use (bos_id and mask_id may be None;
  pad_id is the eos id where the tokenizer has no pad token)."""
  vocab_size: int
  bos_id: int | None
  eos_id: int
  pad_id: int
  mask_id: int | None
  special_ids: frozenset  # never masked nor drawn as a random replacement
  sentinels: tuple  # the ids of the tokenizer's own <extra_id_0>, <extra_id_1>, ... pieces

  def document(self, ids):
    """A document as the model reads it: [BOS if any, ids..., EOS], int32."""
    head = [] if self.bos_id is None else [self.bos_id]
    return np.asarray([*head, *ids, self.eos_id], np.int32)

  def piece_ids(self):
    """The ids of ordinary pieces (all but the special ones)."""
    return np.setdiff1d(np.arange(self.vocab_size), sorted(self.special_ids))

  def sentence_end_ids(self):
    """The ordinary pieces that end a sentence or a line (their text, closing quotes and
    brackets aside, ends with . ! or ?, or holds a newline): where BERT's pairs split a
    document into segments."""
    if getattr(self, '_sentence_ends', None) is None:
      def ends(text):
        return '\n' in text or text.rstrip(_CLOSING).endswith(('.', '!', '?'))
      self._sentence_ends = np.asarray(
          [i for i in self.piece_ids() if ends(self.decode([i]))], np.int32)
    return self._sentence_ends

  def sentinel_ids(self, count):
    """T5's sentinels <extra_id_0..count-1>: the tokenizer's own pieces of those names, else
    ids above its vocabulary counting down from vocab_size + count - 1 (T5's extra ids)."""
    if len(self.sentinels) >= count:
      return tuple(self.sentinels[:count])
    return tuple(self.vocab_size + count - 1 - k for k in range(count))


class SentencePiece(Tokenizer):
  """A SentencePiece model with the special ids it declares."""

  def __init__(self, model_proto):
    self.processor = p = spm.SentencePieceProcessor(model_proto=model_proto)
    self.model_proto = model_proto
    self.vocab_size = p.vocab_size()
    piece = lambda name: p.piece_to_id(name) if p.piece_to_id(name) != p.unk_id() else None
    self.bos_id = p.bos_id() if p.bos_id() >= 0 else None
    self.eos_id = p.eos_id()
    self.pad_id = p.pad_id() if p.pad_id() >= 0 else p.eos_id()
    self.mask_id = piece('<mask>') if piece('<mask>') is not None else piece('[MASK]')
    self.sentinels = tuple(_prefix_run(piece, '<extra_id_{}>'))
    control = [i for i in range(self.vocab_size) if p.is_control(i) or p.is_unknown(i)]
    self.special_ids = frozenset([*control, *self.sentinels] +
                                 ([self.mask_id] if self.mask_id is not None else []))

  def encode(self, texts):
    return self.processor.encode(list(texts))

  def piece_id(self, text):
    """The id of the piece spelled `text` (a special token), None if it is not one."""
    found = self.processor.piece_to_id(text)
    return None if found == self.processor.unk_id() and text != '<unk>' else found

  def encode_with_offsets(self, text):
    """-> (ids, [(start, end)] each piece's characters in `text`)."""
    try:  # pieces with their byte spans in `text`
      pieces = self.processor.encode(text, return_type='proto').pieces
    except TypeError:  # sentencepiece before return_type
      pieces = self.processor.encode(text, out_type='immutable_proto').pieces
    chars = np.cumsum([0] + [len(c.encode('utf-8')) for c in text])  # char -> byte
    at = lambda byte: int(np.searchsorted(chars, byte, side='right') - 1)
    # a byte-fallback piece may hold no whole character: it spans the one it is part of
    return [p.id for p in pieces], [(at(p.begin), max(at(p.end - 1) + 1, at(p.begin) + 1))
                                    for p in pieces]

  def decode(self, ids):
    return self.processor.decode([int(i) for i in ids])


class HuggingFace(Tokenizer):
  """A Hugging Face tokenizer.json, through the `tokenizers` library. split_special_tokens
  (tokenizer_config.json's, e.g. a zoo export's): special tokens written in a text are
  encoded as text, not as their ids."""

  def __init__(self, text, split_special_tokens=False):
    import tokenizers  # pylint: disable=g-import-not-at-top
    self.impl = tokenizers.Tokenizer.from_str(text)
    self.impl.encode_special_tokens = split_special_tokens
    self.vocab_size = self.impl.get_vocab_size(with_added_tokens=True)
    added = {t['content']: t['id'] for t in json.loads(text).get('added_tokens', [])
             if t.get('special')}
    role = {r: next((added[n] for n in names if n in added), None) for r, names in _ROLES.items()}
    self.bos_id, self.eos_id, self.mask_id = role['bos'], role['eos'], role['mask']
    if self.eos_id is None:
      raise ValueError(f'no end-of-text token among its special tokens {sorted(added)} '
                       f'(looked for {_ROLES["eos"]})')
    self.pad_id = role['pad'] if role['pad'] is not None else self.eos_id
    self.sentinels = tuple(_prefix_run(added.get, '<extra_id_{}>'))
    self.special_ids = frozenset(added.values())

  def encode(self, texts):
    return [e.ids for e in self.impl.encode_batch(list(texts), add_special_tokens=False)]

  def piece_id(self, text):
    """The id of the token spelled `text` (a special token), None if it is not one."""
    return self.impl.token_to_id(text)

  def encode_with_offsets(self, text):
    """-> (ids, [(start, end)] each token's characters in `text`)."""
    encoding = self.impl.encode(text, add_special_tokens=False)
    return encoding.ids, encoding.offsets

  def decode(self, ids):
    return self.impl.decode([int(i) for i in ids], skip_special_tokens=False)


def _prefix_run(lookup, pattern):
  """lookup(pattern.format(k)) for k = 0, 1, ... while it finds one."""
  k = 0
  while (found := lookup(pattern.format(k))) is not None:
    yield found
    k += 1


def splits_special_tokens(path):
  """tokenizer_config.json's split_special_tokens beside a tokenizer.json (False without)."""
  beside = storage.join(os.path.dirname(str(path)), 'tokenizer_config.json')
  if not storage.isfile(beside):
    return False
  return bool(json.loads(storage.read_text(beside)).get('split_special_tokens', False))


def from_file(path):
  """The tokenizer saved at `path`: a tokenizer.json (by its extension) or a SentencePiece
  model; one that cannot be read is a ConfigError naming the file."""
  data = storage.read_bytes(path)
  try:
    if str(path).endswith('.json'):
      return HuggingFace(data.decode('utf-8'), splits_special_tokens(path))
    return SentencePiece(data)
  except Exception as e:  # pylint: disable=broad-except
    raise ConfigError(f'{path}: not a tokenizer the zoo reads ({e}); pass a SentencePiece '
                      'model or a Hugging Face tokenizer.json') from None


def checksum(path):
  """sha256 of a tokenizer file: prepared shards name the tokenizer that made them."""
  return hashlib.sha256(storage.read_bytes(path)).hexdigest()


def train(documents, vocab_size, model_type, symbols=(), split_digits=False):
  """Trains a byte-fallback tokenizer that keeps newlines and spacing exactly; `symbols`
  (a chat template's turn markers) are whole pieces after USER_SYMBOLS'; split_digits:
  every digit its own piece."""
  proto = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(documents[:TRAINING_DOCUMENTS]), model_writer=proto,
        vocab_size=vocab_size, model_type=model_type, character_coverage=1.0,
        byte_fallback=True, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        user_defined_symbols=[*USER_SYMBOLS, *symbols], remove_extra_whitespaces=False,
        normalization_rule_name='identity', max_sentence_length=1 << 16,
        hard_vocab_limit=False, num_threads=TRAINING_THREADS, split_digits=split_digits,
        minloglevel=2)
  except RuntimeError as e:
    if 'Vocabulary size is smaller than required_chars' not in str(e):
      raise
    raise ConfigError(f'data.tokenizer.vocab_size={vocab_size} is too small for the 256 byte '
                      'pieces plus the characters of this corpus; raise model.vocab_size '
                      '(e.g. 512)') from None
  return SentencePiece(proto.getvalue())


def path(tokenizer_config, workdir):
  """tokenizer.path, else where the workdir caches the tokenizer it trained."""
  return tokenizer_config.path or os.path.join(
      workdir, 'tokenizer', f'{tokenizer_config.type}_{tokenizer_config.vocab_size}.model')


def load(model_path):
  """The tokenizer at `model_path`; never trains."""
  if not storage.isfile(model_path):
    raise ConfigError(f'no tokenizer in {model_path}; train first (it is made from the corpus '
                      'on first use) or set data.tokenizer.path to a SentencePiece model')
  return from_file(model_path)


def load_or_train(tokenizer_config, workdir, documents, symbols=()):
  """The path of tokenizer.path, else of the model cached in WORKDIR/tokenizer, else of a
  new one trained on documents() (with `symbols` as whole pieces) and cached there."""
  cache = path(tokenizer_config, workdir)
  if not tokenizer_config.path and not storage.exists(cache):
    tokenizer = train(documents(), tokenizer_config.vocab_size, tokenizer_config.type,
                      symbols, tokenizer_config.get('split_digits', False))
    # every process of a pod trains the identical model (TRAINING_THREADS), so whichever
    # write lands last, all read the same bytes
    storage.write_bytes(cache, tokenizer.model_proto)
  load(cache)  # a readable model, or the one-line error
  return cache
