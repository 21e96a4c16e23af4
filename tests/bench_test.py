"""zoo.bench: the numbers it measures on a tiny decoder, the table it prints, what bad
input gets, and the next-sentence length leak. (Speed itself is never asserted: benchmarks
print it.)"""

import importlib.util
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests import helpers
from tests.helpers import REPO
from zoo import counting
from zoo import run as run_lib
from zoo.bench import __main__ as bench
from zoo.bench import jax_side
from zoo.bench import machine
from zoo.bench import nsp_leak
from zoo.bench import torch_side
from zoo.errors import ConfigError

SMOKE = helpers.config_file('gpt_shakespeare')


def test_measure_trains_and_decodes_the_config():
  config = helpers.load(SMOKE, ['model.scan_unroll=2'])
  results = bench.measure(run_lib.resolve(config), runs=2, steps=2, decode_batches=[1, 3],
                          prompt_len=4,
                          new_tokens=5, use_torch=False)
  z = results['zoo']
  assert results['torch'] is None and results['ratios'] == {}
  tokens = config.train.batch_size * config.data.seq_len
  assert len(z['round_tokens_per_sec']) == 2
  assert z['train_tokens_per_sec'] == pytest.approx(tokens / (z['step_ms'] / 1e3))
  assert z['step_ms_p10'] <= z['step_ms_p90'] and z['compile_seconds'] > 0
  assert 5.5 < z['first_loss'] < 7.5  # random init: about ln(512) = 6.24
  assert z['mfu'] is None  # a CPU has no known peak
  assert z['decode_tokens_per_sec_b3'] > 0 and len(z['decode_round_b1']) == 2
  assert z['model_gflops'] == pytest.approx(
      z['train_tokens_per_sec'] * counting.flops_per_token(config) / 1e9)
  assert len(z['round_matmul_gflops']) == 2 and z['matmul_gflops'] > 0


def test_alternating_steps_warms_each_trainer_then_takes_turns():
  order = []

  class Trainer:
    def __init__(self, name):
      self.name = name

    def step(self):
      order.append(self.name)

  times = jax_side.alternating_steps({'a': Trainer('a'), 'b': Trainer('b')}, steps=3,
                                     warmup=2)
  assert order == ['a', 'a', 'b', 'b'] + ['a', 'b'] * 3
  assert list(times) == ['a', 'b'] and all(len(t) == 3 and min(t) >= 0
                                           for t in times.values())


def test_the_matmul_alone_is_the_mlp_input_projection_of_a_batch():
  config = helpers.load(SMOKE)
  m = config.model
  shape = bench.matmul_shape(config)
  assert shape == (config.train.batch_size * config.data.seq_len, m.d_model, m.mlp_dim)
  matmul = jax_side.Matmul((6, 5, 3), 'float32')
  assert matmul.flops == 2 * 6 * 5 * 3
  want = np.asarray(matmul.a, np.float64) @ np.asarray(matmul.b, np.float64)
  np.testing.assert_allclose(np.asarray(matmul.run()), want, rtol=1e-5, atol=1e-5)


def test_table_gives_both_sides_and_the_ratio():
  side = {'train_tokens_per_sec': 5000.0, 'step_ms': 409.6, 'step_ms_p10': 400.0,
          'step_ms_p90': 420.5, 'first_loss': 8.31774, 'compile_seconds': 4.2, 'mfu': None,
          'decode_tokens_per_sec_b1': 512.0, 'model_gflops': 120.0, 'matmul_gflops': 200.0}
  torch = dict(side, train_tokens_per_sec=4000.0, step_ms=512.0, decode_tokens_per_sec_b1=256.0,
               model_gflops=96.0, matmul_gflops=128.0)
  lines = bench.table({'zoo': side, 'torch': torch,
                       'ratios': {'train': 1.25, 'decode_b1': 2.0, 'matmul': 1.5625}},
                      [1]).splitlines()
  cells = {line.split('|')[1].strip(): [c.strip() for c in line.split('|')[2:5]]
           for line in lines[2:]}
  assert cells['train tokens/s'] == ['5,000', '4,000', '1.25x']
  assert cells['step ms, median'] == ['409.6', '512.0', '-']
  assert cells['step ms, p10-p90'] == ['400.0-420.5', '400.0-420.5', '-']
  assert cells['first loss'] == ['8.3177', '8.3177', '-']
  assert cells['decode tokens/s, batch 1'] == ['512', '256', '2.00x']
  assert cells['MFU'][0] == 'n/a (no known peak for this device)'
  assert cells['model GFLOP/s in the step'] == ['120.0', '96.0', '-']
  assert cells['matmul GFLOP/s alone, [B L, D] x [D, F]'] == ['200.0', '128.0', '1.56x']
  assert cells['step / matmul GFLOP/s'] == ['60%', '75%', '-']
  alone = bench.table({'zoo': side, 'torch': None, 'ratios': {}}, [1]).splitlines()
  assert alone[2].split('|')[3].strip() == '-'


EPYC_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512_bf16
processor\t: 1
model name\t: AMD EPYC 9R14
"""


def test_the_header_names_the_cpu_model_cores_and_vector_extensions():
  assert machine.describe_cpu(EPYC_CPUINFO, 2) == (
      'AMD EPYC 9R14 (family 25 model 17, 2 cores, avx2 avx512f avx512_bf16)')
  xeon = EPYC_CPUINFO.replace('AMD EPYC 9R14', 'Intel(R) Xeon(R) Platinum 8488C').replace(
      'avx512_bf16', 'avx512_bf16 amx_bf16 amx_tile')
  assert machine.describe_cpu(xeon, 1).endswith('1 core, avx2 avx512f avx512_bf16 amx_tile)')
  arm = 'processor\t: 0\nmodel name\t: Neoverse-V2\nFeatures\t: fp asimd sve\n'
  assert machine.describe_cpu(arm, 4) == 'Neoverse-V2 (4 cores)'
  described = machine.describe(jax.devices('cpu')[0])
  assert described.startswith('cpu: ') and 'core' in described


def test_the_pytorch_side_refuses_what_transformers_computes_differently():
  gpt2 = ['model.num_layers=2', 'model.d_model=64', 'model.num_heads=4', 'model.mlp_dim=128',
          'model.vocab_size=512', 'model.max_length=64', 'data.seq_len=64']
  torch_side.check(helpers.load('configs/gpt2_small.py', gpt2))  # GPT-2 as transformers
  with pytest.raises(ConfigError, match="model.activation='gelu': Hugging Face gpt2 computes "
                                        "'gelu_tanh'; set it so or use --torch=off"):
    torch_side.check(helpers.load('configs/gpt2_small.py', [*gpt2, 'model.activation=gelu']))
  with pytest.raises(ConfigError, match="model.family='encoder': the PyTorch side is a causal"):
    torch_side.check(helpers.load(helpers.config_file('bert_base')))


def test_decode_lengths_must_fit_a_learned_position_table():
  config = helpers.load('configs/gpt2_small.py', ['model.max_length=128', 'data.seq_len=128'])
  assert bench._new_tokens(config, 32, None) == 96  # pylint: disable=protected-access
  with pytest.raises(ConfigError, match='--new_tokens=100 after --prompt_len=32 must be >= 1 '
                                        'and fit model.max_length=128'):
    bench._new_tokens(config, 32, 100)  # pylint: disable=protected-access


def test_a_missing_config_is_one_line_and_exit_2():
  result = subprocess.run([sys.executable, '-m', 'zoo.bench', '--config=configs/nope.py'],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 2
  assert result.stderr.strip() == ("error: --config=configs/nope.py: no such file "
                                   "'configs/nope.py'; pass a file in configs/")


def _xla_options(*args):
  return subprocess.run([sys.executable, 'benchmarks/xla_options.py', *args], cwd=REPO,
                        env=helpers.cpu_env(), capture_output=True, text=True, timeout=120,
                        check=False)


def test_xla_options_lays_variants_over_the_zoos_and_refuses_bad_ones_in_one_line():
  spec = importlib.util.spec_from_file_location(
      'xla_options', os.path.join(REPO, 'benchmarks', 'xla_options.py'))
  xla_options = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(xla_options)
  own = {'xla_cpu_copy_insertion_use_region_analysis': True}
  assert xla_options.laid_over(own, {'xla_cpu_ftz': True}) == {**own, 'xla_cpu_ftz': True}
  assert xla_options.laid_over(own, {'xla_cpu_copy_insertion_use_region_analysis': None}) is None
  assert xla_options.laid_over(None, {}) is None
  assert own == {'xla_cpu_copy_insertion_use_region_analysis': True}  # not changed in place
  not_json = _xla_options('--variant=ftz')
  assert not_json.returncode == 2
  assert not_json.stderr.strip() == (
      "error: --variant=ftz: not a JSON object of XLA options to values (null drops one of "
      "the zoo's); e.g. --variant='{\"xla_cpu_ftz\": true}'")
  unknown = _xla_options('--variant={"xla_cpu_nope": true}')
  assert unknown.returncode == 2 and unknown.stderr.strip().splitlines() == [
      "error: --variant={\"xla_cpu_nope\": true}: No such compile option: 'xla_cpu_nope'; "
      "see XLA's DebugOptions for the names and values"]


def test_the_length_threshold_accuracy_is_balanced_over_labels():
  # lengths 1..4 IsNext, 3..6 NotNext: `length > 2` gets every IsNext 1, 2 and every NotNext
  assert nsp_leak.threshold_accuracy([1, 2, 3, 4, 3, 4, 5, 6], [0, 0, 0, 0, 1, 1, 1, 1]) == \
      pytest.approx((2 / 4 + 4 / 4) / 2)
  assert nsp_leak.threshold_accuracy([5] * 6, [0, 1, 1, 1, 1, 1]) == 0.5  # no information


def test_bert_pairs_leak_little_of_their_label_through_their_length(tmp_path):
  config = helpers.smoke('bert_base', 'data.seq_len=128', 'model.max_length=128')
  out = nsp_leak.measure(config, str(tmp_path), rows=2000)
  assert 0.45 < out['not_next_share'] < 0.55
  assert out['threshold_accuracy'] < 0.6, out  # 0.65 with a split at any piece


def test_gpu_speed_reports_gains_rooflines_and_the_plan_by_hand_and_refuses_unknown_variants():
  spec = importlib.util.spec_from_file_location(
      'gpu_speed', os.path.join(REPO, 'benchmarks', 'gpu_speed.py'))
  gpu_speed = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(gpu_speed)
  train = lambda tokens, seconds, gib: {'device': 'NVIDIA H100', 'tokens_per_sec': tokens,
                                        'step_seconds': seconds, 'mfu': 0.5,
                                        'compiled_bytes': gib * 2**30}
  results = {
      'bf16': {**train(1000, 2.0, 40), 'planned_seconds': 1.5, 'planned_bytes': 44 * 2**30},
      'cublas': train(1250, 1.6, 40),
      'lora': train(300, 1.0, 60),
      'lhs': {'error': 'exit 1 (its traceback above)'},
      'decode-gpt2_xl': {'device': 'NVIDIA H100', 'batches': {1: {
          'tokens_per_sec': 500.0, 'roofline_tokens_per_sec': 1000.0}}},
  }
  lines = gpu_speed.report(results).splitlines()
  assert lines[0] == 'on NVIDIA H100'
  rows = {}  # each variant's first row (the train table's; bf16's second is the plan's)
  for line in lines:
    if line.startswith('| '):
      rows.setdefault(line.split(' | ')[0][2:], line)
  assert '| 1.25x |' in rows['cublas'] and '| 1.00x |' in rows['bf16']
  assert '| - |' in rows['lora']  # another shape: no gain over bf16's
  assert rows['lhs'].endswith('exit 1 (its traceback above) |')
  assert rows['decode-gpt2_xl'] == '| decode-gpt2_xl | 1 | 500 | 1,000 | 50% |'
  # the plan: 1.5 s planned against 2.0 measured, 44 GiB against 40 compiled
  planned = [line for line in lines if line.startswith('| bf16 | 1.500')]
  assert planned == ['| bf16 | 1.500 | 2.000 | 0.75 | 44.0 | 40.0 | 1.10 |']
  refused = subprocess.run([sys.executable, 'benchmarks/gpu_speed.py', '--only=nope'],
                           cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
  assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith(
      "gpu_speed.py: error: --only: unknown variants ['nope']; they are bf16, cublas")
