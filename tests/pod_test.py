"""A simulated pod (launch/local_pod.sh: 2 processes x 4 CPU devices, jax.distributed with
gloo): the one-process losses, cooperative checkpoints, resume, and a dead process."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests import helpers
from tests.helpers import REPO
from zoo import config as config_lib
from zoo import run as run_lib
from zoo.data import streams
from zoo.train import loop
from zoo.train import metrics as metrics_lib

SMOKE = helpers.config_file('gpt_shakespeare')
OVERRIDES = ['mesh.data=8', 'data.num_streams=2', 'optim.schedule=constant',
             'optim.warmup_steps=1', 'train.eval_every=100', 'train.checkpoint_every=100']


def _pod(workdir, *overrides, wait=True):
  command = ['bash', os.path.join(REPO, 'launch', 'local_pod.sh'), '2', '--',
             f'--config={SMOKE}', f'--workdir={workdir}',
             *[f'--config.{o}' for o in [*OVERRIDES, *overrides]]]
  env = dict(os.environ, PYTHON=sys.executable, DEVICES_PER_PROCESS='4')
  env['PYTHONPATH'] = REPO + os.pathsep + env.get('PYTHONPATH', '')
  if not wait:
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
  return subprocess.run(command, env=env, capture_output=True, text=True, timeout=400,
                        check=False)


def _losses(workdir):
  return {r['step']: r['loss'] for r in metrics_lib.read(str(workdir)) if 'loss' in r}


def test_a_two_process_pod_trains_like_one_process_and_resumes(tmp_path):
  reference = tmp_path / 'one_process'
  loop.train(run_lib.load(SMOKE, [*OVERRIDES, 'train.steps=7']), str(reference))
  expected = _losses(reference)

  pod = tmp_path / 'pod'
  result = _pod(pod, 'train.steps=5')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  header = metrics_lib.read(str(pod))[0]
  assert header['processes'] == 2 and header['devices'] == 8
  assert header['batch_per_process'] == header['batch_global'] // 2
  assert sorted(os.listdir(pod / 'checkpoints' / '5' / 'data')) == [
      'commit_success.txt', 'process_0-of-2.json', 'process_1-of-2.json']
  losses = _losses(pod)
  assert list(losses) == [1, 2, 3, 4, 5]  # metrics written once (process 0 only)
  rows = [r for r in metrics_lib.read(str(pod)) if 'loss' in r]
  assert all(r['step_seconds_slowest_process'] in (0, 1) for r in rows)  # a straggler named
  assert [losses[s] for s in losses] == pytest.approx([expected[s] for s in losses], rel=2e-5)

  result = _pod(pod, 'train.steps=7')  # the rerun resumes at step 5, streams included
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  starts = [r for r in metrics_lib.read(str(pod)) if r.get('event') == 'start']
  assert starts[-1]['step'] == 5
  resumed = _losses(pod)
  assert [resumed[6], resumed[7]] == pytest.approx([expected[6], expected[7]], rel=2e-5)


def _signal_process_1(workdir, signal_name, timeout, overrides=('train.steps=100000',),
                      after_step=1):
  """A pod training until told; once process 0 logs `after_step`, `signal_name` goes to
  process 1 alone -> (the pod's exit code, its whole output, seconds from the signal to the
  end)."""
  pod = _pod(workdir, *overrides, wait=False)
  output = []
  for line in pod.stdout:  # process 0 logs the pod's steps: each one ran on both processes
    output.append(line)
    if line.startswith(f'[0] step {after_step}/'):
      break
  subprocess.run(['pkill', f'-{signal_name}', '-f', f'workdir={workdir} .*process_id=1'],
                 check=True)
  start = time.time()
  try:
    rest, _ = pod.communicate(timeout=timeout)
  finally:
    os.killpg(pod.pid, signal.SIGKILL) if pod.poll() is None else None
  return pod.returncode, ''.join(output) + rest, time.time() - start


def test_a_dead_process_stops_the_whole_pod_with_its_name(tmp_path):
  code, text, seconds = _signal_process_1(tmp_path, 'KILL', timeout=60)
  assert code == 137 and seconds < 60
  assert 'local_pod: process 1 exited with status 137' in text, text[-3000:]


def test_ctrl_c_on_one_process_stops_the_whole_pod_after_one_save(tmp_path):
  code, text, _ = _signal_process_1(tmp_path, 'INT', timeout=120)
  assert code == 130, text[-3000:]
  step = max(int(n) for n in os.listdir(tmp_path / 'checkpoints') if n.isdigit())
  for process in (0, 1):  # one agreed step: process 0 had no signal of its own
    assert f'[{process}] SIGINT: saved a checkpoint at step {step};' in text, text[-3000:]
  assert sorted(os.listdir(tmp_path / 'checkpoints' / str(step) / 'data')) == [
      'commit_success.txt', 'process_0-of-2.json', 'process_1-of-2.json']
  assert 'Traceback' not in text


PHASED = ('train.steps=8', 'train.batch_size=16', 'train.phases=2:8:32,5:16:32',
          'train.checkpoint_every=1', 'train.log_every=1')  # batch, then length changes


def test_a_pod_killed_after_its_batch_grew_resumes_to_the_one_process_losses(tmp_path):
  # (a single process killed in each phase: launch_test; here the pod's rows re-dealt)
  reference = tmp_path / 'one_process'
  loop.train(run_lib.load(SMOKE, [*OVERRIDES, *PHASED]), str(reference))
  expected = _losses(reference)
  pod, killed = tmp_path / 'pod', []
  code, text, _ = _signal_process_1(pod, 'KILL', 120, PHASED, after_step=4)  # phase two
  assert code == 137, text[-3000:]
  killed.append(max(int(n) for n in os.listdir(pod / 'checkpoints') if n.isdigit()))
  assert 2 <= killed[0] < 5, killed
  result = _pod(pod, *PHASED)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert [r['step'] for r in metrics_lib.read(str(pod)) if r.get('event') == 'start'][1:] == \
      killed
  losses = _losses(pod)
  assert sorted(losses) == list(range(1, 9))
  assert [losses[s] for s in losses] == pytest.approx([expected[s] for s in losses], rel=2e-5)


def test_each_process_reads_only_the_streams_of_its_rows():
  # 2 processes x 4 devices, batch 16 over data=8: process 1 holds rows 8..16
  assert streams.local_streams([(8, 16)], 16, 4) == [2, 3]
  assert streams.local_streams([(0, 16)], 16, 2) == [0, 1]  # batch replicated on the host
  with pytest.raises(config_lib.ConfigError, match='data.num_streams=3'):
    streams.local_streams([(0, 6)], 12, 3)


def _local_steps(local, process):
  directory = local / f'process_{process}'
  return {int(n) for n in os.listdir(directory) if n.isdigit()} if directory.exists() else set()


def test_a_pod_restarts_from_its_local_tier_and_a_lost_hosts_from_the_persistent_one(tmp_path):
  local = tmp_path / 'local'
  tiers = ('train.steps=12', 'train.checkpoint_every=4', 'train.log_every=1',
           f'train.local_tier.path={local}', 'train.local_tier.every=2')
  reference = tmp_path / 'one_process'
  loop.train(run_lib.load(SMOKE, [*OVERRIDES, 'train.steps=12', 'train.log_every=1']),
             str(reference))
  expected = _losses(reference)
  pod = tmp_path / 'pod'
  code, text, _ = _signal_process_1(pod, 'KILL', 120, tiers, after_step=5)
  assert code == 137, text[-3000:]
  newest_local = max(_local_steps(local, 0) & _local_steps(local, 1))
  assert newest_local >= 4  # the persistent tier has step 4 only
  code, text, _ = _signal_process_1(pod, 'KILL', 120, tiers, after_step=9)
  assert code == 137, text[-3000:]
  for process in (0, 1):
    assert f'[{process}] restored step {newest_local} from the local tier' in text, text[-3000:]
  shutil.rmtree(local / 'process_1')  # process 1's host is lost, and with it its disk
  newest = max(int(n) for n in os.listdir(pod / 'checkpoints') if n.isdigit())
  result = _pod(pod, *tiers)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert 'from the local tier' not in result.stdout
  starts = [r['step'] for r in metrics_lib.read(str(pod)) if r.get('event') == 'start']
  assert starts == [0, newest_local, newest]
  losses = {s: r['loss'] for s, r in helpers.rows_by_step(metrics_lib.read(str(pod))).items()}
  assert sorted(losses) == list(range(1, 13))
  assert [losses[s] for s in losses] == pytest.approx([expected[s] for s in losses], rel=2e-5)
  assert _local_steps(local, 1) == {10, 12}  # the new host's tier is filled again


def test_a_spike_on_a_pod_rolls_back_every_process_past_the_same_batches(tmp_path):
  run = ('train.steps=16', 'train.checkpoint_every=2', 'train.log_every=1')
  reference = tmp_path / 'one_process'
  loop.train(run_lib.load(SMOKE, [*OVERRIDES, *run, 'train.data_skips=8:3']),
             str(reference))
  pod = tmp_path / 'pod'
  result = _pod(pod, *run, 'train.spike.action=rollback', 'train.spike.window=6',
                'train.spike.rollback_steps=4', 'train.spike.skip_batches=3',
                'train.fault.spike_step=12')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  # the run's lines once, from process 0; no gloo connection lines
  assert '[0] spike: loss ' in result.stdout and '[1] spike' not in result.stdout
  assert 'rolled back to step 8, skipping batches 9..11' in result.stdout
  assert '[1] step ' not in result.stdout and '[Gloo]' not in result.stdout
  losses = {s: r['loss'] for s, r in helpers.rows_by_step(metrics_lib.read(str(pod))).items()}
  expected = _losses(reference)
  assert sorted(losses) == list(range(1, 17))
  assert [losses[s] for s in range(9, 17)] == pytest.approx(
      [expected[s] for s in range(9, 17)], rel=2e-5)


def test_each_pod_process_keeps_the_callers_xla_flags_with_its_own_device_count(tmp_path):
  """A stand-in python that prints the flags each process gets (the pod's port query aside)."""
  stub = tmp_path / 'python'
  stub.write_text('#!/usr/bin/env bash\n'
                  'if [ "$1" = -c ]; then echo 12345; else echo "flags: $XLA_FLAGS"; fi\n')
  stub.chmod(0o755)
  env = dict(os.environ, PYTHON=str(stub), DEVICES_PER_PROCESS='4',
             XLA_FLAGS='--xla_backend_optimization_level=0 '
                       '--xla_force_host_platform_device_count=8')
  result = subprocess.run(['bash', os.path.join(REPO, 'launch', 'local_pod.sh'), '2', '--',
                           '--config=x'], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
  assert result.returncode == 0, result.stderr
  lines = sorted(l for l in result.stdout.splitlines() if 'flags:' in l)
  assert len(lines) == 2, result.stdout
  for process, line in enumerate(lines):
    assert line.startswith(f'[{process}] flags: ')
    flags = line.split('flags: ')[1].split()
    assert flags == ['--xla_backend_optimization_level=0',
                     '--xla_force_host_platform_device_count=4'], line
