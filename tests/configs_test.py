"""Every config file in configs/ trains in smoke mode (here on 8 simulated devices)."""

import glob
import os

import pytest

from zoo import config as config_lib
from zoo.train import loop
from zoo.train import metrics as metrics_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(REPO, 'configs', '*.py')))


@pytest.mark.parametrize('path', CONFIGS, ids=[os.path.basename(p)[:-3] for p in CONFIGS])
def test_smoke_variant_trains_and_its_loss_falls(path, tmp_path):
  config = config_lib.load(path + ':smoke', ['train.steps=12', 'optim.warmup_steps=3'])
  loop.train(config, str(tmp_path))
  rows = metrics_lib.read(str(tmp_path))
  header = rows[0]
  assert header['event'] == 'start' and header['devices'] == 8 and header['mesh']['data'] == 8
  losses = [r['loss'] for r in rows if 'loss' in r]
  assert len(losses) == 12 and losses[-1] < losses[0]
  assert os.path.isdir(tmp_path / 'checkpoints' / '12')
