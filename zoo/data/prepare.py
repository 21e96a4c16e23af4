"""Prepare a corpus once: documents -> token ids -> ArrayRecord shards and a manifest.

  DIR/recipe.json        what the shards are made from; written first, a rerun must match it
  DIR/tokenizer.model    the tokenizer that made them (its sha256 is in the recipe)
  DIR/train-00000.array_record, DIR/eval-00000.array_record
                         chunk 0's documents, one record each: the piece ids as little-endian
                         int32 bytes, without BOS/EOS (the pipeline adds the tokenizer's)
  DIR/parts/00000.json   chunk 0's shards with their documents and tokens; written last, it
                         marks the chunk done
  DIR/manifest.json      every shard and the split totals; written when all chunks are done

A chunk is the next documents holding about `shard_bytes` of input, so the shards depend on
the inputs and the recipe only: a rerun after an interruption (SIGKILL included) re-reads the
inputs, skips the chunks that are done and ends with files byte-identical to an uninterrupted
run's. Every file is written under a temporary name and renamed when complete (uploaded whole
into a bucket). A document goes to eval by a hash of its index and split_seed (document 0
always, so the eval split is never empty). Worker processes tokenize and write chunks while
this process reads.
"""

import collections
import concurrent.futures
import json
import multiprocessing
import os
import time

import numpy as np
from array_record.python import array_record_module as array_record

from zoo import storage
from zoo.data import readers
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError

VERSION = 1
MANIFEST, RECIPE, PARTS = 'manifest.json', 'recipe.json', 'parts'
RECORD_DTYPE = np.dtype('<i4')
SHARD_BYTES = 64 << 20
_WRITER_OPTIONS = 'group_size:1'  # one record per group: random access reads one record
_worker_tokenizer = None  # set by _init in each worker


def held_out(indices, seed, fraction):
  """Which documents (by index in the corpus) are eval: a splitmix64 hash of (seed, index)
  below `fraction`, and document 0 always."""
  indices = np.asarray(indices, np.uint64)
  x = indices + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
  x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  x = x ^ (x >> np.uint64(31))
  return ((x >> np.uint64(11)).astype(np.float64) / 2.0**53 < fraction) | (indices == 0)


def train_documents(documents, eval_fraction, split_seed, limit):
  """The first `limit` train documents of a reader's (document, bytes) stream."""
  picked = []
  for index, (text, _) in enumerate(documents):
    if len(picked) >= limit:
      break
    if not held_out([index], split_seed, eval_fraction)[0]:
      picked.append(text)
  return picked


def recipe(files, tokenizer, *, fmt, field, separator, eval_fraction, split_seed,
           shard_bytes):
  """Everything the shards depend on (a rerun into the same directory must match it).
  tokenizer: a file (its checksum), or {'type', 'vocab_size'} to train one."""
  tokenizer = ({'train': dict(tokenizer)} if isinstance(tokenizer, dict)
               else {'sha256': tokenizer_lib.checksum(tokenizer)})
  return json.loads(json.dumps({
      'version': VERSION,
      'inputs': [{'path': storage.absolute(f), 'bytes': storage.size(f)} for f in files],
      'format': fmt, 'field': field, 'separator': separator, 'eval_fraction': eval_fraction,
      'split_seed': split_seed, 'shard_bytes': shard_bytes, 'tokenizer': tokenizer}))


def is_prepared(path):
  return bool(path) and storage.isfile(storage.join(path, MANIFEST))


def read_json(path):
  return json.loads(storage.read_text(path))


def _write_json(path, value):
  storage.write_bytes(path, (json.dumps(value, indent=1, sort_keys=True) + '\n').encode())


def _claim(output, wanted):
  """The output directory for this recipe: new, empty, or an interrupted run of it."""
  path = storage.join(output, RECIPE)
  if storage.isfile(path):
    found = read_json(path)
    if found != wanted:
      differ = sorted(k for k in wanted.keys() | found.keys() if wanted.get(k) != found.get(k))
      raise ConfigError(f'{output} already holds another corpus (its {RECIPE} differs in '
                        f'{differ}); choose a new --output or delete that directory')
    return
  if [n for n in storage.listdir(output) if not n.startswith('.')]:
    raise ConfigError(f'{output} already holds other files; choose a new or empty --output')
  try:
    storage.makedirs(output)
    _write_json(path, wanted)
  except OSError as e:
    raise ConfigError(f'{output}: cannot be written ({e.strerror}); choose another --output') \
        from None


def _tokenizer_file(tokenizer, output, documents):
  """The output's tokenizer file: a copy of `tokenizer`, or one trained on the first train
  documents (once: a rerun reuses it) -> its path."""
  if isinstance(tokenizer, dict):
    target = storage.join(output, 'tokenizer.model')
    if not storage.isfile(target):
      texts = documents()
      if not texts:
        raise ConfigError(f'the inputs of {output} hold no text; point them at a corpus')
      model = tokenizer_lib.train(texts, tokenizer['vocab_size'], tokenizer['type'],
                                  split_digits=tokenizer.get('split_digits', False))
      storage.write_bytes(target, model.model_proto)
    return target
  target = storage.join(output, 'tokenizer' + (os.path.splitext(tokenizer)[1] or '.model'))
  if not storage.isfile(target) or \
      tokenizer_lib.checksum(target) != tokenizer_lib.checksum(tokenizer):
    storage.write_bytes(target, storage.read_bytes(tokenizer))
  return target


def _chunks(documents, shard_bytes, eval_fraction, split_seed):
  """(number, first document index, texts, eval flags, input bytes) per chunk."""
  def chunk(number, first, texts, size):
    flags = held_out(np.arange(first, first + len(texts)), split_seed, eval_fraction)
    return number, first, texts, flags, size

  number = first = 0
  texts, size = [], 0.0
  for text, source_bytes in documents:
    texts.append(text)
    size += source_bytes
    if size >= shard_bytes:
      yield chunk(number, first, texts, size)
      number, first, texts, size = number + 1, first + len(texts), [], 0.0
  if texts:
    yield chunk(number, first, texts, size)


def _init(tokenizer_path):
  global _worker_tokenizer
  _worker_tokenizer = tokenizer_lib.from_file(tokenizer_path)


def _write_shard(path, documents):
  def write(tmp):
    writer = array_record.ArrayRecordWriter(tmp, _WRITER_OPTIONS)
    for ids in documents:
      writer.write(ids.tobytes())
    writer.close()
  storage.write_atomic(path, write)


def write_chunk(output, number, first, texts, flags):
  """Tokenizes one chunk and writes its train and eval shards, then its part record."""
  ids = [np.asarray(i, RECORD_DTYPE) for i in _worker_tokenizer.encode(texts)]
  shards = []
  for split, wanted in (('train', False), ('eval', True)):
    docs = [d for d, flag in zip(ids, flags) if flag == wanted]
    if docs:
      name = f'{split}-{number:05d}.array_record'
      _write_shard(storage.join(output, name), docs)
      shards.append({'file': name, 'split': split, 'documents': len(docs),
                     'tokens': int(sum(len(d) for d in docs)),
                     'bytes': storage.size(storage.join(output, name))})
  part = {'chunk': number, 'first_document': first, 'documents': len(texts), 'shards': shards}
  _write_json(storage.join(output, PARTS, f'{number:05d}.json'), part)
  return part


def _run(tasks, workers, tokenizer_path, done):
  """write_chunk over (arguments, input bytes) tasks, then done(part, input bytes): here for
  one worker, else in spawned processes with at most two chunks each in flight (memory stays
  bounded by the chunk size)."""
  if workers <= 1:
    _init(tokenizer_path)
    for args, size in tasks:
      done(write_chunk(*args), size)
    return
  context = multiprocessing.get_context('spawn')  # a forked JAX process can deadlock
  with concurrent.futures.ProcessPoolExecutor(workers, context, initializer=_init,
                                              initargs=(tokenizer_path,)) as pool:
    pending = collections.deque()
    for args, size in tasks:
      pending.append((pool.submit(write_chunk, *args), size))
      if len(pending) > 2 * workers:
        future, size = pending.popleft()
        done(future.result(), size)
    for future, size in pending:
      done(future.result(), size)


def prepare(inputs, output, tokenizer, *, fmt='auto', field='text', separator='\n\n',
            eval_fraction=0.05, split_seed=0, shard_bytes=SHARD_BYTES, workers=1,
            progress=False):
  """Prepares (or finishes preparing) `inputs` into `output` with `tokenizer` (a file, or
  {'type', 'vocab_size'} to train one on the first tokenizer_lib.TRAINING_DOCUMENTS train
  documents);
  returns the manifest."""
  files = readers.expand(inputs)
  wanted = recipe(files, tokenizer, fmt=fmt, field=field, separator=separator,
                  eval_fraction=eval_fraction, split_seed=split_seed, shard_bytes=shard_bytes)
  _claim(output, wanted)
  if is_prepared(output):
    return read_json(storage.join(output, MANIFEST))
  storage.makedirs(storage.join(output, PARTS))
  tokenizer_path = _tokenizer_file(tokenizer, output, lambda: train_documents(
      readers.documents(files, fmt, field, separator), eval_fraction, split_seed,
      tokenizer_lib.TRAINING_DOCUMENTS))
  parts, bar = [], _progress(sum(i['bytes'] for i in wanted['inputs']), progress)

  def done(part, size):
    parts.append(part)
    bar(size, sum(s['tokens'] for s in part['shards']))

  def tasks():  # the chunks still to write; those a previous run finished count as done
    for number, first, texts, flags, size in _chunks(
        readers.documents(files, fmt, field, separator), shard_bytes, eval_fraction,
        split_seed):
      part_path = storage.join(output, PARTS, f'{number:05d}.json')
      if storage.isfile(part_path):
        done(read_json(part_path), size)
      else:
        yield (output, number, first, texts, flags), size

  _run(tasks(), workers, tokenizer_path, done)
  bar(None, None)
  manifest = _manifest(wanted, tokenizer_path, parts)
  _write_json(storage.join(output, MANIFEST), manifest)
  _sweep(output)
  return manifest


def _sweep(output):
  """Removes the temporary files of runs that were killed (their process is gone); a
  bucket has none (its objects are uploaded whole)."""
  if storage.is_remote(output):
    return
  for directory in (output, os.path.join(output, PARTS)):
    for name in os.listdir(directory):
      pid = name.rsplit('.', 2)[-2] if name.startswith('.') and name.endswith('.tmp') else ''
      if pid.isdigit() and not _alive(int(pid)):
        os.remove(os.path.join(directory, name))


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    pass
  return True


def _manifest(wanted, tokenizer_path, parts):
  shards = [s for part in sorted(parts, key=lambda p: p['chunk']) for s in part['shards']]
  splits = {split: {'documents': sum(s['documents'] for s in shards if s['split'] == split),
                    'tokens': sum(s['tokens'] for s in shards if s['split'] == split)}
            for split in ('train', 'eval')}
  if not splits['eval']['documents']:
    raise ConfigError(f'inputs {[i["path"] for i in wanted["inputs"]]} hold no text; point '
                      'them at a non-empty corpus')
  if not splits['train']['documents']:
    raise ConfigError(f'{splits["eval"]["documents"]} document(s) leave nothing to train on; '
                      'add text or lower the eval fraction')
  return {'version': VERSION, 'recipe': wanted, 'record_dtype': RECORD_DTYPE.str,
          'tokenizer': {'file': os.path.basename(tokenizer_path),
                        'sha256': tokenizer_lib.checksum(tokenizer_path),
                        'vocab_size': tokenizer_lib.from_file(tokenizer_path).vocab_size},
          'splits': splits, 'shards': shards}


def _progress(total_bytes, enabled):
  """bar(input bytes, tokens) per finished chunk; bar(None, None) closes it."""
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  bar = tqdm(total=total_bytes, unit='B', unit_scale=True, desc='prepare',
             disable=not enabled, smoothing=0.1)
  start, tokens = time.time(), [0]

  def update(size, count):
    if size is None:
      bar.close()
      return
    tokens[0] += count
    bar.set_postfix_str(f'{tokens[0] / max(time.time() - start, 1e-9):,.0f} tokens/s')
    bar.update(min(size, bar.total - bar.n))
  return update
