"""Plans that compile: the real train step on simulated CPU devices (--plan_compile) and on a
TPU slice through libtpu (--plan_topology), the mesh sweep, and their bad input."""

import collections
import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests import helpers
from tests.helpers import REPO
from zoo import config as config_lib
from zoo import counting
from zoo import plan
from zoo import run as run_lib
from zoo import sharding
from zoo.plan import analytic
from zoo.plan import compiled
from zoo.plan import memory
from zoo.plan import sweep
from zoo.plan import topology
from zoo.train import runtime

pytestmark = pytest.mark.usefixtures('low_effort')  # quicker TPU compiles: tests/conftest.py

SMOKE = helpers.config_file('gpt_shakespeare')


def _smoke(*overrides):
  return helpers.smoke('gpt_shakespeare', *overrides)


def test_slice_names_give_chips_and_torus_shapes():
  shapes = {name: (s.chips, s.shape) for name in ('v5p-128', 'v5p-1024', 'v4-32', 'v5e-256',
                                                    'v6e-8') for s in [topology.parse(name)]}
  assert shapes == {'v5p-128': (64, (4, 4, 4)), 'v5p-1024': (512, (8, 8, 8)),
                    'v4-32': (16, (2, 2, 4)), 'v5e-256': (256, (16, 16)), 'v6e-8': (8, (2, 4))}
  assert len(topology.devices(topology.parse('v5p-16'))) == 8  # one device per chip


def test_a_multi_slice_mesh_spans_the_data_axis_over_the_slices():
  devices = topology.devices(topology.parse('2xv5p-16'))  # 2 slices of 8 chips
  mesh = sharding.make_mesh(_smoke('mesh.data=4', 'mesh.fsdp=4', 'mesh.slices=2').mesh, devices)
  slice_of = np.vectorize(lambda d: d.slice_index)(mesh.devices)
  # data rows 0-1 live in slice 0 and 2-3 in slice 1: only the data axis crosses DCN
  np.testing.assert_array_equal(slice_of[:, :, 0, 0, 0, 0], [[0] * 4, [0] * 4, [1] * 4, [1] * 4])
  with pytest.raises(config_lib.ConfigError, match=r'mesh.slices=2 must divide mesh.data=1'):
    sharding.make_mesh(_smoke('mesh.data=1', 'mesh.fsdp=16', 'mesh.slices=2').mesh, devices)


def test_the_slices_can_split_fsdp_instead():
  devices = topology.devices(topology.parse('2xv5p-16'))
  config = _smoke('mesh.data=2', 'mesh.fsdp=8', 'mesh.slices=2', 'mesh.dcn_axis=fsdp')
  slice_of = np.vectorize(lambda d: d.slice_index)(sharding.make_mesh(config.mesh,
                                                                      devices).devices)
  # every data row holds both slices along fsdp (0-3 in slice 0, 4-7 in slice 1): the
  # weights' gathers cross DCN, each data replica spans the two slices
  np.testing.assert_array_equal(slice_of[:, :, 0, 0, 0, 0], [[0] * 4 + [1] * 4] * 2)
  with pytest.raises(config_lib.ConfigError, match=r"mesh.slices=2 must divide mesh.fsdp=1: "
                     r"mesh.dcn_axis='fsdp' spans the slices"):
    sharding.make_mesh(_smoke('mesh.data=16', 'mesh.slices=2', 'mesh.dcn_axis=fsdp').mesh,
                       devices)


def test_the_slices_can_split_the_pipeline_stages():
  devices = topology.devices(topology.parse('2xv5p-16'))
  config = _smoke('mesh.data=1', 'mesh.fsdp=8', 'mesh.stage=2', 'mesh.slices=2',
                  'mesh.dcn_axis=stage')
  slice_of = np.vectorize(lambda d: d.slice_index)(sharding.make_mesh(config.mesh,
                                                                      devices).devices)
  # stage 0 lives in slice 0 and stage 1 in slice 1: only stage boundaries cross DCN
  np.testing.assert_array_equal(slice_of[0, :, 0, 0, 0, :], [[0, 1]] * 8)


@pytest.mark.parametrize('name', ['v5x-8', 'v5p-12', 'v5e-512', 'tpu', '0xv5p-8'])
def test_a_slice_that_does_not_exist_is_one_line_with_examples(name):
  with pytest.raises(config_lib.ConfigError, match=r'--plan_topology=.*use one like v4-8'):
    topology.parse(name)


def test_without_libtpu_the_topology_plan_says_how_to_install_it(monkeypatch):
  monkeypatch.setitem(sys.modules, 'libtpu', None)  # import libtpu -> ImportError
  with pytest.raises(config_lib.ConfigError, match=r"needs libtpu; pip install 'zoo\[tpu\]'"):
    topology.devices(topology.parse('v5p-8'))


def test_a_tpu_plan_compiles_the_train_step_and_reports_the_compiler_numbers(tmp_path):
  out = tmp_path / 'plan.json'
  result = subprocess.run(
      [sys.executable, '-m', 'zoo.launch', f'--config={SMOKE}', '--mode=plan',
       '--plan_topology=v5p-8', f'--plan_json={out}', '--config.mesh.data=1',
       '--config.mesh.fsdp=4', '--config.model.dtype=bfloat16'],
      env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO), capture_output=True,
      text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  written = json.loads(out.read_text())
  assert written['compiled'] is True and written['topology']['chips'] == 4
  assert written['mesh'] == {'data': 1, 'fsdp': 4, 'tensor': 1, 'expert': 1,
                             'context': 1, 'stage': 1}
  assert 0 < written['per_device_bytes']['total'] < 95 * 2**30 and written['fits']
  # the compiler's FLOPs (scan corrected to all layers) against 6N + attention per token
  analytic = written['flops_per_token'] * 8 * 64
  assert analytic <= written['compiled_flops_per_step'] < 1.5 * analytic
  assert written['pallas_attention_flops_per_step'] == 0  # xla attention: all counted
  assert 'estimated step time on v5p-8' in result.stdout
  # the memory model's figure for the mesh beside the compiler's, in the JSON and the line
  # (on a shape this small the compiler's fixed costs dominate: 0.17 x)
  ratio = written['estimated_bytes_per_device'] / written['per_device_bytes']['total']
  assert ratio > 0
  assert f"the memory model estimated {written['estimated_bytes_per_device'] / 2**30:.2f} GiB, " \
      f'{ratio:.2f} x)' in result.stdout


def test_plan_compile_uses_the_simulated_devices_and_its_bytes_shrink_with_fsdp():
  data8 = plan.run(run_lib.resolve(_smoke('mesh.data=8')), compile_step=True)
  assert data8['compiled'] and data8['mesh']['data'] == 8
  fsdp8 = compiled.compile_step(run_lib.resolve(_smoke('mesh.data=1', 'mesh.fsdp=8')),
                                jax.devices(),
                                scan_corrected_cost=False)
  assert fsdp8['mesh_devices'] == 8
  assert fsdp8['per_device_bytes']['arguments'] < data8['per_device_bytes']['arguments'] / 4


@pytest.mark.parametrize('overrides, message', [
    (['mesh.data=3'], r'mesh .* has 3 devices but 4 are present.*divisors: \[1, 2, 4\]'),
    (['mesh.data=1', 'mesh.tensor=4', 'model.num_heads=2', 'model.num_kv_heads=2'],
     r'model.num_heads=2 does not split over mesh tensor=4'),
    (['mesh.data=4', 'train.batch_size=6'], r'train.batch_size=6 does not split over mesh '
                                            r'data x fsdp x expert=4'),
])
def test_a_mesh_that_cannot_shard_the_shape_fails_before_compiling(overrides, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    plan.run(run_lib.resolve(_smoke(*overrides)), topology_name='v5p-8')


def test_the_sweep_ranks_every_factorization_and_says_why_it_skips_some():
  assert len(sweep.factorizations(8, ('data', 'fsdp', 'tensor'))) == 10
  config = _smoke('model.num_heads=2', 'model.num_kv_heads=2', 'train.batch_size=4')
  rows = plan.run(run_lib.resolve(config), topology_name='v5p-16', sweep=True)['sweep']  # 8 chips
  # data x fsdp x tensor x context x stage: 35 meshes, the 15 with stages each tried with
  # 1, 2, 4 and 8 microbatches per stage, fill-drain and 2 and 4 rounds (which 2 layers
  # cannot split into: skipped)
  assert len(rows) == 20 + 15 * 4 * 3
  # (data, fsdp, tensor, expert, context, stage)
  skipped = {tuple(r['mesh'].values()): r['invalid'] for r in rows if r['invalid']}
  assert skipped[(1, 8, 1, 1, 1, 1)].startswith('train.batch_size=4 does not split')
  assert skipped[(2, 1, 4, 1, 1, 1)].startswith('model.num_heads=2 does not split over mesh '
                                                'tensor=4')
  assert skipped[(1, 1, 2, 1, 1, 4)].startswith('model.num_layers=2 does not split into mesh '
                                                'stage=4')
  assert all(r['invalid'] for r in rows if r['pipeline_repeats'] > 1)
  timed = [r['step_seconds'] for r in rows if not r['invalid']]
  assert timed == sorted(timed) and all(r['fits'] for r in rows if not r['invalid'])
  by_mesh = {}  # each mesh's fastest valid row
  for r in rows:
    if not r['invalid']:
      by_mesh.setdefault(tuple(r['mesh'].values()), r)
  assert (by_mesh[(1, 4, 2, 1, 1, 1)]['per_device_bytes'] <
          by_mesh[(4, 1, 2, 1, 1, 1)]['per_device_bytes'])
  # context 8 holds 1/8 of each row's tokens, and its ring traffic costs time over data 4 x 2
  assert (by_mesh[(1, 1, 1, 1, 8, 1)]['step_seconds'] >
          by_mesh[(4, 1, 1, 1, 2, 1)]['step_seconds'])
  # more microbatches, a smaller bubble: faster (batch 32, so 2 to 16 microbatches split)
  config = _smoke('model.num_heads=2', 'model.num_kv_heads=2', 'train.batch_size=32')
  staged = [r for r in plan.run(run_lib.resolve(config), topology_name='v5p-16',
                                sweep=True)['sweep']
            if tuple(r['mesh'].values()) == (2, 1, 2, 1, 1, 2)]
  assert [r['pipeline_microbatches'] for r in staged if not r['invalid']] == [16, 8, 4, 2]


def test_the_sweep_leaves_out_the_meshes_a_run_would_refuse():
  # a ramp's first phase of 4 sequences splits over at most 4 batch shards; splash on a
  # context axis needs chunks of 128 tokens, which 256 / 4 context chunks are not
  config = _smoke('train.batch_size=16', 'train.steps=10', 'train.phases=4:4:128',
                  'data.seq_len=256', 'model.max_length=256',
                  'model.attention.kernel=splash')
  skipped = {tuple(r['mesh'].values()): r['invalid']
             for r in sweep.sweep(run_lib.resolve(config),
                                  topology.parse('v5p-16')) if r['invalid']}
  assert skipped[(8, 1, 1, 1, 1, 1)] == ("a phase's batch of 4 does not split over data x "
                                         'fsdp x expert = 8')
  assert 'splash' in skipped[(2, 1, 1, 1, 4, 1)]
  assert (4, 1, 2, 1, 1, 1) not in skipped and (2, 2, 2, 1, 1, 1) not in skipped


def test_across_slices_the_dcn_axis_traffic_goes_at_the_dcn_bandwidth():
  chip = topology.parse('2xv5p-16').chip
  MESH = dict(data=4, fsdp=2, tensor=1, expert=1, context=1, stage=1)

  def seconds(config, sizes, slices):
    boxed = counting.abstract_params(config)
    base = analytic.plan(run_lib.resolve(config), mesh_sizes={a: 1 for a in sizes}, boxed=boxed)
    return sweep.estimate(config, sizes, chip, base, boxed, slices)[0], base

  # data 4 over 2 slices: the float32 gradients (2 x P x 4 / fsdp bytes each all-reduce
  # moves per chip) are reduced over the 2 chips of a slice (half over ICI), then each
  # chip's half is exchanged between the slices (a quarter over DCN); in one slice, 3/4 of
  # them over ICI
  config = _smoke('mesh.slices=2')
  two, base = seconds(config, MESH, 2)
  one, _ = seconds(config, MESH, 1)
  reduced = 2 * base['params_total'] * 4 / 2
  assert two - one == pytest.approx(reduced / 4 / chip.dcn_bandwidth +
                                    (reduced / 2 - 3 * reduced / 4) / chip.ici_bandwidth)
  # stage across slices: every stage boundary's activations wait for DCN
  config = _smoke('mesh.slices=2', 'mesh.dcn_axis=stage', 'model.pipeline_microbatches=2')
  staged = dict(MESH, data=2, stage=2)
  two, base = seconds(config, staged, 2)
  one, _ = seconds(config, staged, 1)
  handed = analytic.pipeline_plan(config, staged, 0)['boundary_bytes_per_step_per_device']
  assert two - one == pytest.approx(handed / chip.dcn_bandwidth - handed / chip.ici_bandwidth)
  # the sweep skips the meshes whose dcn_axis the slices cannot split
  rows = sweep.sweep(run_lib.resolve(_smoke('mesh.slices=2', 'train.batch_size=16')),
                     topology.parse('2xv5p-16'))
  skipped = {tuple(r['mesh'].values()): r['invalid'] for r in rows if r['invalid']}
  assert skipped[(1, 16, 1, 1, 1, 1)] == 'mesh.dcn_axis=data: data=1 does not split over 2 slices'


def test_the_sweep_memory_counts_scores_only_without_a_flash_kernel_and_one_loss_chunk():
  tpu_slice = topology.parse('v5p-128')
  sizes = {'data': 1, 'fsdp': 64, 'tensor': 1, 'expert': 1}

  def per_device(*overrides):
    config = helpers.load(helpers.config_file('llama3_8b', arg=None),
                             ['train.batch_size=256', 'model.remat=full', *overrides])
    boxed = counting.abstract_params(config)
    base = analytic.plan(run_lib.resolve(config), mesh_sizes={a: 1 for a in sizes}, boxed=boxed)
    return sweep.estimate(config, sizes, tpu_slice.chip, base, boxed)[1]

  # the bytes per chip the compiler places with the chunked loss and with the whole
  # sequence's logits (benchmarks/accumulation_memory.py, docs/performance.md), within 15%
  assert per_device() / 2**30 == pytest.approx(9.86, rel=0.15)
  assert per_device('train.loss_chunk_len=0') / 2**30 == pytest.approx(19.73, rel=0.15)
  # xla's layer keeps at least one float32 [H, L] score matrix per token, splash none
  tokens = 256 * 4096 / 64  # per device
  assert per_device('model.attention.kernel=xla') - per_device() > tokens * 32 * 4096 * 4


def test_the_sweep_memory_of_a_pipeline_keeps_every_iterations_layer_inputs():
  # llama3_70b, stage 4 x fsdp 16 x tensor 4, 16 microbatches, remat full, batch 256 x 4096
  tpu_slice = topology.parse('v5p-512')
  sizes = {'data': 1, 'fsdp': 16, 'tensor': 4, 'expert': 1, 'context': 1, 'stage': 4}

  def per_device(*overrides, repeats=1, mesh=sizes, microbatches=16):
    # as the sweep calls it: the mesh comes in `sizes`, the config's mesh stays its default
    config = helpers.load(helpers.config_file('llama3_70b', arg=None), [
        'train.batch_size=256', 'model.remat=full', *overrides])
    config = sweep._with_schedule(config, microbatches, repeats)  # pylint: disable=protected-access
    boxed = counting.abstract_params(config)
    base = analytic.plan(run_lib.resolve(config), mesh_sizes={a: 1 for a in mesh}, boxed=boxed)
    return sweep.estimate(config, mesh, tpu_slice.chip, base, boxed)[1]

  tokens, d_model = 256 * 4096 / 16, 8192 / 4  # per device; the stage holds 20 layers
  # 16 x 2 rounds + 3 iterations keep 10 layers' inputs each, not 16 + 3 keeping 20; and a
  # third [M, b, L, D] buffer (the rounds'), a tensor shard of d_model, bfloat16; and the
  # 3/4 of the stage's float32 layer parameters moved to the stages that run them, and
  # their gradients (80 layers of 4 attention and 3 swiglu matrices over stage x fsdp x
  # tensor, two norms over stage x fsdp)
  kept = lambda rounds, group: tokens / 16 * (rounds + 3) * group * d_model * 2
  matrices, norms = 2 * 8192 * 8192 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672, 2 * 8192
  regrouped = 2 * 0.75 * 80 * 4 * (matrices / (4 * 16 * 4) + norms / (4 * 16))
  fit = memory.FITS['tpu']  # the shares of those terms XLA:TPU holds at its peak
  assert per_device(repeats=2) - per_device() == pytest.approx(  # RoPE's frequencies aside
      fit.pipeline * (kept(32, 10) - kept(16, 20) + tokens * d_model * 2) +
      fit.pipeline_gathered * regrouped, rel=1e-4)
  # no logits counted (the pipeline's backward pass is the peak): the loss chunk is moot
  assert per_device('train.loss_chunk_len=0') == per_device()
  # the bytes the compiler places, 17.85 / 18.44 GiB per chip (docs/performance.md), within 15%
  assert per_device() / 2**30 == pytest.approx(17.85, rel=0.15)
  assert per_device(repeats=2) / 2**30 == pytest.approx(18.44, rel=0.15)
  # context 4 x stage 4 x fsdp 8 x tensor 2, 32 microbatches, 4 rounds
  top = dict(sizes, fsdp=8, tensor=2, context=4)
  assert per_device(repeats=4, mesh=top, microbatches=32) / 2**30 == pytest.approx(32.22,
                                                                                 rel=0.15)


def test_the_sweep_memory_of_experts_counts_their_buffers_on_the_devices_rows():
  # mixtral_8x7b, batch 256 x 4096, remat full on v5p-128: a device holds the rows of data
  # x fsdp x expert; a dropless MoE layer's receive buffer has room for X x k rows per token,
  # DISPATCH_D (4) arrays of them D wide and DISPATCH_F (3) F wide (F split over tensor);
  # in a group of layers (gpt-oss's local and global pair) DISPATCH_D_GROUPED (12) D wide;
  # DeepSeek-V3's MTP block 2 D wide and 3 F wide more
  config = helpers.load(helpers.config_file('mixtral_8x7b', arg=None), [
      'train.batch_size=256', 'model.remat=full'])
  dispatch = memory._dispatch_values  # pylint: disable=protected-access
  assert dispatch(config.model, 8, 1) == 8 * 2 * (4 * 4096 + 3 * 14336)
  assert dispatch(config.model, 8, 2) == 8 * 2 * (4 * 4096 + 3 * 14336 / 2)
  gpt_oss = helpers.load(helpers.config_file('gpt_oss_20b', arg=None), []).model
  assert dispatch(gpt_oss, 4, 1) == 4 * 4 * (12 * 2880 + 3 * 2880)
  deepseek = helpers.load(helpers.config_file('deepseek_v3', arg=None), []).model
  assert dispatch(deepseek, 16, 1) == 8 * 16 * ((4 + 2) * 7168 + (3 + 3) * 2048)
  chip = topology.parse('v5p-128').chip

  def per_device(sizes, microbatches):
    scheduled = sweep._with_schedule(config, microbatches, 1)  # pylint: disable=protected-access
    boxed = counting.abstract_params(scheduled)
    base = analytic.plan(run_lib.resolve(scheduled), mesh_sizes={a: 1 for a in sizes}, boxed=boxed)
    return sweep.estimate(scheduled, sizes, chip, base, boxed)[1] / 2**30

  plain = dict(data=1, fsdp=8, tensor=1, expert=8, context=1, stage=1)
  staged = dict(plain, fsdp=2, stage=4)
  # the bytes per chip the compiler places (docs/performance.md), within 15%
  assert per_device(plain, 0) == pytest.approx(60.10, rel=0.15)
  assert per_device(staged, 8) == pytest.approx(51.18, rel=0.15)


def test_the_sweep_compiles_its_best_meshes_and_shows_the_compilers_bytes(capsys):
  config = _smoke('model.num_heads=2', 'model.num_kv_heads=2', 'train.batch_size=4')
  with jax.default_matmul_precision('default'):
    rows = plan.run(run_lib.resolve(config), topology_name='v5p-16', sweep=True,
                    sweep_compile=2)['sweep']
  fitting = [r for r in rows if not r['invalid'] and r['fits']]
  assert [('compiled_bytes' in r) for r in fitting] == [True, True] + [False] * (
      len(fitting) - 2)
  meshed = config.copy_and_resolve_references()
  with meshed.unlocked():
    meshed.mesh.update(fitting[0]['mesh'])
  with jax.default_matmul_precision('default'):
    want = compiled.compile_step(run_lib.resolve(meshed),
                                 topology.devices(topology.parse('v5p-16')),
                                 scan_corrected_cost=False)['per_device_bytes']['total']
  assert fitting[0]['compiled_bytes'] == want and fitting[0]['compiled_fits']
  table = capsys.readouterr().out.split('sweep on v5p-16')[1]
  assert 'compiled GiB' in table and f'{want / 2**30:.2f}' in table


def test_sweep_compile_needs_a_sweep():
  with pytest.raises(config_lib.ConfigError, match=r'--plan_sweep_compile=1 .* needs '
                                                   '--plan_sweep'):
    plan.run(run_lib.resolve(_smoke()), topology_name='v5p-8', sweep_compile=1)


def test_a_sweep_needs_a_topology():
  with pytest.raises(config_lib.ConfigError, match='--plan_sweep needs --plan_topology'):
    plan.run(run_lib.resolve(_smoke()), sweep=True)


def test_splash_compiles_for_a_tpu_slice_and_its_memory_grows_linearly_in_length():
  devices = topology.devices(topology.parse('v5p-8'))

  def config(length):
    return helpers.load(helpers.config_file('llama3_8b'), [
        'model.d_model=256', 'model.num_heads=2', 'model.num_kv_heads=2', 'model.head_dim=128',
        'model.vocab_size=1024', 'model.dtype=bfloat16', f'model.max_length={length}',
        f'data.seq_len={length}', 'mesh.data=1', 'mesh.fsdp=4', 'model.attention.kernel=splash'])

  with jax.default_matmul_precision('default'):  # conftest's 'highest' is f32-only on TPU
    mesh = sharding.make_mesh(config(512).mesh, devices)
    hlo = compiled.lower(run_lib.resolve(config(512)), mesh).as_text()
    assert 'tpu_custom_call' in hlo  # the Mosaic kernel, not an XLA fallback
    short, long = (compiled.compile_step(run_lib.resolve(config(n)), devices,
                                         scan_corrected_cost=False)[
        'per_device_bytes']['total'] for n in (512, 2048))
  assert long / short <= 6.0, (short, long)  # 4x the length; xla's [B,H,L,L] grows ~16x


@pytest.mark.parametrize('name', ['gpt_oss_20b', 'llama4_scout'])
def test_sinks_and_chunked_layers_run_in_splash_on_a_tpu_slice(name):
  # gpt-oss's sinks are splash's own argument; Llama 4's chunks a window over refined
  # segment ids: the step lowered for v5p holds the Mosaic kernels, forward and backward
  devices = topology.devices(topology.parse('v5p-8'))
  config = helpers.smoke(name, 'model.dtype=bfloat16', 'data.seq_len=256', 'mesh.data=1',
                         'mesh.fsdp=4')
  assert runtime.attention_kernel(config, 1, on='tpu') == ('splash', 'auto on tpu')
  with jax.default_matmul_precision('default'):
    mesh = sharding.make_mesh(config.mesh, devices)
    hlo = compiled.lower(run_lib.resolve(config), mesh).as_text()
  kernels = set(re.findall(r'splash_mqa_(fwd|dq|dkv)_segmented', hlo))
  assert kernels == {'fwd', 'dq', 'dkv'} and 'tpu_custom_call' in hlo


def test_t5_trains_through_flash_bias_on_a_tpu_slice():
  # auto on TPU: the relative bias computed in the kernel, forward and both backward kernels
  # of each stack in the compiled step (the cross-attention, without a bias, runs splash)
  devices = topology.devices(topology.parse('v5p-8'))
  config = helpers.smoke('t5_base', 'model.dtype=bfloat16', 'data.seq_len=256',
                         'data.target_seq_len=128', 'mesh.data=1', 'mesh.fsdp=4')
  assert runtime.attention_kernel(config, 1, on='tpu')[0] == 'flash_bias'
  with jax.default_matmul_precision('default'):
    mesh = sharding.make_mesh(config.mesh, devices)
    hlo = compiled.lower(run_lib.resolve(config), mesh).compile().as_text()
  calls = re.findall(r'%([a-z_]+)[.0-9]* = .*custom_call_target="tpu_custom_call"', hlo)
  assert sorted(calls) == sorted(['flash_bias_fwd', 'flash_bias_dq', 'flash_bias_dkv'] * 2 + [
      'splash_mha_fwd_segmented_residuals', 'splash_mha_dq_segmented_no_residuals',
      'splash_mha_dkv_segmented_no_residuals']), calls


def _splash(kind, n):
  return {f'splash_{kind}_fwd_segmented_residuals': n,
          f'splash_{kind}_dq_segmented_no_residuals': n,
          f'splash_{kind}_dkv_segmented_no_residuals': n}


@pytest.mark.parametrize('name, overrides, want', [
    # Gemma 2 cut down: a local (256-token window) and a global layer, soft-capped: each
    # kind's splash kernels (forward and both backward)
    ('gemma2_9b', ['model.d_model=256', 'model.num_heads=2', 'model.num_kv_heads=1',
                   'model.head_dim=128', 'model.mlp_dim=512', 'model.num_layers=2',
                   'model.vocab_size=1024', 'model.attention.window=256',
                   'model.attention.query_scale=128.0', 'model.max_length=1024',
                   'data.seq_len=1024', 'train.batch_size=4'], _splash('mqa', 2)),
    # umT5: flash_bias with each layer's table in each stack, splash in cross-attention
    ('umt5_base', ['data.seq_len=128', 'data.target_seq_len=128'],
     {'flash_bias_fwd': 2, 'flash_bias_dq': 2, 'flash_bias_dkv': 2, **_splash('mha', 1)}),
    # T5Gemma: local, global and tail layers in each stack (the encoder's windows two-sided),
    # and the decoder's cross-attention: 9 of each splash kernel
    ('t5gemma_2b_2b', ['data.seq_len=128', 'data.target_seq_len=128',
                       'model.attention.window=64', 'model.head_dim=128'],
     _splash('mqa', 9)),
], ids=['gemma2', 'umt5', 't5gemma'])
def test_the_new_blocks_run_pallas_kernels_on_a_tpu_slice(name, overrides, want):
  devices = topology.devices(topology.parse('v5p-8'))
  config = helpers.load(helpers.config_file(name), [
      *overrides, 'model.dtype=bfloat16', 'mesh.data=1', 'mesh.fsdp=4'])
  assert runtime.attention_kernel(config, 1, on='tpu')[0] in ('splash', 'flash_bias')
  with jax.default_matmul_precision('default'):
    mesh = sharding.make_mesh(config.mesh, devices)
    hlo = compiled.lower(run_lib.resolve(config), mesh).compile().as_text()
  calls = re.findall(r'%([a-z_]+)[.0-9]* = .*custom_call_target="tpu_custom_call"', hlo)
  assert collections.Counter(calls) == want


@pytest.mark.parametrize('context, stage', [(4, 1), (2, 2)], ids=['context4', 'context2_stage2'])
def test_ring_attention_runs_splash_blocks_on_a_tpu_slice(context, stage):
  # v5p-8 (4 chips), chunks of 128 tokens: auto on TPU -> splash in the ring, inside the
  # pipeline's stages too
  devices = topology.devices(topology.parse('v5p-8'))
  length = 2 * context * 128
  config = helpers.load(helpers.config_file('llama3_8b'), [
      'model.d_model=256', 'model.num_heads=2', 'model.num_kv_heads=1', 'model.head_dim=128',
      'model.mlp_dim=512', 'model.num_layers=2', 'model.vocab_size=1024', 'model.dtype=bfloat16',
      f'model.max_length={length}', f'data.seq_len={length}', 'train.batch_size=2',
      'mesh.data=1', f'mesh.context={context}', f'mesh.stage={stage}', 'model.remat=full'])
  assert runtime.attention_kernel(config, context, on='tpu')[1].endswith(
      'local blocks in splash')
  assert runtime.pallas_attention(config, context, on='tpu')  # the plan adds their FLOPs
  assert not runtime.pallas_attention(config, context, on='cpu')
  with jax.default_matmul_precision('default'):
    mesh = sharding.make_mesh(config.mesh, devices)
    hlo = compiled.lower(run_lib.resolve(config), mesh).compile().as_text()
  calls = re.findall(r'%([a-z_]+)[.0-9]* = .*custom_call_target="tpu_custom_call"', hlo)
  assert set(calls) == {'splash_mqa_fwd_segmented_residuals',
                        'splash_mqa_dq_segmented_no_residuals',
                        'splash_mqa_dkv_segmented_no_residuals'}, calls
  assert 'collective-permute' in hlo


def test_dropless_expert_parallelism_compiles_to_ragged_all_to_alls_for_a_tpu_slice():
  devices = topology.devices(topology.parse('v5p-8'))
  config = helpers.load(helpers.config_file('mixtral_8x7b'), [
      'mesh.data=1', 'mesh.expert=4', 'model.moe.capacity_factor=0.0',
      'model.dtype=bfloat16'])
  with jax.default_matmul_precision('default'):
    mesh = sharding.make_mesh(config.mesh, devices)
    hlo = compiled.lower(run_lib.resolve(config), mesh).compile().as_text()
  # dispatch and return, forward and backward (the layer scan has one body)
  assert hlo.count('ragged-all-to-all(') == 4


def test_experts_on_pipeline_stages_compile_for_a_tpu_slice():
  # 4 chips: stage 2 x expert 2, dropless; each stage's MoE layers exchange their pairs
  # over the expert axis inside the pipeline's iterations
  devices = topology.devices(topology.parse('v5p-8'))
  config = helpers.load(helpers.config_file('mixtral_8x7b'), [
      'mesh.data=1', 'mesh.expert=2', 'mesh.stage=2', 'model.moe.capacity_factor=0.0',
      'model.dtype=bfloat16'])
  with jax.default_matmul_precision('default'):
    mesh = sharding.make_mesh(config.mesh, devices)
    hlo = compiled.lower(run_lib.resolve(config), mesh).compile().as_text()
  assert hlo.count('ragged-all-to-all(') == 4 and 'collective-permute' in hlo


def test_a_pipelined_tpu_plan_compiles_and_prices_the_bubble():
  # 4 chips: stage 2 x fsdp 2, 4 microbatches of 2 rows (1 per fsdp shard)
  config = _smoke('mesh.data=1', 'mesh.fsdp=2', 'mesh.stage=2', 'model.pipeline_microbatches=4')
  result = plan.run(run_lib.resolve(config), topology_name='v5p-8')
  assert result['pipeline']['bubble'] == pytest.approx(1 / 5)
  assert result['compiled'] and result['compiled_flops_per_step'] is None and result['fits']
  flops = ((result['flops_per_token'] + result['remat_flops_per_token']) *
           result['run']['tokens_per_step'] / 4)
  peak = topology.parse('v5p-8').chip.peak_flops
  assert result['estimated_step_seconds'] == pytest.approx(flops / peak / 0.8)
