"""Every config file in configs/ trains in smoke mode (here on 8 simulated devices).

Smoke variants keep a family's switches and shrink its shape, so the published sizes of one
family share a smoke config: each distinct smoke config trains once, and every file is
checked to produce one of them.
"""

import glob
import math
import os

import pytest

from tests import helpers
from tests.helpers import REPO
from zoo import run as run_lib
from zoo.models import image_text
from zoo.train import loop
from zoo.train import metrics as metrics_lib

CONFIGS = sorted(glob.glob(os.path.join(REPO, 'configs', '*.py')))
# one eval and one checkpoint, at the end: each smoke's loss falls, its eval compiles and runs
SMOKE = ['train.steps=12', 'train.eval_every=12', 'train.checkpoint_every=12']


def _smoke(path):
  return helpers.load(path + ':smoke', SMOKE)


def _distinct_smoke_configs():
  by_json = {}
  for path in CONFIGS:
    by_json.setdefault(_smoke(path).to_json(sort_keys=True), []).append(path)
  return {os.path.basename(paths[0])[:-3]: paths for paths in by_json.values()}


DISTINCT = _distinct_smoke_configs()


def test_every_config_file_is_covered_by_a_trained_smoke_config():
  assert sorted(p for paths in DISTINCT.values() for p in paths) == CONFIGS
  assert len(DISTINCT) >= 5  # gpt, llama, mistral (window), palm (parallel), default job


@pytest.mark.parametrize('name', sorted(DISTINCT))
def test_smoke_variant_trains_and_its_loss_falls(name, tmp_path):
  config = _smoke(DISTINCT[name][0])
  loop.train(run_lib.resolve(config), str(tmp_path))
  rows = metrics_lib.read(str(tmp_path))
  header = rows[0]
  assert header['event'] == 'start' and header['devices'] == 8 and header['mesh']['data'] == 8
  losses = [r['loss'] for r in rows if 'loss' in r]
  assert len(losses) == 12 and losses[-1] < losses[0], losses
  # a sane init: near-uniform predictions; SigLIP's pairs near its initial -log sigmoid(b)
  init = (-image_text.INITIAL_BIAS if config.data.objective == 'sigmoid_contrastive' else
          math.log(config.model.vocab_size))
  assert losses[0] < init + 1.0
  for k in range(1, config.model.mtp.depth + 1):  # deepseek_v3's prediction module learns too
    predicted = [r[f'mtp_loss_{k}'] for r in rows if 'loss' in r]
    assert predicted[-1] < predicted[0], predicted
  assert os.path.isdir(tmp_path / 'checkpoints' / '12')
