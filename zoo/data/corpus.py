"""The corpus a config names, always as prepared corpora (one pipeline, not two).

data.path (or each source of data.mixture, 'PATH:WEIGHT,...') is a prepared directory
(python -m zoo.prepare), or the embedded corpus (''), a text file or a directory of files,
which are prepared on first use into WORKDIR/data/KEY
(KEY: a hash of the inputs' paths, sizes and times and of the recipe) with the tokenizer the
run trains on their first documents and caches in WORKDIR/tokenizer.
"""

import dataclasses
import hashlib
import importlib.resources
import json
import os
from typing import Any

import grain
import jax
from jax.experimental import multihost_utils

from zoo import storage
from zoo.data import pipeline
from zoo.data import prepare
from zoo.data import readers
from zoo.data import shards
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError

EMBEDDED_CORPUS = 'tinyshakespeare.txt'


def embedded_corpus():
  """The path of the corpus the package ships (tiny Shakespeare)."""
  return str(importlib.resources.files('zoo.data').joinpath('assets', EMBEDDED_CORPUS))


def _inputs(path):
  if not path:
    return [embedded_corpus()]
  if not storage.exists(path):
    raise ConfigError(f'data.path={path!r} does not exist; pass a prepared directory, a text '
                      "file or a directory of text files ('' = the embedded corpus)")
  return readers.expand([path])


def _cache(data_config, workdir, files, tokenizer_path):
  stamp = [(storage.absolute(f), storage.size(f), storage.mtime_ns(f)) for f in files]
  settings = [stamp, data_config.document_separator, data_config.eval_fraction,
              data_config.split_seed, tokenizer_lib.checksum(tokenizer_path)]
  key = hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]
  return storage.join(workdir, 'data', key)


@dataclasses.dataclass(frozen=True)
class Corpus:
  tokenizer: tokenizer_lib.Tokenizer
  train: Any  # grain MapDataset of documents, or a pipeline.Mixture of the sources'
  eval: grain.MapDataset  # every source's eval split, one after the other
  sources: tuple = ()  # the mixture's source names, as the metrics rows say them

  def train_documents(self):
    parts = self.train.datasets if isinstance(self.train, pipeline.Mixture) else [self.train]
    return sum(len(p) for p in parts)


def parse_mixture(spec):
  """data.mixture 'PATH:WEIGHT,PATH:WEIGHT' -> [(path, weight)], weights positive."""
  sources = []
  for item in spec.split(','):
    path, _, weight = item.strip().rpartition(':')
    try:
      weight = float(weight)
    except ValueError:
      weight = float('nan')
    if not path or not weight > 0:
      raise ConfigError(f'data.mixture: {item.strip()!r} is not PATH:WEIGHT with a positive '
                        "weight; write e.g. 'books:0.7,wiki:0.3'")
    sources.append((path, weight))
  return sources


def open_corpus(data_config, workdir):
  """-> Corpus for data.path (or data.mixture's sources), preparing plain corpora on first
  use."""
  d = data_config
  if not d.mixture:
    one = _open(d.path, d, workdir)
    return Corpus(one.tokenizer, one.train, one.eval)
  if d.path:
    raise ConfigError(f'data.path={d.path!r} and data.mixture are both set; put every source '
                      "in data.mixture and set data.path=''")
  sources = parse_mixture(d.mixture)
  opened = [_open(path, d, workdir) for path, _ in sources]
  for (path, _), one in zip(sources, opened):
    if one.manifest['tokenizer']['sha256'] != opened[0].manifest['tokenizer']['sha256']:
      raise ConfigError(f'data.mixture: {path} was prepared with another tokenizer than '
                        f'{sources[0][0]}; prepare every source with the same --tokenizer')
  names = [os.path.basename(os.path.normpath(path)) or 'embedded' for path, _ in sources]
  names = [n if names.count(n) == 1 else f'{n}_{k}' for k, n in enumerate(names)]
  weights = [w for _, w in sources]
  if d.mixture_by == 'tokens':  # documents drawn in proportion to weight / mean length
    weights = [w / _mean_train_tokens(one) for w, one in zip(weights, opened)]
  return Corpus(opened[0].tokenizer,
                pipeline.Mixture(tuple(o.train for o in opened),
                                 tuple(w / sum(weights) for w in weights)),
                grain.MapDataset.concatenate([o.eval for o in opened]), tuple(names))


def _mean_train_tokens(prepared):
  """Tokens per train document of a prepared source (its manifest's count)."""
  train = prepared.manifest['splits']['train']
  return train['tokens'] / train['documents']


def _open(path, d, workdir):
  """-> shards.Prepared for one path: a prepared directory, or a plain corpus prepared on
  first use."""
  if prepare.is_prepared(path):
    prepared = shards.open_prepared(path, d.tokenizer.path)
    _check_trained_size(path, prepared.manifest, d)
    return prepared
  files = _inputs(path)

  def first_documents():
    texts = prepare.train_documents(readers.documents(files, separator=d.document_separator),
                                    d.eval_fraction, d.split_seed,
                                    tokenizer_lib.TRAINING_DOCUMENTS)
    if not texts:
      raise ConfigError(f'data.path={path!r} holds no text to train a tokenizer on; point '
                        'it at a non-empty corpus')
    return texts
  tokenizer_path = tokenizer_lib.load_or_train(d.tokenizer, workdir, first_documents)
  directory = _cache(d, workdir, files, tokenizer_path)
  # one process of a pod prepares; every process meets at the barrier whatever it saw, so
  # one that finds the directory already prepared cannot leave the others waiting
  if jax.process_index() == 0 and not prepare.is_prepared(directory):
    prepare.prepare(files, directory, tokenizer_path, separator=d.document_separator,
                    eval_fraction=d.eval_fraction, split_seed=d.split_seed)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'zoo_prepared_{os.path.basename(directory)}')
  return shards.open_prepared(directory, tokenizer_path)


def _check_trained_size(path, manifest, d):
  """A corpus whose preparation trained its tokenizer for another size than this config
  trains (a smoke config's 512 pieces under the full config's 4,096, say) is refused."""
  trained = manifest['recipe']['tokenizer'].get('train')
  if trained and not d.tokenizer.path and trained['vocab_size'] != d.tokenizer.vocab_size:
    raise ConfigError(
        f'data.path={path!r} was prepared with a {trained["vocab_size"]:,}-piece tokenizer '
        f'it trained, and this config trains {d.tokenizer.vocab_size:,} '
        '(data.tokenizer.vocab_size); prepare the corpus again for this config (python -m '
        'zoo.prepare --config=... --output=ANOTHER_DIR) or set '
        f'--config.data.tokenizer.vocab_size={trained["vocab_size"]} to train with it')


def tokenizer_path(data_config, workdir):
  """Where the run's tokenizer is: data.tokenizer.path, a prepared data.path's, else the
  one the run trained and cached in WORKDIR/tokenizer."""
  d = data_config
  path = parse_mixture(d.mixture)[0][0] if d.mixture else d.path
  if not d.tokenizer.path and prepare.is_prepared(path):
    manifest = prepare.read_json(storage.join(path, prepare.MANIFEST))
    return storage.join(path, manifest['tokenizer']['file'])
  return tokenizer_lib.path(d.tokenizer, workdir)
