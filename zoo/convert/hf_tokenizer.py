"""A run's tokenizer as a Hugging Face tokenizer directory (tokenizer.json and
tokenizer_config.json), so transformers' AutoTokenizer gives the zoo's ids.

A tokenizer.json is copied; a SentencePiece model is converted: BPE as its pieces and the
merges that build them (ordered by the merged piece's score, as SentencePiece applies them),
unigram as its pieces and scores; byte fallback, control pieces (special) and user symbols
(the zoo's newline and <mask>) kept. The post-processor adds the special tokens the model's
family reads around a text (families' INPUT_SPECIALS), e.g. [BOS] for a decoder.
"""

import json
import os

import sentencepiece as spm
import tokenizers
from sentencepiece import sentencepiece_model_pb2
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from zoo import storage
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError

_NORMAL, _UNKNOWN, _CONTROL, _USER = 1, 2, 3, 4  # SentencePiece piece types


def _merges(pieces, vocab):
  """BPE merges that rebuild every normal piece, in SentencePiece's order of application."""
  merges = []
  for index, piece in enumerate(pieces):
    if piece.type != _NORMAL or len(piece.piece) < 2:
      continue
    text = piece.piece
    pairs = [(text[:k], text[k:]) for k in range(1, len(text))
             if text[:k] in vocab and text[k:] in vocab]
    merges += [(index, *pair) for pair in sorted(pairs, key=lambda p: (vocab[p[0]], vocab[p[1]]))]
  return [(left, right) for _, left, right in sorted(merges, key=lambda m: m[0])]


# A <0x20> byte piece stands for itself, never for the space SentencePiece adds before the
# text, so it decodes through this private-use character, past the prefix's strip.
_BYTE_SPACE = '\ue000'


def _ascii_bytes():
  """Byte pieces <0x00>..<0x7F> decoded one by one, as SentencePiece decodes them: to
  tokenizers' ByteFallback a run of byte pieces with one invalid byte is all U+FFFD, so
  '<0xE2><0x31>' would lose its '1'. (A byte of 0x80 or more next to a valid sequence in
  one run still differs: docs/contracts.md, Known problems.)"""
  return [decoders.Replace(f'<0x{b:02X}>', _BYTE_SPACE if b == 0x20 else chr(b))
          for b in range(0x80)]


def from_sentencepiece(model_proto):
  """A SentencePiece model -> a `tokenizers` Tokenizer giving the same ids. A BPE word that
  is a piece is taken whole (ignore_merges), as SentencePiece's merges rebuild it; user
  symbols (the zoo's newline and <mask>) are cut out by the pre-tokenizer, not as added
  tokens, so the '▁' SentencePiece puts before the whole text stays where it puts it."""
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(model_proto)
  processor = spm.SentencePieceProcessor(model_proto=model_proto)
  pieces, unk = proto.pieces, proto.pieces[processor.unk_id()].piece
  if proto.trainer_spec.model_type == proto.trainer_spec.BPE:
    vocab = {p.piece: i for i, p in enumerate(pieces)}
    model = models.BPE(vocab=vocab, merges=_merges(pieces, vocab), unk_token=unk,
                       fuse_unk=True, byte_fallback=True, ignore_merges=True)
  else:
    model = models.Unigram([(p.piece, p.score) for p in pieces], processor.unk_id(),
                           byte_fallback=True)
  tok = tokenizers.Tokenizer(model)
  # SentencePiece: '▁' before the whole text and for every space, user symbols cut out
  # anywhere, pieces never across a '▁'
  tok.normalizer = normalizers.Sequence([normalizers.Prepend('▁'),
                                         normalizers.Replace(' ', '▁')])
  users = [p.piece for p in pieces if p.type == _USER]
  tok.pre_tokenizer = pre_tokenizers.Sequence(
      [pre_tokenizers.Split(u, 'isolated') for u in users] +
      [pre_tokenizers.Metaspace(replacement='▁', prepend_scheme='never', split=True)])
  tok.decoder = decoders.Sequence([decoders.Replace('▁', ' '), *_ascii_bytes(),
                                   decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(' ', 1, 0),
                                   decoders.Replace(_BYTE_SPACE, ' ')])
  tok.add_special_tokens([tokenizers.AddedToken(p.piece, special=True, normalized=False)
                          for p in pieces if p.type in (_CONTROL, _UNKNOWN)])
  return tok


def write(tokenizer_path, out, input_specials, max_length, sentinels=0, token_types=True):
  """Writes out/tokenizer.json and out/tokenizer_config.json for the tokenizer file ->
  the special-token ids ({'bos_token_id': ..., 'eos_token_id': ..., 'pad_token_id': ...},
  None where it has none) for the model's config.json. `sentinels`: T5's <extra_id_k>
  count, added with the ids the zoo gives them where the tokenizer lacks those pieces.
  token_types: the model reads token_type_ids (BERT); else the tokenizer gives none (GPT-2
  would add them to its embeddings)."""
  zoo_tokenizer = tokenizer_lib.from_file(tokenizer_path)
  data = storage.read_bytes(tokenizer_path)
  split = True  # a SentencePiece model reads '<s>' in a text as text: so should the export
  if tokenizer_path.endswith('.json'):
    tok = tokenizers.Tokenizer.from_str(data.decode('utf-8'))
    split = tokenizer_lib.splits_special_tokens(tokenizer_path)
  else:
    tok = from_sentencepiece(data)
  if sentinels and len(zoo_tokenizer.sentinels) < sentinels:  # not the tokenizer's pieces
    _add_sentinels(tok, zoo_tokenizer.sentinel_ids(sentinels))
  roles = {'bos': zoo_tokenizer.bos_id, 'eos': zoo_tokenizer.eos_id}
  around = [(role, roles[role]) for role in input_specials if roles[role] is not None]
  names = {role: tok.id_to_token(i) for role, i in around}
  head = [names[r] for r, _ in around if r == 'bos']
  tail = [names[r] for r, _ in around if r == 'eos']
  tok.post_processor = processors.TemplateProcessing(
      single=' '.join([*head, '$A', *tail]),
      pair=' '.join([*head, '$A', *tail, '$B:1', *[f'{t}:1' for t in tail]]),
      special_tokens=[(tok.id_to_token(i), i) for _, i in around])
  os.makedirs(out, exist_ok=True)
  tok.save(os.path.join(out, 'tokenizer.json'))
  special = {'bos_token': zoo_tokenizer.bos_id, 'eos_token': zoo_tokenizer.eos_id,
             'pad_token': zoo_tokenizer.pad_id, 'mask_token': zoo_tokenizer.mask_id,
             'unk_token': _unknown_id(zoo_tokenizer)}
  config = {'tokenizer_class': 'PreTrainedTokenizerFast', 'model_max_length': max_length,
            'clean_up_tokenization_spaces': False, 'split_special_tokens': split,
            'model_input_names': ['input_ids', *(['token_type_ids'] if token_types else []),
                                  'attention_mask'],
            **{k: tok.id_to_token(i) for k, i in special.items() if i is not None}}
  if sentinels:
    config['additional_special_tokens'] = [f'<extra_id_{k}>' for k in range(sentinels)]
  with open(os.path.join(out, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
    json.dump(config, f, indent=2)
  return {f'{role}_id': special[role] for role in ('bos_token', 'eos_token', 'pad_token')}


def _add_sentinels(tok, ids):
  """T5's <extra_id_k> as added special tokens with the zoo's ids, which count down from the
  top of the vocabulary (<extra_id_0> the highest), so they are added from the last."""
  for k in reversed(range(len(ids))):
    name = f'<extra_id_{k}>'
    tok.add_special_tokens([tokenizers.AddedToken(name, special=True, normalized=False)])
    if tok.token_to_id(name) != ids[k]:
      raise ConfigError(f'the tokenizer holds {name} as id {tok.token_to_id(name)}, where the '
                       f'zoo gives it {ids[k]}; export with its own <extra_id_k> pieces all '
                       'present, or none')


def _unknown_id(zoo_tokenizer):
  processor = getattr(zoo_tokenizer, 'processor', None)
  return processor.unk_id() if processor is not None else None
