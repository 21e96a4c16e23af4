"""A prepared corpus (zoo/data/prepare.py) opened for training: its tokenizer and, per split,
a grain MapDataset of documents (int32 [BOS if any, pieces..., EOS]) read from the shards on demand.

Nothing is loaded up front: the datasets index ArrayRecord files, so the training process's
memory does not grow with the corpus. Every shard is checked against the manifest (size and
record count) and the tokenizer against its checksum before anything compiles.
"""

import dataclasses
import functools
import grain
import numpy as np
from array_record.python import array_record_module as array_record

from zoo import storage
from zoo.data import prepare
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Prepared:
  directory: str
  manifest: dict
  tokenizer: tokenizer_lib.Tokenizer
  train: grain.MapDataset
  eval: grain.MapDataset


def _document(record, tokenizer):
  return tokenizer.document(np.frombuffer(record, prepare.RECORD_DTYPE))


def _check_shard(directory, shard):
  path = storage.join(directory, shard['file'])
  fix = f'prepare it again (python -m zoo.prepare --output={directory} ...)'
  if not storage.isfile(path):
    raise ConfigError(f'data.path: shard {path} is missing; {fix}')
  if storage.size(path) != shard['bytes']:
    raise ConfigError(f'data.path: shard {path} has {storage.size(path)} bytes, the '
                      f'manifest says {shard["bytes"]} (truncated or replaced); {fix}')
  path = storage.native(path)  # ArrayRecord opens it itself (gs:// included)
  reader = array_record.ArrayRecordReader(path)
  records = reader.num_records()
  reader.close()
  if records != shard['documents']:
    raise ConfigError(f'data.path: shard {path} holds {records} records, the manifest says '
                      f'{shard["documents"]} (not this corpus\'s shard); {fix}')
  return path


def open_prepared(directory, tokenizer_path=''):
  """The prepared corpus in `directory`; tokenizer_path (data.tokenizer.path), if set, must
  be the tokenizer it was prepared with."""
  if not prepare.is_prepared(directory):
    raise ConfigError(f'data.path={directory!r} holds no {prepare.MANIFEST} (its preparation '
                      'did not finish); run python -m zoo.prepare with --output there again')
  manifest = prepare.read_json(storage.join(directory, prepare.MANIFEST))
  if manifest.get('version') != prepare.VERSION:
    raise ConfigError(f'data.path={directory!r} was prepared by another zoo version '
                      f'({manifest.get("version")}, this one reads {prepare.VERSION}); '
                      'prepare it again')
  expected = manifest['tokenizer']['sha256']
  own = storage.join(directory, manifest['tokenizer']['file'])
  if tokenizer_lib.checksum(own) != expected:
    raise ConfigError(f'data.path: {own} is not the tokenizer the shards were made with '
                      '(checksum); prepare the corpus again')
  if tokenizer_path and tokenizer_lib.checksum(tokenizer_path) != expected:
    raise ConfigError(f'data.tokenizer.path={tokenizer_path!r} is not the tokenizer '
                      f'data.path={directory!r} was prepared with (sha256 {expected[:12]}...); '
                      'prepare the corpus with --tokenizer set to it, or unset '
                      'data.tokenizer.path')
  tokenizer = tokenizer_lib.from_file(own)
  document = functools.partial(_document, tokenizer=tokenizer)

  def split(name):
    paths = [_check_shard(directory, s) for s in manifest['shards'] if s['split'] == name]
    return grain.MapDataset.source(grain.sources.ArrayRecordDataSource(paths)).map(document)
  return Prepared(directory, manifest, tokenizer, split('train'), split('eval'))
