"""Expert parallelism changes no numbers: experts split over the expert axis, and on a
pipeline's stages, train like experts replicated over data (8 simulated devices, float32)."""

import numpy as np
import pytest

from tests import helpers
from zoo import run as run_lib
from zoo.train import loop
from zoo.train import metrics as metrics_lib

# the canary (zoo/train/canary.py) off: these tests compare the raw partitioning themselves
STEPS = ['train.steps=5', 'train.eval_every=100', 'train.checkpoint_every=5',
         'optim.warmup_steps=1', 'train.canary=off']


def _moe_rows(overrides, workdir):
  loop.train(run_lib.load(helpers.config_file('mixtral_8x7b'), [*STEPS, *overrides]),
             str(workdir))
  return [r for r in metrics_lib.read(str(workdir)) if 'loss' in r]


@pytest.mark.parametrize('capacity_factor', [2.0])  # capacity, generous (dropless: below)
def test_experts_sharded_over_the_expert_axis_give_the_data_parallel_losses(capacity_factor,
                                                                           tmp_path):
  losses = {}
  for data, expert in ((8, 1), (2, 4)):
    rows = _moe_rows([f'mesh.data={data}', f'mesh.expert={expert}',
                      f'model.moe.capacity_factor={capacity_factor}'], tmp_path / f'e{expert}')
    assert rows[0]['moe_dropped_fraction'] < 0.05 and len(rows[0]['moe_load']) == 2
    losses[expert] = [r['loss'] for r in rows]
  assert losses[4] == pytest.approx(losses[1], rel=2e-5, abs=2e-5)


def test_experts_on_a_circular_pipeline_over_a_split_sequence_give_the_data_losses(tmp_path):
  """stage 2 x context 2 x expert 2, two rounds of 2 microbatches, dropless: the routing
  statistics are the whole batch's (each device routes its chunk of the sequence, the sums
  add over the microbatches), the loss-free bias moves once a step."""
  moe = ['model.num_layers=4', 'model.moe.bias_update_rate=0.05']
  reference = _moe_rows([*moe, 'mesh.data=8'], tmp_path / 'data')
  piped = _moe_rows([*moe, 'mesh.data=1', 'mesh.expert=2', 'mesh.context=2', 'mesh.stage=2',
                     'model.pipeline_repeats=2', 'model.pipeline_microbatches=2'],
                    tmp_path / 'stage')
  assert metrics_lib.read(str(tmp_path / 'stage'))[0]['attention_kernel'] == 'ring'
  for key in ('loss', 'moe_aux_loss', 'moe_dropped_fraction'):
    assert [r[key] for r in piped] == pytest.approx([r[key] for r in reference], rel=2e-5,
                                                    abs=2e-5), key
  np.testing.assert_allclose(piped[-1]['moe_load'], reference[-1]['moe_load'], atol=1e-6)


@pytest.mark.parametrize('name, mesh, overrides', [
    # 16 experts (the smoke's cut of 128), top 8 renormalised, QK-norm; no expert axis: every
    # expert on each device, its F split over tensor
    ('qwen3_30b_a3b', {'fsdp': 4, 'tensor': 2}, []),
    # latent attention (its latents over fsdp, ring attention over context), a dense first
    # layer, sigmoid routing in 4 of 8 groups, the loss-free bias (the balance loss over the
    # batch: a split sequence has no sequence-wise one); V2-Lite: heads over tensor, softmax
    # (a split sequence: no multi-token prediction, which reads it in order)
    ('deepseek_v3', {'fsdp': 2, 'context': 2, 'expert': 2}, ['model.moe.balance_scope=batch',
                                                            'model.mtp.depth=0']),
    # with V3's multi-token prediction module (its MoE block) added
    ('deepseek_v2_lite', {'data': 2, 'tensor': 2, 'expert': 2}, ['model.mtp.depth=1']),
    # gpt-oss: sinks split over tensor with their heads (one kv head, replicated), a window
    # and a full layer, biased router and experts over the expert axis, the clamped SwiGLU
    # (gpt_oss_120b's smoke is gpt_oss_20b's; one repeat of the pattern, no tail layer)
    ('gpt_oss_20b', {'data': 2, 'tensor': 2, 'expert': 2}, ['model.num_layers=2']),
    # Llama 4 (Maverick; Scout is its shape with experts in every layer): chunked layers (each
    # document's own chunks), a NoPE layer, input-gated top-1 sigmoid experts beside a
    # shared one in every other layer, heads over tensor (chunked layers on a context ring:
    # tests/kernels/chunk_test.py)
    ('llama4_maverick', {'fsdp': 2, 'tensor': 2, 'expert': 2}, ['model.num_layers=4']),
    # Qwen3-Next: a Gated DeltaNet layer (its key and value heads over tensor) and a
    # gated-attention one, experts beside a gated shared expert over the expert axis
    ('qwen3_next_80b_a3b', {'data': 2, 'tensor': 2, 'expert': 2},
     ['model.attention.pattern=DG', 'model.num_layers=2']),
    # DeepSeek-V3.2: each layer's indexer keeps 16 of 64 keys, the latents and the indexer's
    # heads over fsdp and tensor, experts over the expert axis, its prediction module's
    # indexer too
    ('deepseek_v3_2', {'fsdp': 2, 'tensor': 2, 'expert': 2}, []),
])
def test_moe_smokes_on_a_mesh_give_one_devices_losses(name, mesh, overrides):
  """Four steps on the mesh against the same steps on one device, in float32 (the batches
  generated: helpers.family_batch)."""
  config = helpers.smoke(name, *overrides)
  sizes = lambda **s: {'data': 1, 'fsdp': 1, 'tensor': 1, 'expert': 1, 'context': 1, **s}
  keys = ['loss'] + ['indexer_kl'] * bool(config.model.mla.index_heads)
  losses = lambda sizes: [float(r[k]) for r in helpers.train_steps(config, sizes, steps=4)[0]
                          for k in keys]
  want, got = losses(sizes()), losses(sizes(**mesh))
  assert got == pytest.approx(want, rel=2e-5, abs=2e-5)  # (their losses fall: configs_test)
