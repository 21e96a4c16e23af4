"""Injected faults end to end (train.fault.*, in subprocesses): what the run does, and that
nothing written is lost or changed. docs/reliability.md tabulates them."""

import subprocess

from tests import helpers
from tests import launch_test
from zoo.train import metrics as metrics_lib

SPIKED = ('train.steps=24', 'train.checkpoint_every=2', 'train.eval_every=1000',
          'train.spike.action=rollback', 'train.spike.window=6', 'train.spike.rollback_steps=4',
          'train.spike.skip_batches=3', 'train.fault.spike_step=14')
CLEAN = ('train.steps=24', 'train.checkpoint_every=2', 'train.eval_every=1000',
         'train.data_skips=10:3')  # what the rollback does, from the start


def _losses(workdir):
  return {s: row['loss'] for s, row in helpers.rows_by_step(metrics_lib.read(workdir)).items()}


def _kill_after_line(workdir, prefix, *args):
  process = subprocess.Popen(launch_test._command(workdir, *args), env=helpers.cpu_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  for line in process.stdout:
    if line.startswith(prefix):
      break
  process.kill()
  process.communicate()


def test_a_spike_rolls_back_skips_its_batches_and_trains_like_a_run_that_never_saw_them(
    tmp_path):
  clean = launch_test.launch(tmp_path / 'clean', *CLEAN)
  assert clean.returncode == 0, clean.stderr[-3000:]
  result = launch_test.launch(tmp_path / 'spiked', *SPIKED)
  assert result.returncode == 0, result.stderr[-3000:]
  line = next(l for l in result.stdout.splitlines() if l.startswith('spike:'))
  assert line.startswith('spike: loss ') and 'at step 14 is ' in line
  assert line.endswith('rolled back to step 10, skipping batches 11..13 (rollback 1 of at '
                       'most 3 in 1000 steps)')
  rows = metrics_lib.read(tmp_path / 'spiked')
  rollback = next(r for r in rows if r.get('event') == 'rollback')
  assert (rollback['step'], rollback['restored_step'], rollback['skipped_batches']) == (
      14, 10, [11, 13])
  assert rollback['spike_value'] > rollback['window_mean'] + 6 * rollback['window_std']
  want = _losses(tmp_path / 'clean')
  assert _losses(tmp_path / 'spiked') == want  # steps 11..24: the skipped batches' absence
  aside = [n for n in (tmp_path / 'spiked' / 'checkpoints').iterdir()
           if n.name.startswith('rolled-back-14-')]
  assert [n.name.rsplit('-', 1)[1] for n in aside] == ['12']  # moved aside, not deleted

  # killed after the rollback, before its next checkpoint: the rerun skips the same batches
  killed = tmp_path / 'killed'
  _kill_after_line(killed, 'spike:', *SPIKED)
  assert (killed / 'rollbacks.jsonl').exists()
  rerun = launch_test.launch(killed, *SPIKED)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert 'spike:' not in rerun.stdout
  assert _losses(killed) == want


def test_a_nonfinite_burst_skips_its_updates_and_the_run_goes_on(tmp_path):
  result = launch_test.launch(tmp_path, 'train.steps=10', 'train.eval_every=1000',
                              'train.fault.nonfinite=(5,3)', 'train.spike.window=3')
  assert result.returncode == 0, result.stderr[-3000:]
  rows = helpers.rows_by_step(metrics_lib.read(tmp_path))
  assert [rows[s]['nonfinite_streak'] for s in range(4, 10)] == [0, 1, 2, 3, 0, 0]
  assert rows[10]['nonfinite_total'] == 3
  assert not [r for r in metrics_lib.read(tmp_path) if r.get('event') == 'spike']


def test_a_spike_under_the_default_action_is_a_row_and_a_line_and_training_goes_on(tmp_path):
  args = [a for a in SPIKED if not a.startswith('train.spike.action')]
  result = launch_test.launch(tmp_path, *args)
  assert result.returncode == 0, result.stderr[-3000:]
  [line] = [l for l in result.stdout.splitlines() if l.startswith('spike:')]
  assert 'at step 14 is ' in line and line.endswith('training on (train.spike.action=log)')
  rows = metrics_lib.read(tmp_path)
  [spike] = [r for r in rows if r.get('event') == 'spike']
  assert spike['step'] == 14 and spike['spike_signal'] == 'loss'
  assert not [r for r in rows if r.get('event') == 'rollback']
  assert not (tmp_path / 'rollbacks.jsonl').exists()
  assert sorted(helpers.rows_by_step(rows)) == list(range(1, 25))  # no step trained twice
