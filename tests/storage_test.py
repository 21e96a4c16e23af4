"""zoo.storage: a workdir, a prepared corpus and an export in a bucket, through the same API
as local paths (tests/fake_bucket.py stands in for gs://: objects in a local directory,
no appending), and the one-line error where the bucket's filesystem is not installed."""

import filecmp
import importlib.util
import json
import os

import pytest

from tests import fake_bucket
from tests import helpers
from zoo import run as run_lib
from zoo import storage
from zoo.convert import export
from zoo.data import prepare
from zoo.data import shards
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError
from zoo.train import loop
from zoo.train import metrics as metrics_lib


@pytest.fixture
def bucket(tmp_path, monkeypatch):
  """gs://b/... under tmp_path/objects; the working directory is tmp_path/cwd, which must
  stay empty (a path that bypassed zoo.storage would land there as 'gs:/...')."""
  (tmp_path / 'cwd').mkdir()
  monkeypatch.chdir(tmp_path / 'cwd')
  with fake_bucket.bucket(str(tmp_path / 'objects')) as fake:
    yield fake
  assert os.listdir(tmp_path / 'cwd') == []


def test_a_missing_filesystem_is_a_one_line_error_naming_the_field(monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, 'find_spec',
                      lambda name, *a: None if name in ('gcsfs', 'tensorflow') else real(name))
  with pytest.raises(ConfigError, match=r"data.path='gs://b/c' needs gcsfs .* pip install "
                                        r"'zoo\[gcs\]'"):
    storage.check('gs://b/c', 'data.path')
  with pytest.raises(ConfigError, match=r'train.init_params=.*needs gcsfs'):
    helpers.smoke('gpt_shakespeare', 'train.init_params=gs://b/params')
  storage.check('runs/local', '--workdir')  # local paths need nothing
  with pytest.raises(ConfigError, match=r"--workdir='s3://b/run': the zoo reads and writes "
                                        'local paths and gs:// buckets'):
    storage.check('s3://b/run', '--workdir')


def test_objects_are_written_whole_and_a_failed_write_leaves_nothing(bucket):
  storage.write_bytes('gs://b/dir/x.bin', b'abc')
  assert storage.read_bytes('gs://b/dir/x.bin') == b'abc'
  assert storage.isfile('gs://b/dir/x.bin') and storage.isdir('gs://b/dir')

  def broken(tmp):
    with open(tmp, 'wb') as f:
      f.write(b'half')
    raise OSError('disk gone')
  with pytest.raises(OSError):
    storage.write_atomic('gs://b/dir/y.bin', broken)
  assert storage.listdir('gs://b/dir') == ['x.bin']
  storage.write_bytes('gs://b/dir/sub/z.txt', b'z')
  assert storage.glob('gs://b/dir/*.bin') == ['gs://b/dir/x.bin']
  assert storage.walk_files('gs://b/dir') == ['gs://b/dir/sub/z.txt', 'gs://b/dir/x.bin']
  assert storage.size('gs://b/dir/x.bin') == 3
  assert storage.free_bytes('gs://b/dir') is None


def test_metrics_rows_in_a_bucket_are_kept_across_writers(bucket):
  for rows in ([{'step': 1, 'loss': 2.5}, {'step': 2, 'loss': 2.0}], [{'step': 3, 'loss': 1.5}]):
    writer = metrics_lib.Writer('gs://b/run')
    for row in rows:
      writer.write(row)
      assert metrics_lib.read('gs://b/run')[-1] == row  # in the bucket after every row
    writer.close()
  assert [r['step'] for r in metrics_lib.read('gs://b/run')] == [1, 2, 3]
  assert any(n.startswith('events.out.tfevents') for n in storage.listdir('gs://b/run'))


def test_a_corpus_prepared_into_a_bucket_equals_a_local_one(tmp_path, bucket):
  tokenizer = str(tmp_path / 'spm.model')
  with open(tokenizer, 'wb') as f:
    f.write(tokenizer_lib.train(helpers.shakespeare(800), 500, 'bpe').model_proto)
  corpus = tmp_path / 'corpus.txt'
  corpus.write_text('\n\n'.join(helpers.shakespeare(400)))
  storage.write_bytes('gs://b/raw/corpus.txt', corpus.read_bytes())
  kw = dict(eval_fraction=0.1, shard_bytes=4096)
  local = prepare.prepare([str(corpus)], str(tmp_path / 'local'), tokenizer, **kw)
  remote = prepare.prepare(['gs://b/raw/*.txt'], 'gs://b/prepared', tokenizer, **kw)
  assert remote['shards'] == local['shards'] and remote['splits'] == local['splits']
  objects = bucket.local('gs://b/prepared')
  for shard in local['shards']:
    assert filecmp.cmp(tmp_path / 'local' / shard['file'], os.path.join(objects, shard['file']),
                       shallow=False)
  opened = shards.open_prepared('gs://b/prepared', tokenizer)
  assert len(opened.train) == local['splits']['train']['documents']
  assert list(opened.eval[0]) == list(shards.open_prepared(str(tmp_path / 'local')).eval[0])


def test_a_run_in_a_bucket_trains_resumes_and_exports(bucket):
  steps = ('optim.warmup_steps=1', 'train.checkpoint_every=2', 'train.eval_every=2')
  loop.train(run_lib.resolve(helpers.smoke('gpt_shakespeare', 'train.steps=2', *steps)),
             'gs://b/run')
  config = helpers.smoke('gpt_shakespeare', 'train.steps=4', *steps)
  loop.train(run_lib.resolve(config), 'gs://b/run')  # resumes from the bucket's checkpoint 2
  rows = metrics_lib.read('gs://b/run')
  starts = [r['step'] for r in rows if r.get('event') == 'start']
  assert starts == [0, 2]
  assert sorted(r['step'] for r in rows if 'loss' in r) == [1, 2, 3, 4]
  assert '4' in storage.listdir('gs://b/run/checkpoints')
  assert len(storage.listdir('gs://b/run/data')) == 1  # prepared once, reused on resume
  [model] = storage.listdir('gs://b/run/tokenizer')
  assert model == f'{config.data.tokenizer.type}_{config.data.tokenizer.vocab_size}.model'
  assert export.export(run_lib.resolve(config), 'gs://b/run', 'gs://b/hf') == 4
  assert {'config.json', 'model.safetensors', 'tokenizer.json'} <= set(
      storage.listdir('gs://b/hf'))
  assert json.loads(storage.read_text('gs://b/hf/config.json'))['vocab_size'] == \
      config.model.vocab_size
