"""Corpus readers: input paths (files, directories, globs) -> documents, streamed.

Formats: plain text (a file splits into documents at a separator), JSON Lines (one field of
each line), Parquet (one column, read a row group at a time with pyarrow) and the Arrow files
of a Hugging Face dataset saved to disk. Every reader yields (document, source bytes), the
second a share of the file's size for progress bars; documents are stripped and empty ones
dropped. Unreadable input is a ConfigError naming the file (and line) and the fix.
"""

import glob
import json
import os

from zoo import storage
from zoo.errors import ConfigError

FORMATS = ('auto', 'text', 'jsonl', 'parquet', 'arrow')
_BY_EXTENSION = {'.jsonl': 'jsonl', '.json': 'jsonl', '.parquet': 'parquet', '.arrow': 'arrow'}
# the metadata files `datasets.save_to_disk` writes next to its Arrow files
_HF_METADATA = ('dataset_info.json', 'state.json', 'dataset_dict.json')
_BLOCK_CHARS = 1 << 22


def expand(inputs):
  """Input paths (a file, a directory walked in sorted order, or a glob; local or in a
  bucket) -> sorted files."""
  files = []
  for pattern in inputs:
    matches = storage.glob(pattern) if glob.has_magic(pattern) else [pattern]
    if not matches or not all(storage.exists(m) for m in matches):
      raise ConfigError(f'input {pattern!r} does not exist; pass a file, a directory or a glob')
    for match in matches:
      if storage.isdir(match):
        files += [f for f in storage.walk_files(match)
                  if os.path.basename(f) not in _HF_METADATA]
      else:
        files.append(match)
  if not files:
    raise ConfigError(f'inputs {list(inputs)} hold no files; point them at a corpus')
  return files


def format_of(path, fmt):
  """The format a file is read as: `fmt`, or by its extension when fmt is 'auto'."""
  if fmt != 'auto':
    return fmt
  return _BY_EXTENSION.get(os.path.splitext(path)[1].lower(), 'text')


def documents(files, fmt='auto', field='text', separator='\n\n'):
  """Yields (document, source bytes) from every file in order."""
  for path in files:
    kind = format_of(path, fmt)
    if kind == 'text':
      yield from _text(path, separator)
    elif kind == 'jsonl':
      yield from _jsonl(path, field)
    elif kind == 'parquet':
      yield from _parquet(path, field)
    else:
      yield from _arrow(path, field)


def _clean(docs, sizes):
  for doc, size in zip(docs, sizes):
    doc = doc.strip()
    if doc:
      yield doc, size


def _text(path, separator):
  """Blocks of the file split at the separator; the last piece waits for the next block."""
  size = storage.size(path)
  try:
    with storage.open_file(path) as f:
      rest, done = '', 0
      while block := f.read(_BLOCK_CHARS):
        pieces = (rest + block).split(separator)
        rest = pieces.pop()
        counts = [len(p.encode('utf-8')) + len(separator) for p in pieces]
        done += sum(counts)
        yield from _clean(pieces, counts)
      yield from _clean([rest], [max(size - done, 0)])
  except UnicodeDecodeError as e:
    raise ConfigError(f'{path}: not UTF-8 text (byte {e.start} of a block); convert it or '
                      'leave it out') from None
  except OSError as e:
    raise ConfigError(f'{path}: cannot be read ({e.strerror}); fix its permissions or leave it '
                      'out') from None


def _jsonl(path, field):
  try:
    with storage.open_file(path) as f:
      for number, line in enumerate(f, 1):
        if not line.strip():
          continue
        try:
          record = json.loads(line)
        except json.JSONDecodeError:
          raise ConfigError(f'{path}:{number}: not a JSON object; fix the line or pass '
                            '--format=text') from None
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
          raise ConfigError(f'{path}:{number}: no text field {field!r}; pass --field=NAME '
                            'naming the field that holds the document')
        yield from _clean([record[field]], [len(line.encode('utf-8'))])
  except UnicodeDecodeError:
    raise ConfigError(f'{path}: not UTF-8 text; convert it or leave it out') from None
  except OSError as e:
    raise ConfigError(f'{path}: cannot be read ({e.strerror}); fix its permissions or leave it '
                      'out') from None


def _column(path, names, field):
  if field not in names:
    raise ConfigError(f'{path}: no column {field!r} (it has {names}); pass --field=NAME')


def _parquet(path, field):
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  with storage.open_file(path, 'rb') as f:
    try:
      table = pq.ParquetFile(f)
    except Exception as e:  # pylint: disable=broad-except
      raise ConfigError(f'{path}: not a Parquet file ({e}); pass --format for it') from None
    _column(path, table.schema_arrow.names, field)
    for group in range(table.num_row_groups):
      texts = table.read_row_group(group, columns=[field]).column(0).to_pylist()
      share = table.metadata.row_group(group).total_byte_size / max(len(texts), 1)
      yield from _clean((t or '' for t in texts), [share] * len(texts))


def _arrow(path, field):
  """An Arrow IPC file or stream (what `datasets.save_to_disk` writes), memory-mapped (read
  whole from a bucket)."""
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  try:
    source = (pa.BufferReader(storage.read_bytes(path)) if storage.is_remote(path)
              else pa.memory_map(path))
    try:
      table = pa.ipc.open_stream(source).read_all()
    except pa.ArrowInvalid:
      table = pa.ipc.open_file(source).read_all()
  except Exception as e:  # pylint: disable=broad-except
    raise ConfigError(f'{path}: not an Arrow file ({e}); pass --format for it') from None
  _column(path, table.schema.names, field)
  share = storage.size(path) / max(table.num_rows, 1)
  for batch in table.column(field).chunks:
    texts = batch.to_pylist()
    yield from _clean((t or '' for t in texts), [share] * len(texts))
