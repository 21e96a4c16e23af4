"""The routing-collapse warning: one expert chosen by most tokens for several logged rows;
the writer's TensorBoard events without importing torch."""

import os
import subprocess
import sys

import ml_collections
import numpy as np

from tests.helpers import REPO
from zoo.train import metrics


def test_collapse_warns_once_after_the_configured_rows_in_a_row(capsys):
  watch = metrics.CollapseWatch(ml_collections.ConfigDict({'collapse_share': 0.5,
                                                           'collapse_rows': 3}))
  balanced, collapsed = np.full((2, 4), 0.5), np.array([[0.5] * 4, [0.9, 0.5, 0.3, 0.3]])
  assert [watch.check(s, load) for s, load in enumerate(
      [collapsed, collapsed, balanced, collapsed, collapsed, collapsed, collapsed])] == [
          False, False, False, False, False, True, False]
  assert 'expert 0 of MoE layer 1 takes 90% of its tokens' in capsys.readouterr().out


def test_the_writer_writes_tensorboard_events_without_importing_torch(tmp_path):
  # tensorboardX imports torch wherever it is installed (1.4 s of every start); a fresh
  # process that writes a row must not have it loaded, and must still write the events
  code = ('import os, sys; from zoo.train import metrics; w = metrics.Writer(sys.argv[1]); '
          'w.write({"step": 1, "loss": 2.0}); w.close(); print("torch" in sys.modules, '
          'any(n.startswith("events.out.tfevents") for n in os.listdir(sys.argv[1])))')
  result = subprocess.run([sys.executable, '-c', code, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=False,
                          env=dict(os.environ, PYTHONPATH=REPO))
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.split() == ['False', 'True']
