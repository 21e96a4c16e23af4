"""WORKDIR/config.json: written at every start; a restart lists what changed, says how the
learning rate of the remaining steps changed, and refuses other parameter shapes before
anything is restored or moved aside."""

import json
import os

import pytest

from tests import helpers
from zoo.errors import ConfigError
from zoo.train import loop
from zoo import optim
from zoo import run as run_lib
from zoo.train import run_config

BASE = ['optim.warmup_steps=1', 'train.eval_every=1000', 'train.checkpoint_every=1000']


def _config(*overrides):
  return helpers.smoke('gpt_shakespeare', *BASE, *overrides)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('run')
  loop.train(run_lib.resolve(_config('train.steps=4')), str(workdir))
  return workdir


def test_the_resolved_config_is_written_at_the_start(trained):
  written = json.loads((trained / 'config.json').read_text())
  assert written == run_config.as_dict(_config('train.steps=4'))
  assert written['train']['steps'] == 4 and written['model']['family'] == 'decoder'


def test_a_restart_lists_the_changes_and_the_new_learning_rates(trained, tmp_path, capsys):
  import shutil  # pylint: disable=g-import-not-at-top
  workdir = tmp_path / 'run'
  shutil.copytree(trained, workdir)
  config = _config('train.steps=8', 'train.batch_size=16')
  loop.train(run_lib.resolve(config), str(workdir))
  out = capsys.readouterr().out
  assert 'changed since the last start: train.batch_size 8 -> 16, train.steps 4 -> 8' in out
  new = optim.schedule(config.optim, 8)
  old = optim.schedule(_config('train.steps=4').optim, 4)
  assert (f'the learning rate schedule changed: step 5 runs at {float(new(4)):.3g} (the run '
          f'so far would have used {float(old(4)):.3g}) and step 8 at {float(new(7)):.3g}'
          ) in out
  assert json.loads((workdir / 'config.json').read_text())['train']['steps'] == 8


def test_a_restart_with_other_parameter_shapes_is_refused_naming_the_fields(trained):
  before = sorted(os.listdir(trained / 'checkpoints'))
  config_json = (trained / 'config.json').read_text()
  with pytest.raises(ConfigError) as error:
    loop.train(run_lib.resolve(_config('train.steps=8', 'model.d_model=128')), str(trained))
  message = str(error.value)
  assert 'parameter final_norm/scale is (64,) there but (128,) in this model' in message
  assert 'changed: model.d_model=128 (was 64)' in message and 'train.steps' not in message
  assert sorted(os.listdir(trained / 'checkpoints')) == before  # nothing moved aside
  assert (trained / 'config.json').read_text() == config_json
