"""Expert parallelism changes no numbers: experts split over the expert axis train like
experts replicated over data (8 simulated devices, float32)."""


import pytest

from tests import helpers
from zoo import config as config_lib
from zoo.train import loop
from zoo.train import metrics as metrics_lib

STEPS = ['train.steps=5', 'train.eval_every=100', 'train.checkpoint_every=5',
         'optim.warmup_steps=1']


@pytest.mark.parametrize('capacity_factor', [0.0, 2.0])  # dropless; capacity, generous
def test_experts_sharded_over_the_expert_axis_give_the_data_parallel_losses(capacity_factor,
                                                                           tmp_path):
  losses = {}
  for data, expert in ((8, 1), (2, 4)):
    config = config_lib.load(
        helpers.config_file('mixtral_8x7b'),
        [*STEPS, f'mesh.data={data}', f'mesh.expert={expert}',
         f'model.moe.capacity_factor={capacity_factor}'])
    workdir = tmp_path / f'expert{expert}'
    loop.train(config, str(workdir))
    rows = [r for r in metrics_lib.read(str(workdir)) if 'loss' in r]
    assert rows[0]['moe_dropped_fraction'] < 0.05 and len(rows[0]['moe_load']) == 2
    losses[expert] = [r['loss'] for r in rows]
  assert losses[4] == pytest.approx(losses[1], rel=2e-5, abs=2e-5)
