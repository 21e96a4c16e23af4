"""Meshes: factorisation errors, parameter shardings by the rules, and the same losses on
every mesh (data, fsdp, tensor) for the three families; checkpoints move between meshes."""

import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tests import helpers
from tests.helpers import REPO
from zoo import config as config_lib
from zoo import families
from zoo import run as run_lib
from zoo import sharding
from zoo.train import loop
from zoo.train import metrics as metrics_lib
from zoo.train import runtime
from zoo.train import state as state_lib

FAMILIES = {'decoder': 'gpt_shakespeare', 'encoder': 'bert_base',
            'encoder_decoder': 't5_v1_1_base'}
# the canary (zoo/train/canary.py) off: these tests compare the raw partitioning themselves
STEPS = ['train.steps=5', 'train.eval_every=100', 'train.checkpoint_every=5',
         'optim.warmup_steps=1', 'train.canary=off']
# data alone (8) runs in every config's smoke (configs_test); here data 2 beside fsdp and tensor
MESHES = {'data2_fsdp2_tensor2': (2, 2, 2), 'fsdp4_tensor2': (1, 4, 2)}
# (data, fsdp, tensor, context, stage): the sequence split, ring attention in every layer
# (on a pipeline's stages too)
CONTEXT_MESHES = {'context2_fsdp2_tensor2': (1, 2, 2, 2, 1), 'context4_data2': (2, 1, 1, 4, 1),
                  'context2_stage2_data2': (2, 1, 1, 2, 2)}
STAGE2 = (2, 1, 2, 1, 2)  # (data, fsdp, tensor, context, stage): a 2-stage pipeline


def _config(family, mesh=(8, 1, 1), extra=()):
  data, fsdp, tensor, context, stage = (*mesh, 1, 1)[:5]
  return helpers.smoke(FAMILIES[family], *STEPS, f'mesh.data={data}', f'mesh.fsdp={fsdp}',
                       f'mesh.tensor={tensor}', f'mesh.context={context}', f'mesh.stage={stage}',
                       *extra)


def _one_device_run(workdir, name):
  """configs/NAME.py:smoke trained in a process that sees one CPU device."""
  result = subprocess.run(
      [sys.executable, '-m', 'zoo.launch', f'--config={REPO}/configs/{name}.py:smoke',
       f'--workdir={workdir}', *[f'--config.{o}' for o in STEPS]],
      env=helpers.cpu_env(),
      capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-2000:]


def _losses(workdir):
  return [r['loss'] for r in metrics_lib.read(str(workdir)) if 'loss' in r]


def test_a_mesh_that_does_not_factor_the_devices_names_the_valid_sizes():
  with pytest.raises(config_lib.ConfigError, match=r'has 6 devices but 8 are present.*divisors: '
                                                   r'\[1, 2, 4, 8\]'):
    sharding.mesh_shape({'data': 3, 'fsdp': 2, 'tensor': 1, 'expert': 1}, 8)
  assert sharding.mesh_shape({'data': -1, 'fsdp': 2, 'tensor': 2, 'expert': 1}, 8)['data'] == 2


def test_a_context_axis_resolved_from_minus_one_must_split_the_causal_chunks():
  config = _config('decoder', (1, 1, 1), ['mesh.context=-1', 'mesh.data=1'])
  sizes = sharding.mesh_shape(config.mesh, 6)
  assert sizes['context'] == 6
  with pytest.raises(config_lib.ConfigError, match=r'data.seq_len=64 does not split over mesh '
                                                   r'2 x context \(chunks per device\)=12'):
    sharding.check_divisible(config, sizes, families.get(config.model))


def test_the_kernel_in_the_header_follows_the_resolved_context_axis():
  config = _config('decoder', (1, 1, 1), ['mesh.context=-1', 'mesh.data=1'])
  assert runtime.attention_kernel(config, 1)[0] == 'xla'  # -1 on one device: no ring runs
  assert runtime.attention_kernel(config, 4)[0] == 'ring'
  config.model.attention.kernel = 'splash'  # 64 tokens in 8 chunks: too short to block
  with pytest.raises(config_lib.ConfigError, match=r"kernel='splash' with mesh.context: each "
                                                   r'ring chunk \(8 tokens\) must be a multiple'):
    runtime.attention_kernel(config, 4)


def test_parameter_shardings_follow_the_rules():
  config = _config('decoder', (1, 2, 2, 1, 2))  # stage 2: the layers split in two
  mesh = sharding.make_mesh(config.mesh)
  _, _, _, shardings = state_lib.make(families.build(config.model), config, mesh,
                                          run_lib.resolve(config).schedule)
  specs = jax.tree.map(lambda s: s.spec, shardings['params'])
  assert specs['layers']['mlp']['wi_0']['kernel'] == P('stage', 'fsdp', 'tensor')
  assert specs['layers']['mlp']['wo']['kernel'] == P('stage', 'tensor', 'fsdp')
  assert specs['layers']['attention']['query']['kernel'] == P('stage', 'fsdp', 'tensor', None)
  assert specs['token_embed']['embedding'] == P('tensor', 'fsdp')
  assert specs['final_norm']['scale'] == P('fsdp')
  mu = shardings['opt_state'][1][0].mu  # AdamW moments are sharded like the params
  assert mu['layers']['mlp']['wi_0']['kernel'].spec == P('stage', 'fsdp', 'tensor')


def test_a_dim_the_mesh_does_not_divide_stays_replicated_instead_of_failing():
  config = _config('decoder', (1, 1, 8), ['model.vocab_size=500', 'model.num_heads=8',
                                          'model.num_kv_heads=8'])
  mesh = sharding.make_mesh(config.mesh)
  _, _, _, shardings = state_lib.make(families.build(config.model), config, mesh,
                                          run_lib.resolve(config).schedule)
  assert shardings['params']['token_embed']['embedding'].spec == P(None, 'fsdp')  # 500 % 8
  assert shardings['params']['layers']['mlp']['wo']['kernel'].spec == P('stage', 'tensor', 'fsdp')


@pytest.fixture(scope='module')
def one_device_losses(tmp_path_factory):
  """Each family trained on a single device (a subprocess that sees one CPU device)."""
  losses = {}
  for family, name in FAMILIES.items():
    workdir = tmp_path_factory.mktemp(family)
    _one_device_run(workdir, name)
    losses[family] = _losses(workdir)
  return losses


@pytest.mark.parametrize('mesh', sorted(MESHES))
@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_every_mesh_gives_the_single_device_losses(family, mesh, one_device_losses, tmp_path):
  loop.train(run_lib.resolve(_config(family, MESHES[mesh])), str(tmp_path))
  header = metrics_lib.read(str(tmp_path))[0]
  assert header['mesh'] == dict(zip(('data', 'fsdp', 'tensor', 'expert', 'context', 'stage'),
                                    (*MESHES[mesh], 1, 1, 1)))
  assert _losses(tmp_path) == pytest.approx(one_device_losses[family], rel=2e-5, abs=2e-5)


@pytest.mark.parametrize('mesh', sorted(CONTEXT_MESHES))
def test_a_context_mesh_gives_the_decoder_its_single_device_losses(mesh, one_device_losses,
                                                                   tmp_path):
  """RoPE, GQA and packed documents with the sequence split: ring attention, balanced."""
  loop.train(run_lib.resolve(_config('decoder', CONTEXT_MESHES[mesh])), str(tmp_path))
  header = metrics_lib.read(str(tmp_path))[0]
  data, fsdp, tensor, context, stage = CONTEXT_MESHES[mesh]
  assert header['mesh'] == dict(data=data, fsdp=fsdp, tensor=tensor, expert=1, context=context,
                                stage=stage)
  assert header['attention_kernel'] == 'ring'
  assert _losses(tmp_path) == pytest.approx(one_device_losses['decoder'], rel=2e-5, abs=2e-5)


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_a_two_stage_pipeline_gives_the_single_device_losses(family, one_device_losses,
                                                             tmp_path):
  """stage 2 x data 2 x tensor 2, 2 microbatches; T5 pipelines both of its stacks."""
  loop.train(run_lib.resolve(_config(family, STAGE2)), str(tmp_path))
  assert metrics_lib.read(str(tmp_path))[0]['mesh']['stage'] == 2
  assert _losses(tmp_path) == pytest.approx(one_device_losses[family], rel=2e-5, abs=2e-5)


def test_four_stages_over_fsdp_give_the_data_parallel_losses(tmp_path):
  """stage 4 x fsdp 2, one layer per stage, 4 microbatches, against data 8 (which gives the
  one-device losses above) at the same 4 layers."""
  deeper = ['model.num_layers=4']
  loop.train(run_lib.resolve(_config('decoder', (8, 1, 1), deeper)), str(tmp_path / 'data'))
  loop.train(run_lib.resolve(_config('decoder', (1, 2, 1, 1, 4), deeper)), str(tmp_path / 'stage'))
  assert metrics_lib.read(str(tmp_path / 'stage'))[0]['mesh']['stage'] == 4
  assert _losses(tmp_path / 'stage') == pytest.approx(_losses(tmp_path / 'data'), rel=2e-5,
                                                      abs=2e-5)


def test_a_pipeline_checkpoint_resumes_without_stages_with_the_same_losses(tmp_path):
  constant = ['optim.schedule=constant', 'train.steps=7']
  loop.train(run_lib.resolve(_config('decoder', (8, 1, 1), constant)), str(tmp_path / 'reference'))
  loop.train(run_lib.resolve(_config('decoder', STAGE2, [*constant, 'train.steps=5'])),
             str(tmp_path))
  loop.train(run_lib.resolve(_config('decoder', (8, 1, 1), constant)), str(tmp_path))
  header = [r for r in metrics_lib.read(str(tmp_path)) if r.get('event') == 'start'][-1]
  assert header['step'] == 5 and header['mesh']['stage'] == 1
  assert _losses(tmp_path) == pytest.approx(_losses(tmp_path / 'reference'), rel=2e-5,
                                            abs=2e-5)


def test_a_checkpoint_restores_onto_another_mesh_and_training_continues(tmp_path):
  constant = ['optim.schedule=constant']  # the learning rate must not depend on train.steps
  loop.train(run_lib.resolve(_config('decoder', (8, 1, 1), constant)), str(tmp_path))
  reference = tmp_path / 'reference'
  loop.train(run_lib.resolve(_config('decoder', (8, 1, 1), [*constant, 'train.steps=8'])),
             str(reference))
  loop.train(run_lib.resolve(_config('decoder', (1, 4, 2), [*constant, 'train.steps=8'])),
             str(tmp_path))
  header = [r for r in metrics_lib.read(str(tmp_path)) if r.get('event') == 'start'][-1]
  assert header['step'] == 5 and header['mesh']['fsdp'] == 4
  assert _losses(tmp_path)[-3:] == pytest.approx(_losses(reference)[-3:], rel=2e-5, abs=2e-5)

  # ... and onto a single device (a process that sees one CPU device)
  result = subprocess.run(
      [sys.executable, '-m', 'zoo.launch', f'--config={REPO}/configs/gpt_shakespeare.py:smoke',
       f'--workdir={tmp_path}', *[f'--config.{o}' for o in STEPS], '--config.train.steps=10',
       '--config.optim.schedule=constant'],
      env=helpers.cpu_env(),
      capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  header = [r for r in metrics_lib.read(str(tmp_path)) if r.get('event') == 'start'][-1]
  assert header['step'] == 8 and header['devices'] == 1
  assert sorted(r['step'] for r in metrics_lib.read(str(tmp_path)) if 'loss' in r)[-2:] == [9, 10]



def test_known_problem_xla_cpu_swaps_two_row_blocks_of_a_small_sharded_matmul():
  """docs/contracts.md, Known problems: when this fails, the jax in use computes it right;
  update the entry (and tests/train/canary_test.py)."""
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(2, 2, 2),
                           ('data', 'fsdp', 'tensor'))
  shard = lambda *spec: jax.sharding.NamedSharding(mesh, P(*spec))
  matmul = jax.jit(lambda x, w: x @ w,
                   in_shardings=(shard(('data', 'fsdp'), 'tensor'), shard('tensor', 'fsdp')),
                   out_shardings=shard(('data', 'fsdp'), 'tensor'))
  rng = np.random.default_rng(0)
  w = rng.standard_normal((64, 64)).astype(np.float32)
  for rows, order in ((128, [0, 2, 1, 3]), (256, [0, 1, 2, 3])):
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    got, want = np.split(np.asarray(matmul(x, w)), 4), np.split(x @ w, 4)
    assert [next(j for j in range(4) if np.allclose(g, want[j], atol=1e-3)) for g in got] == \
        order, rows


@pytest.mark.parametrize('name', ['gemma3_1b'])
def test_gemma_smoke_configs_give_the_single_device_losses_on_a_mesh(name):
  """Sandwich norms, QK-norm (Gemma 3's, as Qwen 3's), local/global layers (a pattern and
  its tail) on data 2 x fsdp 2 x tensor 2 against one device, five steps in float32 (the
  batches generated: helpers.family_batch); Gemma 2's soft-capping is elementwise, its smoke
  trains in configs_test."""
  config = helpers.smoke(name, *STEPS)
  sizes = lambda **s: {'data': 1, 'fsdp': 1, 'tensor': 1, **s}
  want = [float(r['loss']) for r in helpers.train_steps(config, sizes(), steps=5)[0]]
  got = [float(r['loss']) for r in helpers.train_steps(config, sizes(data=2, fsdp=2, tensor=2),
                                                      steps=5)[0]]
  assert got == pytest.approx(want, rel=2e-5, abs=2e-5)
  assert want[-1] < want[0]
