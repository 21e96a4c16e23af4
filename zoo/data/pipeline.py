"""Input pipeline: documents of token ids -> shuffle, objective, pack, batch (numpy only).

The documents come from a prepared corpus (zoo/data/shards.py, zoo/data/corpus.py) as a
grain MapDataset read on demand, or from a list (tests).

Every batch is what the family's batch spec says (zoo/families; docs/contracts.md): the
keys, shapes and dtypes of `spec`, with `segment_ids` 1, 2, ... per packed document
(0 = padding) and `positions` restarting at 0 in every document.
"""

import dataclasses
import functools

import grain
import numpy as np

from zoo.errors import ConfigError
from zoo.families import spans as spans_lib

_READ_OPTIONS = grain.ReadOptions(num_threads=1, prefetch_buffer_size=16)
_PACKING_BINS = 16  # first-fit packing for span corruption: more bins, less padding
SOURCE_TOKENS = 'source_tokens'  # a mixture's batches: real tokens per source (not model input)
NEXT_DOCUMENT = 'next_document'  # track_documents: the stream position after the batch's last
TAGS = ('source', 'document')  # per-token features that follow tokens into rows (make_rows)


# ---------------------------------------------------------------------- objectives

def causal_lm(tokens):
  """Next-token prediction inside one document."""
  return {'inputs': tokens[:-1], 'targets': tokens[1:]}


def _body(document, tokenizer):
  """A document's pieces without its BOS (if the tokenizer has one) and EOS."""
  return document[int(tokenizer.bos_id is not None):-1]


_OTHER_DOCUMENT_TRIES = 10  # BERT's: draws of a random document that is not this one


def _segments(body, sentence_ends):
  """A document's pieces cut after every sentence end (tokenizer.sentence_end_ids)."""
  cuts = np.flatnonzero(np.isin(body, sentence_ends)) + 1
  return [part for part in np.split(body, cuts) if len(part)]


def _truncate_pair(first, second, room, rng):
  """BERT's truncate_seq_pair: a piece off the longer side, its front or its back at
  random, until the pair fits `room`."""
  while len(first) + len(second) > room:
    longer = 0 if len(first) > len(second) else 1
    side = (first, second)[longer]
    side = side[1:] if rng.random() < 0.5 else side[:-1]
    first, second = (side, second) if longer == 0 else (first, side)
  return first, second


def _sentence_pair(body, rng, documents, room, tokenizer, sentence_ends, short_rate):
  """BERT's create_instances_from_document for one pair: sentences of the document until a
  target length (`room`, or `short_rate` of the time a random 2..room), A their first
  1..n-1, B the rest or (half the time, and always for one sentence) sentences of another
  document from a random one on until the target -> (A, B, is_random_next)."""
  segments = _segments(body, sentence_ends) or [body]
  target = int(rng.integers(2, room + 1)) if rng.random() < short_rate else room
  # BERT walks a document in chunks of sentences reaching the target (the last chunk what
  # is left); one pair a document an epoch starts at a sentence with the target still
  # ahead of it, or at the first one (a document shorter than the target is one chunk)
  ahead = np.cumsum([len(x) for x in segments][::-1])[::-1]
  starts = np.flatnonzero(ahead >= target)
  chunk, length = [], 0
  for segment in segments[int(rng.choice(starts)) if len(starts) else 0:]:
    chunk.append(segment)
    length += len(segment)
    if length >= target:
      break
  split = int(rng.integers(1, len(chunk))) if len(chunk) > 1 else 1
  first = np.concatenate(chunk[:split])
  is_random_next = len(chunk) == 1 or rng.random() < 0.5
  if is_random_next:
    for _ in range(_OTHER_DOCUMENT_TRIES):
      other = _body(documents[int(rng.integers(len(documents)))], tokenizer)
      if not np.array_equal(other, body):
        break
    others = _segments(other, sentence_ends) or [other]
    second, wanted = [], max(1, target - len(first))
    for segment in others[int(rng.integers(len(others))):]:
      second.append(segment)
      if sum(map(len, second)) >= wanted:
        break
    second = np.concatenate(second)
  else:
    second = np.concatenate(chunk[split:])
  first, second = _truncate_pair(first, second, room, rng)
  return first, second, is_random_next


def mlm_example(tokens, rng, *, documents, seq_len, tokenizer, mask_rate, pieces,
                sentence_ends, short_rate):
  """BERT pretraining example from one document (Devlin et al. 2019, sec. 3.1 and A.2; the
  released create_pretraining_data.py).

  [CLS] A [SEP] B [SEP]: A and B whole sentences (segments cut at `sentence_ends`, the
  tokenizer's sentence_end_ids) as _sentence_pair builds them, B following A (label 0) or
  from another document (label 1), the longer side truncated to fit; `mask_rate` of the
  non-special tokens are chosen, of which 80% become [MASK], 10% a random piece and 10%
  stay; the loss reads only those. Rows are not packed (the next-sentence head reads the
  first token); padding is segment 0. [CLS] and [SEP] are the tokenizer's BOS and EOS;
  random pieces are drawn from `pieces` (the tokenizer's non-special ids).
  """
  first, second, is_random_next = _sentence_pair(
      _body(tokens, tokenizer), rng, documents, seq_len - 3, tokenizer, sentence_ends,
      short_rate)
  cls, sep = tokenizer.bos_id, tokenizer.eos_id
  ids = np.concatenate([[cls], first, [sep], second, [sep]]).astype(np.int32)
  token_type_ids = np.concatenate([np.zeros(len(first) + 2), np.ones(len(second) + 1)])
  candidates = np.flatnonzero(~np.isin(ids, list(tokenizer.special_ids)))
  chosen = rng.choice(candidates, max(1, round(mask_rate * len(candidates))), replace=False) \
      if len(candidates) else np.zeros(0, np.int64)
  inputs, roll = ids.copy(), rng.random(len(chosen))
  inputs[chosen[roll < 0.8]] = tokenizer.mask_id
  random_slots = chosen[(roll >= 0.8) & (roll < 0.9)]
  inputs[random_slots] = pieces[rng.integers(0, len(pieces), len(random_slots))]
  loss_weights = np.zeros(len(ids), np.float32)
  loss_weights[chosen] = 1.0
  pad = lambda x, dtype: np.pad(x, (0, seq_len - len(ids))).astype(dtype)
  return {
      'inputs': pad(inputs, np.int32), 'targets': pad(ids, np.int32),
      'token_type_ids': pad(token_type_ids, np.int32),
      'segment_ids': pad(np.ones(len(ids)), np.int32),
      'positions': pad(np.arange(len(ids)), np.int32),
      'loss_weights': pad(loss_weights, np.float32),
      'next_sentence_labels': np.int32(is_random_next),
  }


def _partition(total, parts, rng):
  """`total` split into `parts` random positive lengths (zeros only if total < parts)."""
  if total < parts:
    return np.array([total] + [0] * (parts - 1))
  cuts = np.sort(rng.choice(np.arange(1, total), parts - 1, replace=False))
  return np.diff(np.concatenate([[0], cuts, [total]]))


def span_corruption_piece(piece, rng, *, data_config, eos_id, sentinels):
  """T5 span corruption (Raffel et al. 2020, sec. 3.1.4) of one raw piece of the
  concatenated documents (spans.lengths' raw length; shorter only at the end of an eval
  pass): noise spans become sentinels in the inputs; targets are each sentinel followed by
  its span, then EOS. Span i is `sentinels[i]` (tokenizer.sentinel_ids: <extra_id_i>). The
  per-token TAGS follow the tokens into the inputs (a sentinel takes its span's)."""
  real = piece['inputs_segment_ids'] > 0
  body = piece['inputs'][real]
  tags = {k: piece[k][real] for k in TAGS if k in piece}
  n = len(body)
  noise, spans = spans_lib.noise_and_spans(n, data_config)
  noise_lengths = _partition(noise, spans, rng)
  keep_lengths = _partition(n - noise, spans, rng)
  inputs, targets, taken, offset = [], [], [], 0
  for i, (keep, drop) in enumerate(zip(keep_lengths, noise_lengths)):
    inputs += [*body[offset:offset + keep], sentinels[i]]
    targets += [sentinels[i], *body[offset + keep:offset + keep + drop]]
    taken += [*range(offset, offset + keep), min(offset + keep, n - 1)]
    offset += keep + drop
  inputs, targets = np.asarray(inputs + [eos_id], np.int32), np.asarray(targets + [eos_id],
                                                                        np.int32)
  decoder_inputs = np.concatenate([[0], targets[:-1]]).astype(np.int32)  # 0 starts decoding
  example = {'encoder_inputs': inputs, 'decoder_inputs': decoder_inputs,
             'decoder_targets': targets}
  for k, tag in tags.items():
    example[k] = tag[np.asarray(taken + [n - 1])].astype(np.int32)
  return example


def _span_corruption_contract(packed):
  return {
      'encoder_inputs': packed['encoder_inputs'],
      'encoder_segment_ids': packed['encoder_inputs_segment_ids'],
      'encoder_positions': packed['encoder_inputs_positions'],
      'decoder_inputs': packed['decoder_inputs'],
      'decoder_targets': packed['decoder_targets'],
      'decoder_segment_ids': packed['decoder_inputs_segment_ids'],
      'decoder_positions': packed['decoder_inputs_positions'],
      'decoder_loss_weights': (packed['decoder_targets_segment_ids'] > 0).astype(np.float32),
      **{k: packed[k] for k in TAGS if k in packed},
  }


OBJECTIVES = {'causal_lm': causal_lm}


# ------------------------------------------------------------------ pack and batch

def _contract(packed):
  """grain's packed feature names -> the batch contract (the loss reads every real token,
  or the packed `loss_weights` where the examples say which: a completion's)."""
  segment_ids = packed['inputs_segment_ids']
  return {
      'inputs': packed['inputs'], 'targets': packed['targets'],
      'segment_ids': segment_ids, 'positions': packed['inputs_positions'],
      'loss_weights': packed['loss_weights'] if 'loss_weights' in packed else
                      (segment_ids > 0).astype(np.float32),
      **{k: packed[k] for k in TAGS if k in packed},
  }


def conform(batch, spec, num_sources=0):
  """The batch checked against the spec (keys and dtypes: a mismatch is a bug in an
  objective, named here), short batches (the last of an eval pass) padded with
  all-padding rows (segment 0, weight 0). A mixture's batch also says how many real tokens
  each source gave (SOURCE_TOKENS); one with `document` tags, where the stream goes on
  after it (NEXT_DOCUMENT: the position after its last document)."""
  source, document = batch.pop('source', None), batch.pop('document', None)
  if set(batch) != set(spec) or any(batch[k].dtype != d for k, (_, d) in spec.items()):
    raise ValueError(f'the pipeline made {({k: str(v.dtype) for k, v in batch.items()})}, '
                     f'the batch spec says {({k: str(d) for k, (_, d) in spec.items()})}')
  out = {key: np.concatenate([batch[key], np.zeros((shape[0] - len(batch[key]), *shape[1:]),
                                                   dtype)])
         if len(batch[key]) < shape[0] else batch[key]
         for key, (shape, dtype) in spec.items()}
  if num_sources:
    out[SOURCE_TOKENS] = np.bincount(source.ravel(), minlength=num_sources + 1)[1:]
  if document is not None:
    out[NEXT_DOCUMENT] = int(document.max())
  return out


@dataclasses.dataclass(frozen=True)
class Mixture:
  """Sources of train documents (grain MapDatasets) mixed by weight."""
  datasets: tuple
  weights: tuple


def _stream(documents, train, seed, stream, num_streams):
  """Stream s of n: train, positions s::n of an endless sequence of epochs, each a new
  shuffle of all document indices; eval, documents s::n in order, once."""
  if not len(documents[stream::num_streams]):
    raise ConfigError(f'data: stream {stream} of data.num_streams={num_streams} got no '
                      'documents; use a larger corpus or fewer streams')
  if train:
    return documents.shuffle(seed=seed).repeat(None)[stream::num_streams]
  return documents[stream::num_streams]


def _pieces(item, tokenizer):
  """A (document, tags) item -> its pieces without BOS and EOS, each tag on every piece."""
  document, tags = item
  body = _body(document, tokenizer).astype(np.int32)
  return {'inputs': body, **{k: np.full(len(body), v, np.int32) for k, v in tags.items()}}


def _tagged(example, key):
  """example(document, ...) -> example((document, tags), ...): each tag (a mixture's
  `source` 1, 2, ...; the `document`'s position in the stream + 1) a feature holding it on
  each real token of example[key]."""
  def tagged(item, *args):
    document, tags = item
    out = example(document, *args)
    real = out['segment_ids'] > 0 if 'segment_ids' in out else np.ones(len(out[key]), bool)
    return {**out, **{k: (real * v).astype(np.int32) for k, v in tags.items()}}
  return tagged


def _seed(seed, stream, start):
  """The random objectives' seed of stream `stream` from document `start` on."""
  if not start:
    return seed + stream
  return int(np.random.SeedSequence([seed, stream, start]).generate_state(1)[0] >> 1)


def make_rows(tokens, data_config, *, train, seed=0, stream=0, num_streams=1, tokenizer=None,
              start=0, track_documents=False):
  """One input stream's rows (model rows, not yet batched) as a grain IterDataset.

  `tokens`: the documents (a grain MapDataset or a list of int32 arrays), or for training a
  Mixture of sources: each its own stream (seed + k for source k), interleaved in
  proportion to the weights (grain's MapDataset.mix), each token tagged with its `source`.
  Streams as _stream says (zoo/data/streams.py puts them side by side into global
  batches); random objectives draw from seed + s. causal_lm rows are packed
  (concat-then-split); span_corruption cuts the concatenated documents into raw pieces
  (zoo/families/spans.py), corrupts each, and packs the examples whole (first-fit); mlm rows hold
  one sentence pair each. mlm and span_corruption need the tokenizer.
  start: the stream's first document (a phase that changes the length starts at the
  document after the previous phase's last); track_documents: each token also tagged with
  its `document`'s position in the stream + 1, which tells the next phase where to start.
  """
  d = data_config
  mixture = isinstance(tokens, Mixture)
  if mixture:
    ds = grain.MapDataset.mix([
        _stream(docs, train, seed + k, stream, num_streams).map(
            lambda t, k=k: (t, {'source': k + 1}))
        for k, docs in enumerate(tokens.datasets)], tokens.weights)
    documents = grain.MapDataset.concatenate(list(tokens.datasets))
  else:
    documents = tokens if isinstance(tokens, grain.MapDataset) else grain.MapDataset.source(tokens)
    ds = _stream(documents, train, seed, stream, num_streams).map(lambda t: (t, {}))
  if track_documents:
    ds = ds.map_with_index(lambda i, item: (item[0], {**item[1], 'document': i + 1}))
  if start:
    ds = ds[start:]
  tags = (('source',) if mixture else ()) + (('document',) if track_documents else ())
  seed = _seed(seed, stream, start)
  if d.objective == 'mlm':
    example = _tagged(functools.partial(mlm_example, documents=documents, seq_len=d.seq_len,
                                        tokenizer=tokenizer, mask_rate=d.mask_rate,
                                        pieces=tokenizer.piece_ids(),
                                        sentence_ends=tokenizer.sentence_end_ids(),
                                        short_rate=d.short_pair_rate), 'inputs')
    return ds.random_map(example, seed=seed).to_iter_dataset(_READ_OPTIONS)
  if d.objective == 'span_corruption':
    # T5's reduce_concat_tokens and split_tokens: the documents' pieces joined into one
    # stream (no separator, as T5) and cut into raw pieces, so every token is read once an
    # epoch and a full piece's inputs fill data.seq_len
    spans_lib.check(d)
    raw = spans_lib.lengths(d)[0]
    ds = ds.map(functools.partial(_pieces, tokenizer=tokenizer)).to_iter_dataset(_READ_OPTIONS)
    ds = grain.experimental.ConcatThenSplitIterDataset(
        ds, length_struct={'inputs': raw, **{k: raw for k in tags}})
    ds = ds.random_map(functools.partial(
        span_corruption_piece, data_config=d, eos_id=tokenizer.eos_id,
        sentinels=tokenizer.sentinel_ids(d.num_sentinels)), seed=seed)
    lengths = {'encoder_inputs': d.seq_len, 'decoder_inputs': d.target_seq_len,
               'decoder_targets': d.target_seq_len, **{k: d.seq_len for k in tags}}
    return grain.experimental.FirstFitPackIterDataset(
        ds, length_struct=lengths, num_packing_bins=_PACKING_BINS, shuffle_bins=False
    ).map(_span_corruption_contract)
  ds = ds.map(_tagged(OBJECTIVES[d.objective], 'inputs')).to_iter_dataset(_READ_OPTIONS)
  lengths = {'inputs': d.seq_len, 'targets': d.seq_len, **{k: d.seq_len for k in tags}}
  return grain.experimental.ConcatThenSplitIterDataset(ds, length_struct=lengths).map(_contract)


def make_dataset(tokens, data_config, spec, *, train, seed=0, stream=0, num_streams=1,
                 tokenizer=None):
  """One input stream's batches, each as `spec` ({key: (shape, dtype)}, the family's batch
  spec for the stream's rows) says, as a grain IterDataset: make_rows' rows batched; a
  mixture's batches say how many real tokens each source gave (SOURCE_TOKENS)."""
  rows = make_rows(tokens, data_config, train=train, seed=seed, stream=stream,
                   num_streams=num_streams, tokenizer=tokenizer)
  return batched(rows, spec, train=train,
                 num_sources=len(tokens.datasets) if isinstance(tokens, Mixture) else 0)


def batched(rows, spec, *, train, num_sources=0):
  """Rows -> batches of spec's row count (train: whole batches only), conformed."""
  count = next(iter(spec.values()))[0][0]
  return rows.batch(count, drop_remainder=train).map(
      functools.partial(conform, spec=spec, num_sources=num_sources))


def make_task_rows(examples, spec, example_fn, *, train, packed, seed=0, stream=0,
                   num_streams=1):
  """A fine-tuning task's rows for one input stream (zoo/data/task.py), as make_rows':
  `examples` (a grain MapDataset of tokenized examples) streamed as _stream says, each made
  a model row by `example_fn` (the family's task_example). packed: the rows are generated
  text (a completion, T5's targets), packed whole (first-fit: an example never spans two
  rows, and attends only to itself); else each row holds one example, padded (segment 0),
  with its label. spec: the family's batch spec (its row lengths)."""
  ds = _stream(examples, train, seed, stream, num_streams).map(example_fn)
  ds = ds.to_iter_dataset(_READ_OPTIONS)
  if packed:
    features = example_fn(examples[0])
    ds = grain.experimental.FirstFitPackIterDataset(
        ds, length_struct={k: spec[k][0][1] for k in features},
        num_packing_bins=_PACKING_BINS, shuffle_bins=False)
    ds = ds.map(_span_corruption_contract if 'encoder_inputs' in spec else _contract)
  return ds


def packing_efficiency(batch):
  """Share of token slots holding real tokens."""
  return float(np.mean(batch['segment_ids'] > 0))
