"""The CLI end to end, in subprocesses: bad input, train/eval, exact resume, preemption,
a corrupt checkpoint and a diverging run."""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import EMBEDDED_CORPUS
from zoo.train import metrics as metrics_lib

SMOKE = helpers.config_file('gpt_shakespeare')
_env = helpers.cpu_env  # one CPU device unless told


def _command(workdir, *overrides, mode='train'):
  return [sys.executable, '-m', 'zoo.launch', f'--config={SMOKE}', f'--workdir={workdir}',
          f'--mode={mode}', *[f'--config.{o}' for o in overrides]]


def launch(workdir, *overrides, mode='train', devices=1):
  return subprocess.run(_command(workdir, *overrides, mode=mode), env=_env(devices),
                        capture_output=True, text=True, timeout=300, check=False)


def _losses(rows):
  return {r['step']: r['loss'] for r in rows if 'loss' in r}


def _after_last_start(workdir):
  rows = metrics_lib.read(workdir)
  start = max(i for i, r in enumerate(rows) if r.get('event') == 'start')
  return rows[start], rows[start + 1:]


# every bad-input case through zoo.launch's run in one process (8 devices): the command's
# own start is the same in each, so it is paid once here, and two cases run it whole
# (test_the_command_prints_that_line_alone_and_exits_2)
_RUN_EACH = """
import contextlib, io, json, sys
from zoo import cli, launch, platform
platform.apply()
results = {}
for name, argv in json.loads(sys.argv[1]).items():
  overrides, flags = cli.split_overrides(argv)
  launch.FLAGS(flags)
  stderr, code = io.StringIO(), 0
  try:
    with contextlib.redirect_stderr(stderr):
      launch.run(overrides)
  except SystemExit as e:
    code = e.code
  finally:
    launch.FLAGS.unparse_flags()
  results[name] = [code, stderr.getvalue()]
print(json.dumps(results))
"""


@pytest.fixture(scope='module')
def bad_input_runs(tmp_path_factory):
  """{case: (exit code, stderr)} of every BAD_INPUT case, run in one subprocess."""
  argvs = {}
  for name, (overrides, _) in zip(BAD_INPUT_IDS, BAD_INPUT):
    directory = tmp_path_factory.mktemp(name)
    argvs[name] = _command(directory / 'run', *_bad_input(directory, overrides))[2:]
  result = subprocess.run([sys.executable, '-c', _RUN_EACH, json.dumps(argvs, default=str)],
                          env=_env(8), capture_output=True, text=True, timeout=600,
                          check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return {name: (code, stderr, argvs[name])
          for name, (code, stderr) in json.loads(result.stdout.splitlines()[-1]).items()}


BAD_INPUT = [
    (['train.stepz=3'], "unknown config key 'train.stepz'"),
    (['model.num_heads=3'], 'model.num_heads=3 does not divide model.d_model=64'),
    (['model.num_kv_heads=3'], 'model.num_kv_heads=3 does not divide model.num_heads=4'),
    (['optim.learning_rate=0'], 'optim.learning_rate=0.0 must be positive'),
    (['train.steps=-5'], 'train.steps=-5 must be positive'),
    (['model.position=learned', 'model.max_length=32'],
     'data.seq_len=64 exceeds model.max_length=32'),
    (['mesh.data=3'], 'mesh {.*} has 3 devices but 8 are present'),
    (['mesh.fsdp=-1'], r'mesh.data=-1 and mesh.fsdp=-1, .* \(mesh.data is -1 by default\); '
                       'give the others a size, e.g. --config.mesh.data=1 to keep mesh.fsdp=-1'),
    (['train.batch_size=12'],
     'train.batch_size=12 does not split over data x fsdp x expert = 8'),
    (['train.phases=2:12:32'], r'train.phases: phase 1 \(12 x 32, steps 1..2\): '
                               'train.batch_size=12 does not split over data x fsdp x '
                               'expert = 8'),
    (['data.path=/nonexistent/corpus.txt'], "data.path='/nonexistent/corpus.txt' does not"),
    (['data.path=EMPTY'], 'holds no text'),
    (['train.profile_steps=(5,3)'],
     r'train.profile_steps=\(5, 3\) traces steps outside the run \(1..train.steps=6\)'),
    (['model.scan_unroll=0'], 'model.scan_unroll=0 must be positive'),
    (['data.task.kind=prompt_completion', 'data.task.path=TASK'],
     r"task/train.jsonl:2: no field 'completion'; data.task.kind='prompt_completion' reads "
     'prompt, completion'),
    (['data.task.kind=classification', 'data.task.path=TASK'],
     r"task/train.jsonl:1: no field 'text'"),
]
BAD_INPUT_IDS = ['misspelt', 'heads', 'kv_heads', 'lr', 'steps', 'max_length', 'mesh',
                 'mesh_rest', 'batch', 'phase_batch', 'no_corpus', 'empty_corpus', 'profile_steps',
                 'scan_unroll', 'task_field', 'task_kind']


def _bad_input(tmp_path, overrides):
  empty = tmp_path / 'empty.txt'
  empty.write_text('\n')
  (tmp_path / 'task').mkdir()
  (tmp_path / 'task' / 'train.jsonl').write_text('{"prompt": "a", "completion": "b"}\n'
                                                 '{"prompt": "c"}\n')
  return [o.replace('EMPTY', str(empty)).replace('TASK', str(tmp_path / 'task'))
          for o in overrides]


def _assert_one_line(code, stderr, message, workdir):
  assert code == 2, stderr[-2000:]
  lines = stderr.strip().splitlines()
  assert 'Traceback' not in stderr and len(lines) == 1, stderr[-2000:]
  assert lines[0].startswith('error: ')
  assert re.search(message, lines[0]), lines[0]
  assert not (workdir / 'metrics.jsonl').exists()


@pytest.mark.parametrize('case', BAD_INPUT_IDS)
def test_bad_input_is_one_line_naming_the_field(bad_input_runs, case):
  code, stderr, argv = bad_input_runs[case]
  workdir = next(a for a in argv if a.startswith('--workdir='))[len('--workdir='):]
  _assert_one_line(code, stderr, BAD_INPUT[BAD_INPUT_IDS.index(case)][1], Path(workdir))


@pytest.mark.parametrize('case', ['misspelt', 'task_field'])
def test_the_command_prints_that_line_alone_and_exits_2(tmp_path, case):
  overrides, message = BAD_INPUT[BAD_INPUT_IDS.index(case)]
  result = launch(tmp_path / 'run', *_bad_input(tmp_path, overrides), devices=8)
  _assert_one_line(result.returncode, result.stderr, message, tmp_path / 'run')


@pytest.mark.parametrize('argument,message', [
    ('train.steps=5', "unexpected argument 'train.steps=5': an override is written "
                      '--config.train.steps=5'),
    ('gpt', "unexpected argument 'gpt': flags are written --name=value"),
    ('--train.steps=5', 'unknown flag --train.steps: a config field is written '
                        '--config.train.steps=5')])
def test_an_argument_absl_would_drop_is_one_line(tmp_path, argument, message):
  result = subprocess.run([*_command(tmp_path / 'run'), argument], env=_env(),
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 2 and result.stderr == f'error: {message}\n', result.stderr
  assert not (tmp_path / 'run').exists()


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
  """An uninterrupted 120-step run every resume test compares against."""
  workdir = tmp_path_factory.mktemp('reference')
  result = launch(workdir, 'train.steps=120', 'train.checkpoint_every=20',
                  'train.eval_every=1000')
  assert result.returncode == 0, result.stderr[-3000:]
  return workdir


def test_train_logs_metrics_events_and_checkpoints_then_eval_reads_them(reference):
  rows = metrics_lib.read(reference)
  train_rows = [r for r in rows if 'loss' in r]
  assert [r['step'] for r in train_rows] == list(range(1, 121))
  for key in ('loss', 'learning_rate', 'grad_norm', 'tokens_per_sec', 'mfu'):
    assert key in train_rows[-1]
  assert train_rows[-1]['mfu'] is None  # CPU: unknown peak
  assert train_rows[-1]['loss'] < train_rows[0]['loss'] - 0.5
  assert [r['step'] for r in rows if 'eval_loss' in r] == [120]
  assert rows[0]['event'] == 'start' and rows[0]['compile_seconds'] > 0
  assert all(r['time_step'] > 0 for r in train_rows[1:])  # each window's train-step seconds
  # how long each step took (a row per step here), from the one before's end: none for step 1
  assert train_rows[0]['step_seconds_median'] == 0
  assert all(r['step_seconds_median'] == r['step_seconds_max'] > 0 for r in train_rows[1:])
  # tokens/s: a step's tokens over the median of the last 20 step times; none before one
  tokens, times = rows[0]['batch_global'] * rows[0]['seq_len'], []
  for r in train_rows:
    times += [r['step_seconds_median']] if r['step'] > 1 else []
    want = pytest.approx(tokens / statistics.median(times[-20:]), rel=0.05) if times else None
    assert r['tokens_per_sec'] == want
  end = rows[-1]  # where the run's wall time went
  assert end['event'] == 'end' and end['step'] == 120
  times = {k: v for k, v in end.items() if k.startswith('time_')}
  assert set(times) == {'time_setup', 'time_compile', 'time_data', 'time_step', 'time_eval',
                        'time_checkpoint', 'time_other'}
  assert sum(times.values()) == pytest.approx(end['wall_seconds'], abs=0.01)
  assert end['time_compile'] == pytest.approx(rows[0]['compile_seconds'], abs=0.01)
  assert end['goodput'] == pytest.approx(end['time_step'] / end['wall_seconds'], abs=1e-3)
  assert 0 < end['goodput'] < 1
  assert any(name.startswith('events.out.tfevents') for name in os.listdir(reference))
  assert sorted(os.listdir(reference / 'checkpoints')) == ['100', '120', '80']

  result = launch(reference, mode='eval')
  assert result.returncode == 0, result.stderr[-3000:]
  last = metrics_lib.read(reference)[-1]
  assert last['mode'] == 'eval' and last['step'] == 120
  assert last['eval_loss'] == pytest.approx([r for r in rows if 'eval_loss' in r][-1]['eval_loss'])


def test_resume_after_sigkill_repeats_the_uninterrupted_losses(reference, tmp_path):
  tokenizer = reference / 'tokenizer' / 'bpe_512.model'
  args = ('train.steps=120', 'train.checkpoint_every=20', 'train.eval_every=1000',
          f'data.tokenizer.path={tokenizer}')
  process = subprocess.Popen(_command(tmp_path, *args), env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  deadline = time.time() + 120
  while not (tmp_path / 'checkpoints' / '20').exists() and time.time() < deadline:
    time.sleep(0.01)
  process.send_signal(signal.SIGKILL)
  process.wait()

  result = launch(tmp_path, *args)
  assert result.returncode == 0, result.stderr[-3000:]
  header, rows = _after_last_start(tmp_path)
  assert 20 <= header['step'] < 120
  resumed, want = _losses(rows), _losses(metrics_lib.read(reference))
  assert sorted(resumed) == list(range(header['step'] + 1, 121))
  assert {s: resumed[s] for s in resumed} == {s: want[s] for s in resumed}


def test_a_sigkill_while_a_checkpoint_is_written_resumes_from_the_previous_one(reference,
                                                                              tmp_path):
  args = ('train.steps=120', 'train.checkpoint_every=20', 'train.eval_every=1000')
  killed = launch(tmp_path, *args, 'train.fault.kill_in_save=40')
  assert killed.returncode == -signal.SIGKILL
  assert killed.stdout.strip().endswith('fault: SIGKILL while writing the checkpoint of step 40')
  assert _saved_steps(tmp_path) == [20]  # 40 is an unfinished temporary directory
  result = launch(tmp_path, *args)
  assert result.returncode == 0, result.stderr[-3000:]
  header, rows = _after_last_start(tmp_path)
  assert header['step'] == 20
  want = _losses(metrics_lib.read(reference))
  assert _losses(rows) == {s: want[s] for s in range(21, 121)}


PHASED = ('train.steps=20', 'train.phases=8:4:32,16:8:32', 'train.checkpoint_every=1',
          'train.log_every=1', 'train.eval_every=1000')  # batch, then length changes


def _kill_after(workdir, step, *args):
  """Starts a run and SIGKILLs it once it logs `step` -> the newest checkpoint then."""
  helpers.kill_after_step(_command(workdir, *args), step, _env())
  return _saved_steps(workdir)[-1]


def test_a_run_killed_in_each_phase_resumes_to_the_uninterrupted_losses(tmp_path):
  reference = launch(tmp_path / 'reference', *PHASED)
  assert reference.returncode == 0, reference.stderr[-3000:]
  assert 'first 4 x 32 to step 8, 8 x 32 to step 16' in reference.stdout
  assert [line for line in reference.stdout.splitlines() if line.startswith('compiling')] == [
      f'compiling the train step for {shape} (compile cache: {os.environ["JAX_COMPILATION_CACHE_DIR"]})'
      for shape in ('4 x 32', '8 x 32', '8 x 64')]
  run = tmp_path / 'run'
  killed = [_kill_after(run, 3, *PHASED)]  # in the first phase, then in the second
  killed.append(_kill_after(run, 10, *PHASED))
  assert killed[0] < 8 and 8 <= killed[1] < 16, killed
  result = launch(run, *PHASED)
  assert result.returncode == 0, result.stderr[-3000:]
  starts = [r['step'] for r in metrics_lib.read(run) if r.get('event') == 'start']
  assert starts[1:] == killed
  want = _losses(metrics_lib.read(tmp_path / 'reference'))
  got = {s: row['loss'] for s, row in helpers.rows_by_step(metrics_lib.read(run)).items()}
  assert got == want


def test_a_second_start_loads_the_train_step_from_the_compile_cache(tmp_path):
  cache, args = tmp_path / 'cache', ('train.steps=4', 'train.checkpoint_every=2',
                                     'train.eval_every=1000')
  programs = lambda: {n for n in os.listdir(cache)
                      if n.startswith('jit_train_step') and n.endswith('-cache')}
  result = launch(tmp_path / 'run', *args, f'train.compile_cache_dir={cache}')
  assert result.returncode == 0, result.stderr[-3000:]
  first = programs()
  assert len(first) == 1
  shutil.rmtree(tmp_path / 'run' / 'checkpoints' / '4')  # as if it had stopped at step 2
  result = launch(tmp_path / 'run', *args, f'train.compile_cache_dir={cache}')
  assert result.returncode == 0, result.stderr[-3000:]
  header, _ = _after_last_start(tmp_path / 'run')
  assert header['step'] == 2 and header['compile_cache'] == str(cache)
  assert programs() == first  # the same program, read back instead of compiled again

  result = launch(tmp_path / 'other', *args, 'train.compile_cache_dir=/proc/zoo')
  assert result.returncode == 2
  assert result.stderr.strip() == (
      "error: train.compile_cache_dir='/proc/zoo' cannot be written (No such file or "
      "directory); point it to a writable directory or set it to '' to compile every start")


def _interrupt(workdir, signum, *args, after_checkpoint=20):
  """Starts a run, sends `signum` once checkpoint `after_checkpoint` exists -> (rc, stdout,
  stderr)."""
  process = subprocess.Popen(_command(workdir, *args), env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 120
  while not (workdir / 'checkpoints' / str(after_checkpoint)).exists() and \
      time.time() < deadline:
    time.sleep(0.05)
  process.send_signal(signum)
  stdout, stderr = process.communicate(timeout=120)
  return process.returncode, stdout, stderr


def _saved_steps(workdir):
  return sorted(int(n) for n in os.listdir(workdir / 'checkpoints') if n.isdigit())


def test_ctrl_c_saves_the_step_it_is_on_and_the_rerun_repeats_the_uninterrupted_losses(
    tmp_path):
  args = ('train.checkpoint_every=20', 'train.eval_every=100000', 'optim.schedule=constant',
          'optim.warmup_steps=5')
  code, stdout, stderr = _interrupt(tmp_path / 'run', signal.SIGINT, 'train.steps=100000',
                                    *args)
  saved = _saved_steps(tmp_path / 'run')[-1]
  assert code == 130, stderr[-3000:]
  assert 'Traceback' not in stderr and 'SIGINT: finishing the current step' in stdout
  assert stdout.rstrip().endswith(f'SIGINT: saved a checkpoint at step {saved}; run the same '
                                  'command to resume')
  assert saved == max(_losses(metrics_lib.read(tmp_path / 'run'))) and saved > 20

  end = f'train.steps={saved + 5}'  # constant schedule: the same rates either way
  result = launch(tmp_path / 'run', end, *args)
  assert result.returncode == 0, result.stderr[-3000:]
  header, rows = _after_last_start(tmp_path / 'run')
  assert header['step'] == saved and f'resumed from step {saved}' in result.stdout
  uninterrupted = launch(tmp_path / 'uninterrupted', end, *args)
  assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
  want = _losses(metrics_lib.read(tmp_path / 'uninterrupted'))
  assert _losses(rows) == {s: want[s] for s in range(saved + 1, saved + 6)}


def test_sigterm_saves_the_current_step_and_exits_143(tmp_path):
  code, stdout, stderr = _interrupt(tmp_path, signal.SIGTERM, 'train.steps=100000',
                                    'train.checkpoint_every=50', 'train.eval_every=100000',
                                    after_checkpoint=50)
  assert code == 143, stderr[-3000:]
  saved = _saved_steps(tmp_path)[-1]
  assert f'SIGTERM: saved a checkpoint at step {saved}' in stdout
  assert saved == max(_losses(metrics_lib.read(tmp_path))) and saved > 50


@pytest.mark.parametrize('workdir,message', [
    ('{tmp}/file', '{tmp}/file is a file; pass a directory path'),
    ('{tmp}/file/run', '{tmp}/file/run cannot be created: {tmp}/file is a file; pass a '
                       'directory path'),
    ('/proc/zoo/run', '/proc/zoo/run cannot be written (/proc: No such file or directory); '
                      'pass a directory this user can write'),
], ids=['a_file', 'under_a_file', 'not_writable'])
def test_a_workdir_that_cannot_be_written_is_one_line_before_anything(tmp_path, workdir,
                                                                       message):
  (tmp_path / 'file').write_text('not a directory')
  result = launch(workdir.format(tmp=tmp_path))
  assert result.returncode == 2
  assert result.stderr.strip() == f'error: --workdir={message.format(tmp=tmp_path)}'
  assert os.listdir(tmp_path) == ['file']


def test_a_job_too_big_for_this_machine_is_refused_before_anything_is_written(tmp_path):
  command = [sys.executable, '-m', 'zoo.launch', f'--config={SMOKE[:-len(":smoke")]}',
             f'--workdir={tmp_path / "run"}', '--config.train.batch_size=1048576',
             '--config.data.seq_len=1024']  # ~TiBs of activations: no machine has that
  result = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300,
                          check=False)
  assert result.returncode == 2, result.stderr[-3000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: the train step needs ~')
  assert "run the config's :smoke variant here" in lines[0]
  assert not os.path.exists(tmp_path / 'run')


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(reference, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.copytree(reference, tmp_path, dirs_exist_ok=True)
  state_dir = tmp_path / 'checkpoints' / '120' / 'state'
  for root, _, files in os.walk(state_dir):
    for name in files:
      if name not in ('_METADATA', '_CHECKPOINT_METADATA', '_sharding'):
        with open(os.path.join(root, name), 'wb') as f:
          f.write(b'garbage')
  result = launch(tmp_path, 'train.steps=130', 'train.checkpoint_every=20', 'train.eval_every=1000')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'warning: checkpoint 120 is unreadable' in result.stdout
  header, _ = _after_last_start(tmp_path)
  assert header['step'] == 100
  aside = [n for n in os.listdir(tmp_path / 'checkpoints') if n.startswith('unreadable-120')]
  assert len(aside) == 1  # kept, not deleted


def test_repeated_nonfinite_updates_stop_with_a_clear_message(tmp_path):
  result = launch(tmp_path, 'optim.learning_rate=1e30', 'optim.warmup_steps=0',
                  'train.steps=50', 'optim.clip_norm=0.0')
  assert result.returncode == 1, result.stderr[-3000:]
  assert 'updates in a row had a NaN/Inf loss or gradient' in result.stderr.strip().splitlines()[-1]
  rows = [r for r in metrics_lib.read(tmp_path) if 'loss' in r]
  assert rows[-1]['nonfinite_total'] >= 4


def _generate(workdir, *args, config=SMOKE, devices=1):
  command = [sys.executable, '-m', 'zoo.launch', *([f'--config={config}'] if config else []),
             f'--workdir={workdir}', '--mode=generate', *args]
  return subprocess.run(command, env=_env(devices), capture_output=True, text=True,
                        timeout=300, check=False)


def test_without_a_workdir_the_run_goes_to_one_named_after_the_config(tmp_path):
  command = [sys.executable, '-m', 'zoo.launch', f'--config={SMOKE}', '--config.train.steps=3']
  result = subprocess.run(command, env=_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  workdir = os.path.join('runs', 'gpt_shakespeare_smoke')
  assert f'workdir {workdir}: fresh' in result.stdout
  header, rows = _after_last_start(tmp_path / workdir)
  assert header['workdir'] == workdir and rows[-1]['step'] == 3
  assert os.path.isdir(tmp_path / workdir / 'checkpoints' / '3')


def test_generate_continues_each_prompt_from_the_newest_checkpoint(reference):
  args = ('--prompt=ROMEO:', '--prompt=First Citizen:', '--config.generate.max_new_tokens=12',
          '--config.generate.temperature=0.9')
  result = _generate(reference, *args)
  assert result.returncode == 0, result.stderr[-3000:]
  blocks = result.stdout.split('--- step 120: ')[1:]
  assert len(blocks) == 2 and blocks[0].split('\n', 1)[1].startswith('ROMEO:')
  assert blocks[1].split('\n', 1)[1].startswith('First Citizen:')
  counts = [int(b.split(' tokens')[0]) for b in blocks]
  assert all(0 <= n <= 12 for n in counts) and max(counts) > 0
  # the same draws with the parameters (and the cache) sharded over 8 devices
  sharded = _generate(reference, *args, '--config.mesh.data=2', '--config.mesh.fsdp=2',
                      '--config.mesh.tensor=2', devices=8)
  assert sharded.returncode == 0, sharded.stderr[-3000:]
  assert sharded.stdout == result.stdout


def test_generate_cuts_at_stop_strings_takes_penalties_and_drafts_for_itself(reference):
  args = ('--prompt=ROMEO:', '--config.generate.max_new_tokens=16')
  plain = _generate(reference, *args)
  assert plain.returncode == 0, plain.stderr[-3000:]
  text = plain.stdout.split('\nROMEO:', 1)[1].rstrip('\n')
  stop = text[len(text) // 2:len(text) // 2 + 2]
  cut = _generate(reference, *args, f'--config.generate.stop=({stop!r},)')
  assert cut.returncode == 0, cut.stderr[-3000:]
  assert f'before stop string {stop!r}\nROMEO:' + text[:text.find(stop)] + '\n' in cut.stdout
  penalized = _generate(reference, *args, '--config.generate.repetition_penalty=3.0',
                        '--config.generate.frequency_penalty=1.0', '--config.generate.min_p=0.1')
  assert penalized.returncode == 0, penalized.stderr[-3000:]
  assert penalized.stdout != plain.stdout  # greedy either way; the penalties changed it
  # the run as its own speculative draft: the same text, every proposal kept
  speculative = _generate(reference, *args, f'--config.generate.draft_workdir={reference}',
                          '--config.generate.draft_tokens=3')
  assert speculative.returncode == 0, speculative.stderr[-3000:]
  text, line = speculative.stdout.rsplit('\nspeculative: ', 1)
  assert text + '\n' == plain.stdout
  kept, proposed = re.match(r'(\d+) of (\d+) draft tokens kept \(100%\)', line).groups()
  assert kept == proposed


@pytest.mark.parametrize('args, message', [
    ([], r'--mode=generate needs at least one --prompt'),
    (['--prompt=hi', '--config.generate.repetition_penalty=0.5'],
     r'generate.repetition_penalty=0.5 must be >= 1'),
    (['--prompt=hi', '--config.generate.top_p=0'], r'generate.top_p=0.0 must be in \(0, 1\]'),
])
def test_generate_bad_input_is_one_line_naming_the_field(reference, args, message):
  _assert_one_line_error(_generate(reference, *args), message)


def test_generate_in_an_untrained_workdir_says_train_first(tmp_path):
  _assert_one_line_error(_generate(tmp_path, '--prompt=hi'),
                         r'--mode=generate: no checkpoint in .*; train first')


def _assert_one_line_error(result, message):
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr[-2000:]
  assert re.search(message, lines[0]), lines[0]


def test_generate_with_another_config_than_the_runs_says_so_and_without_one_reads_the_runs(
    reference):
  """The run trained :smoke; the full config's tokenizer is not there, and its shapes
  differ: the error names the fields and the way out, and leaving --config out works."""
  full = helpers.config_file('gpt_shakespeare', None)
  result = _generate(reference, '--prompt=ROMEO:', config=full)
  _assert_one_line_error(result, r'parameters have other shapes .*: the config given is not the '
                                 r'one it was trained with; changed: .*model.d_model=.* \(was '
                                 r"64\).*; leave --config out to read the run's own config.json")
  assert not os.path.exists(reference / 'tokenizer' / 'bpe_4096.model')
  result = _generate(reference, '--prompt=ROMEO:', '--config.generate.max_new_tokens=4',
                     config=None)
  assert result.returncode == 0, result.stderr[-3000:]
  assert '--- step 120: 4 tokens' in result.stdout
  no_config = subprocess.run([sys.executable, '-m', 'zoo.launch', f'--workdir={reference}'],
                             env=_env(), capture_output=True, text=True, timeout=300,
                             check=False)
  _assert_one_line_error(no_config, r'--config=configs/NAME.py\[:arg\] is needed .only '
                                    r'--mode=eval and --mode=generate read')


def test_generate_reads_no_corpus(tmp_path):
  corpus = tmp_path / 'corpus.txt'
  corpus.write_text(open(EMBEDDED_CORPUS, encoding='utf-8').read()[:60_000])
  workdir = tmp_path / 'run'
  trained = launch(workdir, f'data.path={corpus}', 'train.steps=3', 'train.checkpoint_every=3')
  assert trained.returncode == 0, trained.stderr[-3000:]
  corpus.unlink()
  result = _generate(workdir, '--prompt=ROMEO:', f'--config.data.path={corpus}',
                     '--config.generate.max_new_tokens=4')
  assert result.returncode == 0, result.stderr[-3000:]
  assert '--- step 3: ' in result.stdout and 'ROMEO:' in result.stdout


def test_an_encoder_does_not_generate(tmp_path):
  result = _generate(tmp_path, '--prompt=hi',
                     config=helpers.config_file('bert_base'))
  assert result.returncode == 2 and "model.family='encoder' does not" in result.stderr


def test_eval_of_another_model_shape_is_one_line_and_moves_no_checkpoint(reference):
  before = sorted(os.listdir(reference / 'checkpoints'))
  result = launch(reference, 'model.d_model=128', mode='eval')
  _assert_one_line_error(result, 'holds a run whose parameters have other shapes .* changed: '
                                 'model.d_model=128 \\(was 64\\)')
  assert sorted(os.listdir(reference / 'checkpoints')) == before  # none moved aside


def test_a_hung_step_ends_the_run_with_every_stack_and_exit_75_and_the_rerun_resumes(tmp_path):
  args = ('train.steps=12', 'train.checkpoint_every=2', 'train.eval_every=1000',
          'train.hang.factor=2', 'train.hang.min_seconds=1')
  result = launch(tmp_path, *args, 'train.fault.hang_step=7')
  assert result.returncode == 75, result.stderr[-3000:]
  lines = result.stderr.strip().splitlines()
  assert lines[-1].startswith('hang: no train step completed in ') and 'exiting 75' in lines[-1]
  report = (tmp_path / 'hang-process_0.txt').read_text()
  assert report.startswith('no train step completed in ') and 'zoo/train/loop.py' in report
  assert 'Thread' in report and '_watch' in report  # every thread's stack, the watchdog's too
  assert _saved_steps(tmp_path)[-1] == 6  # saved before the hang, nothing lost
  rerun = launch(tmp_path, *args)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  header, _ = _after_last_start(tmp_path)
  assert header['step'] == 6
