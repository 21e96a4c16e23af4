"""The partitioning canary on the known case (docs/contracts.md, Known problems): llama3_8b
smoke at 16 x 32 in 4 microbatches on data 2 x fsdp 2 x tensor 2, which jax 0.10.2's
XLA:CPU partitions wrongly. The canary's workaround trains it with one device's losses; off,
the mismatch is there (when that test fails, the jax in use computes it right: update the
Known problems entry)."""

import subprocess
import sys

import pytest

from tests import helpers
from zoo import run as run_lib
from zoo.train import loop
from zoo.train import metrics as metrics_lib

CASE = ['data.seq_len=32', 'train.batch_size=16', 'train.microbatches=4', 'train.steps=4',
        'train.log_every=1', 'train.eval_every=1000', 'optim.warmup_steps=1']
MESH = ['mesh.data=2', 'mesh.fsdp=2', 'mesh.tensor=2']


def _losses(workdir):
  return [r['loss'] for r in metrics_lib.read(str(workdir)) if 'loss' in r]


@pytest.fixture(scope='module')
def one_device(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('one_device')
  result = subprocess.run(
      [sys.executable, '-m', 'zoo.launch', f'--config={helpers.config_file("llama3_8b")}',
       f'--workdir={workdir}', *[f'--config.{o}' for o in CASE]],
      env=helpers.cpu_env(), capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  return _losses(workdir)


def test_the_canary_trains_the_known_case_with_one_devices_losses(one_device, tmp_path,
                                                                   capsys):
  loop.train(run_lib.resolve(helpers.smoke('llama3_8b', *CASE, *MESH)), str(tmp_path))
  lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith('canary:')]
  assert len(lines) == 1 and lines[0].startswith(
      'canary: on data 2 x fsdp 2 x tensor 2 the first step gives loss ')
  assert lines[0].endswith("training with ('activation_embed', None), which matches it")
  assert _losses(tmp_path) == pytest.approx(one_device, rel=1e-5)


def test_without_the_canary_the_known_case_is_wrong(one_device, tmp_path):
  loop.train(run_lib.resolve(helpers.smoke('llama3_8b', *CASE, *MESH, 'train.canary=off')), str(tmp_path))
  assert abs(_losses(tmp_path)[0] - one_device[0]) > 1e-3  # a row swap, not float noise


def test_a_canary_told_not_to_fix_refuses_in_one_line_naming_jax(tmp_path):
  with pytest.raises(loop.TrainingError, match=r'^canary: .* but one device .*; jax 0\.10\.2 '
                     'partitions this mesh wrongly on CPU'):
    loop.train(run_lib.resolve(helpers.smoke('llama3_8b', *CASE, *MESH, 'train.canary=refuse')), str(tmp_path))
  assert not (tmp_path / 'checkpoints').exists() or not list((tmp_path / 'checkpoints').iterdir())
