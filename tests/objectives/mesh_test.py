"""SFT, DPO, SimPO and GRPO train steps on a data 2 x fsdp 2 x tensor 2 mesh equal one
device's, in float32 (the batches generated: helpers.family_batch)."""

import numpy as np
import pytest

from tests import helpers

STEPS = ['train.steps=3', 'train.eval_every=100', 'optim.warmup_steps=1', 'train.canary=off',
         'train.batch_size=16', 'model.dtype=float32']
OBJECTIVES = {  # name -> overrides
    'sft': ['data.task.kind=chat', 'data.task.path=unused'],
    'dpo_lora': ['train.objective=dpo', 'data.task.kind=preference', 'data.task.path=unused',
                 'train.lora.rank=4'],
    'simpo': ['train.objective=simpo', 'data.task.kind=preference', 'data.task.path=unused'],
    'grpo': ['train.objective=grpo', 'data.task.kind=prompts', 'data.task.path=unused',
             "train.grpo.reward='zoo.data.arithmetic:reward'", 'train.grpo.kl_beta=0.1',
             'train.lora.rank=4'],
}
SIZES = lambda **s: {'data': 1, 'fsdp': 1, 'tensor': 1, **s}


@pytest.mark.parametrize('name', sorted(OBJECTIVES))
def test_a_sharded_step_equals_one_device(name):
  config = helpers.smoke('gpt_shakespeare', *STEPS, *OBJECTIVES[name])
  want_rows, want, _ = helpers.train_steps(config, SIZES(), steps=3)
  got_rows, got, _ = helpers.train_steps(config, SIZES(data=2, fsdp=2, tensor=2), steps=3)
  losses = lambda rows: [float(r['loss']) for r in rows]
  assert losses(got_rows) == pytest.approx(losses(want_rows), rel=2e-5, abs=2e-5)
  for a, b in zip(_leaves(got), _leaves(want)):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)
  if name in ('dpo_lora', 'simpo'):
    for key in ('preference_accuracy', 'reward_margin'):
      assert float(got_rows[-1][key]) == pytest.approx(float(want_rows[-1][key]), abs=1e-5)


def _leaves(tree):
  import jax  # pylint: disable=g-import-not-at-top
  return [np.asarray(x) for x in jax.tree.leaves(tree)]
