"""The published post-training recipes (configs/post/): each smoke variant trains on the
zoo's own small task (its data path overridden), and plan mode counts what the objective
adds (the reference copy, the pairs' rows, GRPO's sampling)."""

import math
import os

import pytest

from tests import helpers
from zoo import run as run_lib
from zoo.data import arithmetic
from zoo.plan import analytic
from zoo.plan import post
from zoo.post import grpo
from zoo.post import math_reward
from zoo.train import loop
from zoo.train import metrics as metrics_lib

RECIPES = {'tulu3_sft': 'chat', 'zephyr_dpo': 'preference', 'deepseekmath_grpo': 'prompts'}


def _config(name, arg, *overrides):
  path = os.path.join(helpers.REPO, 'configs', 'post', f'{name}.py')
  return helpers.load(f'{path}:{arg}' if arg else path, list(overrides))


@pytest.fixture(scope='module')
def data(tmp_path_factory):
  return arithmetic.write(str(tmp_path_factory.mktemp('sums')), largest=9)


@pytest.mark.parametrize('name', sorted(RECIPES))
def test_the_smoke_variant_trains(name, data, tmp_path):
  run = run_lib.resolve(_config(name, 'smoke', f'data.task.path={data}/{RECIPES[name]}'))
  if name == 'deepseekmath_grpo':
    grpo.train(run, str(tmp_path))
  else:
    loop.train(run, str(tmp_path))
  rows = [r for r in metrics_lib.read(str(tmp_path)) if 'loss' in r]
  assert len(rows) == 4 and all(math.isfinite(r['loss']) for r in rows)


def test_plan_counts_the_reference_pairs_and_sampling():
  dpo = run_lib.resolve(_config('zephyr_dpo', None))
  result = analytic.plan(dpo, 32)
  result['post_training'] = post.plan(dpo.config, result['mesh'], result)
  p = result['per_device_bytes']
  assert p['reference'] == p['params']  # a frozen copy of the policy's shape, same layout
  assert p['total'] == sum(v for k, v in p.items() if k != 'total')
  assert result['post_training']['tokens_per_step'] == 2 * 32 * 1024
  rl = run_lib.resolve(_config('deepseekmath_grpo', None))
  result = analytic.plan(rl, 64)
  g = post.plan(rl.config, result['mesh'], result)
  assert (g['prompts_per_step'], g['group_size'], g['completions_per_step']) == (16, 64, 1024)
  # the cache holds every completion's keys and values over the batch axes' 64 devices
  assert g['sampler_cache_bytes_per_device'] == result['kv_cache_bytes_per_token'] * 1024 * \
      1024 // 64
  assert g['flops_per_step'] == pytest.approx(
      g['sampling_flops_per_step'] + g['log_prob_flops_per_step'] +
      g['training_flops_per_step'])
  assert any('sampling: 16 prompts x 64 completions' in line for line in post.lines(
      {'post_training': g}))


def test_the_math_reward_reads_the_last_boxed_answer():
  assert math_reward.boxed_answer('so \\boxed{12} then \\boxed{\\frac{1}{2}}',
                                  {'answer': '\\frac{1}{2}'}) == 1.0
  assert math_reward.boxed_answer('\\boxed{ 1,000. }', {'answer': 1000}) == 1.0
  assert math_reward.boxed_answer('\\boxed{7}', {'answer': 8}) == 0.0
  assert math_reward.boxed_answer('no box: 8', {'answer': 8}) == 0.0
