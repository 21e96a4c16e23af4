"""The worked post-training example end to end at smoke size on 8 simulated devices: SFT on
the zoo's sums, then DPO and GRPO from that checkpoint (configs/post/arithmetic.py)."""

import math
import os

import numpy as np
import pytest

from tests import helpers
from zoo import run as run_lib
from zoo.data import arithmetic
from zoo.post import grpo
from zoo.train import loop
from zoo.train import metrics as metrics_lib

CONFIG = os.path.join(helpers.REPO, 'configs', 'post', 'arithmetic.py')


def _run(variant, data, sft, *overrides):
  kind = {'sft': 'chat', 'dpo': 'preference', 'grpo': 'prompts'}[variant]
  paths = [f'data.task.path={data}/{kind}']
  if variant != 'sft':
    paths += [f'train.init_params={sft}',
              f'data.tokenizer.path={sft}/tokenizer/bpe_320.model']
  return run_lib.resolve(helpers.load(f'{CONFIG}:{variant}_smoke', [*paths, *overrides]))


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  root = tmp_path_factory.mktemp('arithmetic')
  data = arithmetic.write(str(root / 'data'), largest=19)
  sft = str(root / 'sft')
  loop.train(_run('sft', data, sft), sft)
  return data, sft, root


def test_sft_trains_on_the_assistant_turns(trained):
  _, sft, _ = trained
  rows = metrics_lib.read(sft)
  losses = [r['loss'] for r in rows if 'loss' in r]
  assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
  assert any('eval_loss' in r for r in rows)


def test_dpo_starts_at_log_two_against_its_reference_and_logs_its_metrics(trained):
  data, sft, root = trained
  workdir = str(root / 'dpo')
  loop.train(_run('dpo', data, sft, 'train.preference.nll_weight=0.0'), workdir)
  rows = metrics_lib.read(workdir)
  start = next(r for r in rows if r.get('event') == 'start')
  assert start['reference'] == {'workdir': sft, 'step': 4, 'params': start['params']}
  first = next(r for r in rows if r.get('step') == 1 and 'loss' in r)
  # the policy starts as the reference (the SFT checkpoint): h = 0, loss = log 2
  assert first['loss'] == pytest.approx(math.log(2.0), abs=1e-5)
  assert first['reward_margin'] == pytest.approx(0.0, abs=1e-5)
  for key in ('reward_chosen', 'reward_rejected', 'preference_accuracy', 'logps_chosen',
              'logps_rejected'):
    assert key in first
  evals = [r for r in rows if 'eval_preference_accuracy' in r]
  assert evals and 0.0 <= evals[-1]['eval_preference_accuracy'] <= 1.0


def test_grpo_samples_scores_and_updates_then_resumes_done(trained):
  data, sft, root = trained
  workdir = str(root / 'grpo')
  run = _run('grpo', data, sft)
  last = grpo.train(run, workdir)
  rows = metrics_lib.read(workdir)
  assert rows[0]['event'] == 'start' and rows[0]['reference']['step'] == 4  # the SFT's
  evals = [r for r in rows if 'eval_reward' in r]
  assert [r['step'] for r in evals] == [0, 2, 4]
  assert all(0.0 <= r['eval_accuracy'] <= 1.0 for r in evals)
  first = next(r for r in rows if r.get('step') == 1 and 'reward_mean' in r)
  # one update a batch: the policy that sampled is the one updated, the reference its start
  assert first['kl'] == pytest.approx(0.0, abs=1e-5)
  assert first['ratio'] == pytest.approx(1.0, abs=1e-5)
  for key in ('reward_std', 'clip_fraction', 'completion_length', 'time_sampling',
              'time_training', 'grad_norm', 'skipped_groups'):
    assert key in first, key
  assert last['step'] == 4 and os.path.isdir(os.path.join(workdir, 'checkpoints', '4'))
  assert grpo.train(run, workdir) is None  # resumed at step 4 of 4: nothing to do
  assert len(metrics_lib.read(workdir)) == len(rows)
  again = grpo.run_eval(run, workdir)  # --mode=eval: the newest checkpoint, greedy
  assert again == {k: evals[-1][k] for k in ('eval_reward', 'eval_accuracy')}
  assert metrics_lib.read(workdir)[-1]['mode'] == 'eval'


def test_the_arithmetic_reward_reads_the_first_number():
  example = {'answer': 42}
  assert [arithmetic.reward(t, example) for t in ('42', ' 42 apples', '41', 'forty-two', '')] \
      == [1.0, 1.0, 0.0, 0.0, 0.0]
  train, held = arithmetic.problems(largest=19)
  assert len(train) == 320 and len(held) == 80 and not set(train) & set(held)


def test_an_exported_chat_run_renders_the_same_ids_in_transformers(trained):
  import transformers  # pylint: disable=g-import-not-at-top
  from zoo.convert import export  # pylint: disable=g-import-not-at-top
  from zoo.data import chat  # pylint: disable=g-import-not-at-top
  from zoo.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  data, sft, root = trained
  out = str(root / 'export')
  export.export(_run('sft', data, sft), sft, out)
  messages = [{'role': 'system', 'content': 'Add.'}, {'role': 'user', 'content': '12+7='},
              {'role': 'assistant', 'content': '19'}, {'role': 'user', 'content': '3+4='}]
  hf = transformers.AutoTokenizer.from_pretrained(out)
  template = chat.from_directory(out)
  assert template.source == chat.DEFAULT_TEMPLATE
  zoo_tokenizer = tokenizer_lib.from_file(f'{sft}/tokenizer/bpe_320.model')
  ids, _ = chat.encode(template, zoo_tokenizer, messages)
  assert list(ids) == hf.apply_chat_template(messages, tokenize=True, return_dict=False)
  prompt = template.render(messages, add_generation_prompt=True)
  assert prompt == hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_a_reward_that_fails_mid_run_stops_it_keeping_the_checkpoints(trained):
  from tests.post import failing_reward  # pylint: disable=g-import-not-at-top
  from zoo.post import rewards  # pylint: disable=g-import-not-at-top
  data, sft, root = trained
  workdir = str(root / 'grpo_failing')
  failing_reward.calls = 0
  run = _run('grpo', data, sft, "train.grpo.reward='tests.post.failing_reward:reward'")
  # calls: 80 held-out at step 0, 16 a step, 80 again at step 2; the 201st is in step 3
  with pytest.raises(rewards.RewardError, match=r"raised ValueError: the grader is down on "
                                                r'the prompt at .*prompts/train\.jsonl:\d+'):
    grpo.train(run, workdir)
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2']


def test_skipped_groups_are_counted_and_leave_the_update_finite(trained):
  data, sft, root = trained
  workdir = str(root / 'grpo_skipping')
  run = _run('grpo', data, sft, "train.grpo.reward='tests.post.failing_reward:nan_for_odd'",
             "train.grpo.on_bad_reward='skip'", 'train.eval_every=100')
  grpo.train(run, workdir)
  rows = [r for r in metrics_lib.read(workdir) if 'reward_mean' in r]
  assert sum(r['skipped_groups'] for r in rows) > 0
  assert all(math.isfinite(r['loss']) and math.isfinite(r['grad_norm']) for r in rows
             if 'loss' in r)


def test_t5_is_instruction_tuned_on_conversations(trained, tmp_path):
  data, _, _ = trained
  config = helpers.smoke('t5_v1_1_small', 'train.steps=6', 'train.eval_every=6',
                         'train.checkpoint_every=6', 'data.task.kind=chat',
                         f'data.task.path={data}/chat', 'data.target_seq_len=8',
                         'data.seq_len=32', 'optim.warmup_steps=1')
  loop.train(run_lib.resolve(config), str(tmp_path))
  losses = [r['loss'] for r in metrics_lib.read(str(tmp_path)) if 'loss' in r]
  assert len(losses) == 6 and losses[-1] < losses[0]
