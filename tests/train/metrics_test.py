"""The routing-collapse warning: one expert chosen by most tokens for several logged rows;
the writer's TensorBoard events without importing torch; MFU where the peak is known."""

import os
import subprocess
import sys

import ml_collections
import numpy as np
import pytest

from tests import helpers
from tests.helpers import REPO
from zoo import counting
from zoo import run as run_lib
from zoo.train import loop
from zoo.train import metrics


def _watch(top_k, num_experts, balance_loss=0.01, bias_update_rate=0.0):
  return metrics.CollapseWatch(ml_collections.ConfigDict(dict(
      top_k=top_k, num_experts=num_experts, collapse_ratio=1.5, collapse_rows=3,
      balance_loss=balance_loss, bias_update_rate=bias_update_rate)))


def test_collapse_warns_once_after_the_configured_rows_in_a_row(capsys):
  watch = _watch(top_k=2, num_experts=4)  # balanced 0.5: warns over 0.75
  balanced, collapsed = np.full((2, 4), 0.5), np.array([[0.5] * 4, [0.9, 0.5, 0.3, 0.3]])
  assert [watch.check(s, load) for s, load in enumerate(
      [collapsed, collapsed, balanced, collapsed, collapsed, collapsed, collapsed])] == [
          False, False, False, False, False, True, False]
  out = capsys.readouterr().out
  assert 'expert 0 of MoE layer 1 takes 90% of its tokens, 1.8x the balanced 50%' in out
  assert out.strip().endswith('raise model.moe.balance_loss=0.01')


def test_many_of_few_experts_do_not_read_as_collapse_and_the_advice_fits_the_balancing(
    capsys):
  # top-10 of 16 (the Qwen3-Next smoke): a balanced router gives each expert 62.5%
  watch = _watch(top_k=10, num_experts=16)
  assert not any(watch.check(s, np.full((1, 16), 0.707)) for s in range(5))
  watch = _watch(top_k=1, num_experts=8, balance_loss=0.0, bias_update_rate=0.001)
  assert [watch.check(s, np.array([[0.3] + [0.1] * 7])) for s in range(3)] == [
      False, False, True]  # 0.3 > 1.5 x 1/8
  assert capsys.readouterr().out.strip().endswith('raise model.moe.bias_update_rate=0.001')
  watch = _watch(top_k=1, num_experts=8, balance_loss=0.0)
  assert [watch.check(s, np.array([[0.3] + [0.1] * 7])) for s in range(3)][-1]
  assert 'no balancing: set model.moe.balance_loss' in capsys.readouterr().out


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


def test_the_rows_carry_mfu_where_the_devices_peak_is_known(tmp_path, monkeypatch):
  monkeypatch.setattr(metrics, 'peak_flops', lambda device: 1e12)  # as on an accelerator
  config = helpers.smoke('gpt_shakespeare', 'train.steps=3', 'train.log_every=1')
  loop.train(run_lib.resolve(config), str(tmp_path))
  row = [r for r in metrics.read(str(tmp_path)) if 'loss' in r][-1]
  want = row['tokens_per_sec'] * counting.flops_per_token(config) / (8 * 1e12)
  assert row['mfu'] == pytest.approx(want, rel=1e-6) and row['mfu'] > 0
