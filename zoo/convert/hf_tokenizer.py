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
  tok.decoder = decoders.Sequence([decoders.Replace('▁', ' '), decoders.ByteFallback(),
                                   decoders.Fuse(), decoders.Strip(' ', 1, 0)])
  tok.add_special_tokens([tokenizers.AddedToken(p.piece, special=True, normalized=False)
                          for p in pieces if p.type in (_CONTROL, _UNKNOWN)])
  return tok


def write(tokenizer_path, out, input_specials, max_length):
  """Writes out/tokenizer.json and out/tokenizer_config.json for the tokenizer file."""
  zoo_tokenizer = tokenizer_lib.from_file(tokenizer_path)
  data = storage.read_bytes(tokenizer_path)
  if tokenizer_path.endswith('.json'):
    tok = tokenizers.Tokenizer.from_str(data.decode('utf-8'))
  else:
    tok = from_sentencepiece(data)
  ids = {'bos': zoo_tokenizer.bos_id, 'eos': zoo_tokenizer.eos_id}
  around = [(role, ids[role]) for role in input_specials if ids[role] is not None]
  names = {role: tok.id_to_token(i) for role, i in around}
  head = [names[r] for r, _ in around if r == 'bos']
  tail = [names[r] for r, _ in around if r == 'eos']
  tok.post_processor = processors.TemplateProcessing(
      single=' '.join([*head, '$A', *tail]),
      pair=' '.join([*head, '$A', *tail, '$B:1', *[f'{t}:1' for t in tail]]),
      special_tokens=[(tok.id_to_token(i), i) for _, i in around])
  os.makedirs(out, exist_ok=True)
  tok.save(os.path.join(out, 'tokenizer.json'))
  roles = {'bos_token': zoo_tokenizer.bos_id, 'eos_token': zoo_tokenizer.eos_id,
           'pad_token': zoo_tokenizer.pad_id, 'mask_token': zoo_tokenizer.mask_id}
  config = {'tokenizer_class': 'PreTrainedTokenizerFast', 'model_max_length': max_length,
            'clean_up_tokenization_spaces': False,
            **{k: tok.id_to_token(i) for k, i in roles.items() if i is not None}}
  with open(os.path.join(out, 'tokenizer_config.json'), 'w', encoding='utf-8') as f:
    json.dump(config, f, indent=2)
