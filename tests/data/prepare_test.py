"""zoo.prepare: readers for each format, shards + manifest, the split, byte-identical resume
after SIGKILL, and the one-line errors for bad input and bad shards."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo.data import corpus as corpus_lib
from zoo.data import prepare
from zoo.data import readers
from zoo.data import shards
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError
from zoo.train import metrics as metrics_lib

TEXTS = ['the first document', 'a second one\nwith two lines', 'third', 'and a fourth']


@pytest.fixture(scope='module')
def tokenizer_path(tmp_path_factory):
  path = tmp_path_factory.mktemp('tok') / 'spm.model'
  path.write_bytes(tokenizer_lib.train(helpers.shakespeare(1500), 600, 'bpe').model_proto)
  return str(path)


def _read(paths, **kw):
  return [text for text, _ in readers.documents(readers.expand(paths), **kw)]


def test_every_format_reads_the_same_documents(tmp_path):
  (tmp_path / 'a.txt').write_text('\n\n'.join(TEXTS[:2]) + '\n\n\n')
  (tmp_path / 'sub').mkdir()
  (tmp_path / 'sub' / 'b.txt').write_text('\n\n'.join(TEXTS[2:]))
  assert _read([str(tmp_path)]) == TEXTS
  assert _read([str(tmp_path / '*.txt'), str(tmp_path / 'sub')]) == TEXTS
  jsonl = tmp_path / 'c.jsonl'
  jsonl.write_text(''.join(json.dumps({'id': i, 'body': t}) + '\n' for i, t in enumerate(TEXTS)))
  assert _read([str(jsonl)], field='body') == TEXTS
  table = pa.table({'body': TEXTS, 'id': list(range(4))})
  pq.write_table(table, tmp_path / 'd.parquet', row_group_size=3)  # two row groups
  assert _read([str(tmp_path / 'd.parquet')], field='body') == TEXTS
  hf = tmp_path / 'hf'  # what datasets.save_to_disk writes: Arrow stream files + metadata
  hf.mkdir()
  with pa.OSFile(str(hf / 'data-00000-of-00001.arrow'), 'wb') as sink:
    with pa.ipc.new_stream(sink, table.schema) as writer:
      writer.write_table(table, max_chunksize=2)
  (hf / 'dataset_info.json').write_text('{}')
  (hf / 'state.json').write_text('{}')
  assert _read([str(hf)], field='body') == TEXTS


def test_big_text_files_stream_in_blocks_with_the_same_split(tmp_path, monkeypatch):
  text = '\n\n'.join(f'document {i} ' + 'x' * (i % 7) for i in range(300))
  (tmp_path / 'big.txt').write_text(text)
  monkeypatch.setattr(readers, '_BLOCK_CHARS', 50)  # separators fall across blocks
  assert _read([str(tmp_path / 'big.txt')]) == [d.strip() for d in text.split('\n\n')]


@pytest.mark.parametrize('name,content,kw,message', [
    ('bad.txt', b'caf\xe9 au lait', {}, r'bad.txt: not UTF-8 text'),
    ('bad.jsonl', b'{"text": "ok"}\n{"body": "no text"}\n', {}, r"bad.jsonl:2: no text field "
     r"'text'; pass --field=NAME"),
    ('bad.jsonl', b'{"text": "ok"}\nnot json\n', {}, r'bad.jsonl:2: not a JSON object'),
    ('bad.parquet', None, {'field': 'text'}, r"bad.parquet: no column 'text' .* pass --field"),
    ('nope.txt', None, {}, r"input '.*nope.txt' does not exist"),
], ids=['utf8', 'jsonl_field', 'jsonl_syntax', 'parquet_column', 'missing'])
def test_bad_input_names_the_file_and_the_fix(tmp_path, name, content, kw, message):
  path = tmp_path / name
  if content is not None:
    path.write_bytes(content)
  elif name.endswith('.parquet'):
    pq.write_table(pa.table({'body': ['x']}), path)
  with pytest.raises(ConfigError, match=message):
    _read([str(path)], **kw)


def test_split_is_a_stable_hash_of_the_index_with_document_0_held_out():
  flags = prepare.held_out(np.arange(20000), seed=0, fraction=0.1)
  assert flags[0] and abs(flags.mean() - 0.1) < 0.01
  np.testing.assert_array_equal(flags[5000:6000], prepare.held_out(np.arange(5000, 6000), 0, 0.1))
  assert (flags != prepare.held_out(np.arange(20000), seed=1, fraction=0.1)).mean() > 0.1


def _corpus(directory, documents=4000, files=2):
  directory.mkdir(exist_ok=True)
  rng = np.random.default_rng(0)
  words = ' '.join(helpers.shakespeare(300)).split()
  for f in range(files):
    docs = [' '.join(rng.choice(words, rng.integers(5, 60))) for _ in range(documents // files)]
    (directory / f'part{f}.txt').write_text('\n\n'.join(docs))
  return str(directory)


def test_shards_hold_each_documents_ids_and_the_manifest_counts_them(tmp_path, tokenizer_path):
  inputs = _corpus(tmp_path / 'corpus', documents=600)
  manifest = prepare.prepare([inputs], str(tmp_path / 'out'), tokenizer_path,
                             shard_bytes=20_000, eval_fraction=0.1)
  texts = _read([inputs])
  held = prepare.held_out(np.arange(len(texts)), 0, 0.1)
  assert manifest['splits']['eval']['documents'] == held.sum()
  assert manifest['splits']['train']['documents'] == len(texts) - held.sum()
  assert len([s for s in manifest['shards'] if s['split'] == 'train']) > 3
  corpus = shards.open_prepared(str(tmp_path / 'out'))
  tok = tokenizer_lib.from_file(tokenizer_path)
  want = helpers.tokenize([t for t, h in zip(texts, held) if not h], tok)
  assert len(corpus.train) == len(want)
  for i in (0, 1, len(want) // 2, len(want) - 1):
    np.testing.assert_array_equal(corpus.train[i], want[i])
  assert sum(len(corpus.eval[i]) - 2 for i in range(len(corpus.eval))) == \
      manifest['splits']['eval']['tokens']
  # the same command again finds the work done and changes nothing
  before = {n: os.path.getmtime(tmp_path / 'out' / n) for n in os.listdir(tmp_path / 'out')}
  assert prepare.prepare([inputs], str(tmp_path / 'out'), tokenizer_path, shard_bytes=20_000,
                         eval_fraction=0.1) == manifest
  assert before == {n: os.path.getmtime(tmp_path / 'out' / n) for n in before}


def _prepare_command(inputs, output, tokenizer_path, workers):
  return [sys.executable, '-m', 'zoo.prepare', f'--input={inputs}', f'--output={output}',
          f'--tokenizer={tokenizer_path}', f'--workers={workers}', '--shard_mb=0.02']


def _files(directory):
  return {os.path.relpath(os.path.join(root, n), directory): open(os.path.join(root, n),
                                                                   'rb').read()
          for root, _, names in os.walk(directory) for n in names}


def test_sigkill_then_rerun_gives_byte_identical_shards(tmp_path, tokenizer_path):
  inputs = _corpus(tmp_path / 'corpus', documents=16000)
  env = dict(os.environ, PYTHONPATH=helpers.REPO)
  whole = subprocess.run(_prepare_command(inputs, tmp_path / 'whole', tokenizer_path, 2),
                         env=env, capture_output=True, text=True, timeout=300, check=False)
  assert whole.returncode == 0, whole.stderr[-2000:]
  assert 'tokens/s, 2 workers' in whole.stdout

  cut = tmp_path / 'cut'
  process = subprocess.Popen(_prepare_command(inputs, cut, tokenizer_path, 1), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 120
  while not (cut / 'parts' / '00002.json').exists() and time.time() < deadline:
    time.sleep(0.005)
  process.send_signal(signal.SIGKILL)
  process.wait()
  assert not (cut / prepare.MANIFEST).exists()  # killed part way
  rerun = subprocess.run(_prepare_command(inputs, cut, tokenizer_path, 2), env=env,
                         capture_output=True, text=True, timeout=300, check=False)
  assert rerun.returncode == 0, rerun.stderr[-2000:]
  assert _files(cut) == _files(tmp_path / 'whole')


def _prepared(tmp_path, tokenizer_path):
  inputs = _corpus(tmp_path / 'corpus', documents=400)
  prepare.prepare([inputs], str(tmp_path / 'out'), tokenizer_path, shard_bytes=5_000)
  return inputs, tmp_path / 'out'


def test_an_output_holding_another_corpus_or_other_files_is_refused(tmp_path, tokenizer_path):
  inputs, out = _prepared(tmp_path, tokenizer_path)
  before = _files(out)
  with pytest.raises(ConfigError, match=r"already holds another corpus .*'eval_fraction'"):
    prepare.prepare([inputs], str(out), tokenizer_path, shard_bytes=5_000, eval_fraction=0.2)
  assert _files(out) == before  # nothing prepared is lost
  (tmp_path / 'other').mkdir()
  (tmp_path / 'other' / 'notes.txt').write_text('mine')
  with pytest.raises(ConfigError, match='already holds other files'):
    prepare.prepare([inputs], str(tmp_path / 'other'), tokenizer_path)


def test_bad_shards_and_another_tokenizer_are_one_line_errors(tmp_path, tokenizer_path):
  _, out = _prepared(tmp_path, tokenizer_path)
  other = tmp_path / 'other.model'
  other.write_bytes(tokenizer_lib.train(helpers.shakespeare(800), 520, 'bpe').model_proto)
  with pytest.raises(ConfigError, match=r'data.tokenizer.path=.*other.model.* is not the '
                                        'tokenizer .* was prepared with'):
    shards.open_prepared(str(out), str(other))
  shard = out / 'train-00001.array_record'
  data = shard.read_bytes()
  shard.write_bytes(data[:len(data) // 2])
  with pytest.raises(ConfigError, match=r'train-00001.array_record has .* bytes, the manifest '
                                        r'says .* \(truncated or replaced\)'):
    shards.open_prepared(str(out))
  manifest = json.loads((out / prepare.MANIFEST).read_text())
  entry = next(s for s in manifest['shards'] if s['file'] == shard.name)
  foreign = next(s for s in manifest['shards'] if s['documents'] != entry['documents'])
  shard.write_bytes((out / foreign['file']).read_bytes())  # a shard of other documents
  entry['bytes'] = foreign['bytes']
  (out / prepare.MANIFEST).write_text(json.dumps(manifest))
  with pytest.raises(ConfigError, match=r'train-00001.array_record holds .* records, the '
                                        'manifest says'):
    shards.open_prepared(str(out))
  (out / prepare.MANIFEST).unlink()
  with pytest.raises(ConfigError, match='holds no manifest.json .* run python -m zoo.prepare'):
    shards.open_prepared(str(out))


def test_a_corpus_whose_tokenizer_was_trained_for_another_size_is_refused(tmp_path):
  inputs = _corpus(tmp_path / 'corpus', documents=400)
  prepare.prepare([inputs], str(tmp_path / 'out'), {'type': 'bpe', 'vocab_size': 520},
                  shard_bytes=5_000)
  d = config_lib.base().data
  d.path, d.tokenizer.vocab_size = str(tmp_path / 'out'), 4096
  with pytest.raises(ConfigError, match=r"^data.path=.*out' was prepared with a 520-piece "
                     r'tokenizer it trained, and this config trains 4,096 .*'
                     r'--config.data.tokenizer.vocab_size=520 to train with it$'):
    corpus_lib.open_corpus(d, str(tmp_path / 'run'))
  d.tokenizer.vocab_size = 520
  assert corpus_lib.open_corpus(d, str(tmp_path / 'run')).tokenizer.vocab_size == 520


def _launch(workdir, *overrides):
  command = [sys.executable, '-m', 'zoo.launch',
             f'--config={helpers.config_file("gpt_shakespeare")}', f'--workdir={workdir}',
             '--config.model.vocab_size=640', '--config.train.steps=4',
             '--config.train.log_every=2', '--config.optim.warmup_steps=1',
             *[f'--config.{o}' for o in overrides]]
  return subprocess.run(command, env=helpers.cpu_env(), capture_output=True, text=True,
                        timeout=300, check=False)


def test_training_reads_a_prepared_corpus_and_a_mixture_of_two(tmp_path, tokenizer_path):
  books = prepare.prepare([_corpus(tmp_path / 'books', documents=300)], str(tmp_path / 'b'),
                          tokenizer_path)
  rng = np.random.default_rng(1)
  (tmp_path / 'wiki').mkdir()
  (tmp_path / 'wiki' / 'w.txt').write_text('\n\n'.join(
      'wiki ' * int(n) for n in rng.integers(5, 30, 300)))
  prepare.prepare([str(tmp_path / 'wiki')], str(tmp_path / 'w'), tokenizer_path)

  result = _launch(tmp_path / 'one', f'data.path={tmp_path / "b"}')
  assert result.returncode == 0, result.stderr[-3000:]
  rows = metrics_lib.read(str(tmp_path / 'one'))
  assert rows[0]['train_documents'] == books['splits']['train']['documents']
  assert not (tmp_path / 'one' / 'data').exists()  # read in place, not prepared again

  mixture = f'{tmp_path / "b"}:0.75,{tmp_path / "w"}:0.25'
  result = _launch(tmp_path / 'mix', f'data.mixture={mixture}')
  assert result.returncode == 0, result.stderr[-3000:]
  train_rows = [r for r in metrics_lib.read(str(tmp_path / 'mix')) if 'loss' in r]
  assert train_rows[-1]['tokens_b'] > 0 and train_rows[-1]['tokens_w'] > 0

  other = tmp_path / 'other.model'
  other.write_bytes(tokenizer_lib.train(helpers.shakespeare(800), 520, 'bpe').model_proto)
  prepare.prepare([str(tmp_path / 'wiki')], str(tmp_path / 'w2'), str(other))
  result = _launch(tmp_path / 'bad', f'data.mixture={tmp_path / "b"}:1,{tmp_path / "w2"}:1')
  assert result.returncode == 2 and 'prepared with another tokenizer' in result.stderr
  assert result.stderr.strip().count('\n') == 0, result.stderr
