"""The corpus a config names, always as a prepared corpus (one pipeline, not two).

data.path is a prepared directory (python -m zoo.prepare), or the embedded corpus (''), a
text file or a directory of files, which are prepared on first use into WORKDIR/data/KEY
(KEY: a hash of the inputs' paths, sizes and times and of the recipe) with the tokenizer the
run trains on their first documents and caches in WORKDIR/tokenizer.
"""

import hashlib
import importlib.resources
import json
import os

from zoo.data import prepare
from zoo.data import readers
from zoo.data import shards
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError

EMBEDDED_CORPUS = 'tinyshakespeare.txt'


def _inputs(path):
  if not path:
    return [str(importlib.resources.files('zoo.data').joinpath('assets', EMBEDDED_CORPUS))]
  if not os.path.exists(path):
    raise ConfigError(f'data.path={path!r} does not exist; pass a prepared directory, a text '
                      "file or a directory of text files ('' = the embedded corpus)")
  return readers.expand([path])


def _cache(data_config, workdir, files, tokenizer_path):
  stamp = [(os.path.abspath(f), os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files]
  settings = [stamp, data_config.document_separator, data_config.eval_fraction,
              data_config.split_seed, tokenizer_lib.checksum(tokenizer_path)]
  key = hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]
  return os.path.join(workdir, 'data', key)


def open_corpus(data_config, workdir):
  """-> shards.Prepared for data.path, preparing a plain corpus on first use."""
  d = data_config
  if prepare.is_prepared(d.path):
    return shards.open_prepared(d.path, d.tokenizer.path)
  files = _inputs(d.path)

  def first_documents():
    texts = prepare.train_documents(readers.documents(files, separator=d.document_separator),
                                    d.eval_fraction, d.split_seed,
                                    prepare.TOKENIZER_DOCUMENTS)
    if not texts:
      raise ConfigError(f'data.path={d.path!r} holds no text to train a tokenizer on; point '
                        'it at a non-empty corpus')
    return texts
  tokenizer_path = tokenizer_lib.load_or_train(d.tokenizer, workdir, first_documents)
  directory = _cache(d, workdir, files, tokenizer_path)
  if not prepare.is_prepared(directory):
    prepare.prepare(files, directory, tokenizer_path, separator=d.document_separator,
                    eval_fraction=d.eval_fraction, split_seed=d.split_seed)
  return shards.open_prepared(directory, tokenizer_path)


def tokenizer_path(data_config, workdir):
  """Where the run's tokenizer is: data.tokenizer.path, a prepared data.path's, else the
  one the run trained and cached in WORKDIR/tokenizer."""
  d = data_config
  if not d.tokenizer.path and prepare.is_prepared(d.path):
    manifest = prepare.read_json(os.path.join(d.path, prepare.MANIFEST))
    return os.path.join(d.path, manifest['tokenizer']['file'])
  return tokenizer_lib.path(d.tokenizer, workdir)
