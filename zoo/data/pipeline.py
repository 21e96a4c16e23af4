"""Input pipeline: read documents, tokenize, split, shuffle, pack, batch (numpy only).

Every batch follows the contract in DESIGN.md: int32 [batch, seq_len] arrays `inputs`,
`targets`, `segment_ids` (1, 2, ... per packed document, 0 = padding), `positions`
(restarting at 0 in every document) and float32 `loss_weights`.
"""

import importlib.resources
import os

import grain
import numpy as np

from zoo.config import ConfigError

EMBEDDED_CORPUS = 'tinyshakespeare.txt'
_READ_OPTIONS = grain.ReadOptions(num_threads=1, prefetch_buffer_size=16)


def read_documents(data_config):
  """data.path ('' = embedded corpus, a file, or a directory of files) -> list of strings."""
  path = data_config.path
  if not path:
    texts = [importlib.resources.files('zoo.data').joinpath('assets', EMBEDDED_CORPUS)
             .read_text(encoding='utf-8')]
  elif os.path.isfile(path):
    texts = [_read(path)]
  elif os.path.isdir(path):
    files = sorted(os.path.join(root, name) for root, _, names in os.walk(path)
                   for name in names if not name.startswith('.'))
    texts = [_read(f) for f in files]
  else:
    raise ConfigError(f'data.path={path!r} does not exist; pass a text file or a directory '
                      "of text files ('' = the embedded corpus)")
  documents = [doc.strip() for text in texts
               for doc in text.split(data_config.document_separator) if doc.strip()]
  if not documents:
    raise ConfigError(f'data.path={path!r} holds no text; point it at a non-empty corpus')
  return documents


def _read(path):
  try:
    with open(path, encoding='utf-8') as f:
      return f.read()
  except UnicodeDecodeError:
    raise ConfigError(f'data.path: {path!r} is not UTF-8 text; remove it or convert it') from None


def split_documents(documents, eval_fraction, seed):
  """Deterministic held-out split: (train, eval) lists, each document in exactly one."""
  held_out = np.random.default_rng(seed).random(len(documents)) < eval_fraction
  held_out[np.argmax(held_out) if held_out.any() else 0] = True  # never an empty eval split
  if held_out.all():
    raise ConfigError(f'data: {len(documents)} document(s) leave nothing to train on; '
                      'add text or lower data.eval_fraction')
  return ([d for d, h in zip(documents, held_out) if not h],
          [d for d, h in zip(documents, held_out) if h])


def tokenize(documents, tokenizer):
  """Each document -> int32 [BOS, pieces..., EOS]."""
  return [np.asarray([tokenizer.bos_id, *ids, tokenizer.eos_id], np.int32)
          for ids in tokenizer.encode(documents)]


# ---------------------------------------------------------------------- objectives

def causal_lm(tokens):
  """Next-token prediction inside one document."""
  return {'inputs': tokens[:-1], 'targets': tokens[1:]}


OBJECTIVES = {'causal_lm': causal_lm}


# ------------------------------------------------------------------ pack and batch

def _contract(packed):
  """grain's packed feature names -> the batch contract."""
  segment_ids = packed['inputs_segment_ids']
  return {
      'inputs': packed['inputs'], 'targets': packed['targets'],
      'segment_ids': segment_ids, 'positions': packed['inputs_positions'],
      'loss_weights': (segment_ids > 0).astype(np.float32),
  }


def _pad_rows(batch, rows):
  """The last eval batch, padded with all-padding rows (segment 0, weight 0)."""
  missing = rows - len(batch['inputs'])
  return {k: np.concatenate([v, np.zeros((missing,) + v.shape[1:], v.dtype)])
          for k, v in batch.items()}


def make_dataset(tokens, data_config, local_batch_size, *, train, seed=0,
                 process_index=0, process_count=1):
  """Packed batches of this process's share of the documents, as a grain IterDataset.

  Train: shuffled with `seed`, reshuffled every epoch, endless. Eval: in order, one pass,
  the last batch padded. Each process reads a disjoint slice of the documents.
  """
  ds = grain.MapDataset.source(tokens)[process_index::process_count]
  if not len(ds):
    raise ConfigError(f'data: process {process_index} of {process_count} got no documents; '
                      'use a larger corpus or fewer processes')
  if train:
    ds = ds.shuffle(seed=seed).repeat(None)
  ds = ds.map(OBJECTIVES[data_config.objective]).to_iter_dataset(_READ_OPTIONS)
  lengths = {'inputs': data_config.seq_len, 'targets': data_config.seq_len}
  ds = grain.experimental.ConcatThenSplitIterDataset(ds, length_struct=lengths)
  ds = ds.batch(local_batch_size, drop_remainder=train).map(_contract)
  if not train:
    ds = ds.map(lambda batch: _pad_rows(batch, local_batch_size))
  return ds


def packing_efficiency(batch):
  """Share of token slots holding real tokens."""
  return float(np.mean(batch['segment_ids'] > 0))
