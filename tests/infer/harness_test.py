"""The lm-eval adapter against the model computed by hand: log-likelihoods of continuations
(spaces, empty contexts, contexts cut to fit), rolling log-likelihoods, greedy generation
cut at `until`; a local multiple-choice task through lm-eval itself gives the accuracy
the adapter's own scores give; the command's bad input is one line."""

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lm_eval import evaluator
from lm_eval import tasks as lm_eval_tasks
from lm_eval import utils as lm_eval_utils
from lm_eval.api.instance import Instance

from tests import helpers
from tests.helpers import REPO
from zoo import families
from zoo import run as run_lib
from zoo.data import tokenizer as tokenizer_lib
from zoo.infer import generate
from zoo.infer import harness
from zoo.infer import task_eval

TASKS = os.path.join(REPO, 'tests', 'fixtures', 'lm_eval')


class Characters(tokenizer_lib.Tokenizer):
  """One id per printable character (id = code - 28), BOS 1, EOS 2, padding 0."""
  vocab_size, bos_id, eos_id, pad_id, mask_id = 100, 1, 2, 0, None
  special_ids, sentinels = frozenset({0, 1, 2}), ()
  encode = staticmethod(lambda texts: [[ord(c) - 28 for c in t] for t in texts])
  decode = staticmethod(lambda ids: ''.join(chr(i + 28) for i in ids if i > 2))


@pytest.fixture(scope='module')
def lm():
  config = helpers.tiny_config(vocab_size=100, max_length=64)
  model = families.build(config.model)
  variables = {'params': jax.jit(model.init)(jax.random.PRNGKey(0), families.example_batch(
      config.model, 1, 16))['params']}
  return harness.ZooLM(model, variables, Characters(), max_length=32, batch_size=4)


def _log_probs(lm, ids):
  """log p(ids[i + 1] | ids[:i + 1]) for one unpadded row, in float64."""
  logits = np.asarray(lm.model.apply(lm.variables, {'inputs': jnp.asarray([ids[:-1]])})[0],
                      np.float64)
  logits -= logits.max(-1, keepdims=True)
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return log_probs[np.arange(len(ids) - 1), ids[1:]], logits.argmax(-1) == ids[1:]


def _request(*args):
  return Instance(request_type='loglikelihood', doc={}, arguments=args, idx=0)


def test_loglikelihood_is_the_continuations_log_probability_after_bos_and_context(lm):
  cases = [('hello', ' world'), ('say ', 'it'), ('', 'abc'), ('x' * 40, ' yz')]
  got = lm.loglikelihood([_request(c, t) for c, t in cases])
  for (context, continuation), (score, _) in zip(cases, got):
    spaces = len(context) - len(context.rstrip())  # moved to the continuation
    head, tail = Characters.encode([context.rstrip()])[0], Characters.encode(
        [context[len(context) - spaces:] + continuation])[0]
    ids = [1, *head, *tail][-33:]  # the context cut from the left to 32 inputs
    log_probs, _ = _log_probs(lm, np.array(ids))
    assert score == pytest.approx(log_probs[-len(tail):].sum(), abs=1e-4)


def test_is_greedy_when_the_continuation_is_what_greedy_decoding_gives(lm):
  context = [1, *Characters.encode(['ROMEO:'])[0]]
  ids = list(context)
  for _ in range(3):  # greedy continuation by full forward passes
    logits = lm.model.apply(lm.variables, {'inputs': jnp.asarray([ids])})[0, -1]
    ids.append(int(np.argmax(logits)))
  greedy = ids[len(context):]
  other = [greedy[0], greedy[1], (greedy[2] + 1) % 100]
  (_, is_greedy), (_, is_not) = lm.score([(context, greedy), (context, other)])
  assert is_greedy and not is_not


def test_rolling_loglikelihood_predicts_every_token_once_in_windows_of_the_context(lm):
  text = 'To be, or not to be'
  [score] = lm.loglikelihood_rolling([_request(text)])
  log_probs, _ = _log_probs(lm, np.array([1, *Characters.encode([text])[0]]))
  assert score == pytest.approx(log_probs.sum(), abs=1e-4)
  long = Characters.encode(['abcdefghij' * 7])[0]  # 70 tokens, windows of 32
  [rolled] = lm.loglikelihood_rolling([_request('abcdefghij' * 7)])
  windows = [lm_eval_utils.make_disjoint_window(w) for w in
             lm_eval_utils.get_rolling_token_windows(long, 1, 32, 1)]
  assert sum(len(cont) for _, cont in windows) == len(long)
  want = sum(_log_probs(lm, np.array([*ctx, *cont]))[0][-len(cont):].sum()
             for ctx, cont in windows)
  assert rolled == pytest.approx(want, abs=1e-3)


def test_generate_until_is_greedy_generation_cut_at_the_stop_strings(lm):
  contexts = ['ROMEO:', 'JULIET: O']
  requests = [Instance('generate_until', {}, (c, {'until': ['zz'], 'max_gen_toks': 6}), 0)
              for c in contexts]
  got = lm.generate_until(requests)
  for context, text in zip(contexts, got):
    ids = [1, *Characters.encode([context])[0]]
    fn = jax.jit(generate.make(lm.model, 6, {'temperature': 0.0}, 2, 0))
    tokens = np.asarray(fn(lm.variables, np.array([ids]), np.ones((1, len(ids)), np.int32),
                           jax.random.PRNGKey(0)))[0]
    want = Characters.decode(list(tokens[:list(tokens).index(2)] if 2 in tokens else tokens))
    assert text == want.split('zz')[0]
  # a stop string found in the output cuts it there
  stop = got[0][2:4]
  [cut] = lm.generate_until([Instance('generate_until', {}, (contexts[0], {
      'until': [stop], 'max_gen_toks': 6}), 0)])
  assert cut == got[0][:got[0].find(stop)]


def test_a_local_multiple_choice_task_scores_as_the_adapter_does(lm, monkeypatch):
  monkeypatch.chdir(REPO)  # the tasks' data_files are relative to it
  manager = lm_eval_tasks.TaskManager(include_path=TASKS)
  results = evaluator.simple_evaluate(model=lm, tasks=['zoo_choice', 'zoo_until'],
                                      task_manager=manager, bootstrap_iters=0)['results']
  with open(os.path.join(TASKS, 'zoo_choice.jsonl'), encoding='utf-8') as f:
    docs = [json.loads(line) for line in f]
  right = []
  for doc in docs:
    scores = [s for s, _ in lm.loglikelihood([_request(doc['context'], c)
                                              for c in doc['choices']])]
    right.append(int(np.argmax(scores)) == doc['answer'])
  assert results['zoo_choice']['acc,none'] == pytest.approx(np.mean(right))
  # the zoo's own multiple-choice accuracy (a prompt_completion task's eval) agrees
  records = [{'prompt': d['context'], 'completion': d['choices'][d['answer']],
              'choices': d['choices']} for d in docs]
  own = task_eval.multiple_choice(lm.scorer, lm.tokenizer, records, records)
  assert own == pytest.approx(results['zoo_choice']['acc,none'])
  outputs = lm.generate_until([Instance('generate_until', {}, (d['context'], {
      'until': ['\n'], 'max_gen_toks': 8}), 0) for d in docs])
  matches = [o == d['choices'][d['answer']] for o, d in zip(outputs, docs)]
  assert results['zoo_until']['exact_match,none'] == pytest.approx(np.mean(matches))


@pytest.mark.parametrize('args, message', [
    (['--tasks=zoo_nothing', f'--include_path={TASKS}'],
     r'--tasks: no task named zoo_nothing; the tasks under --include_path: zoo_choice, '
     'zoo_until'),
    (['--tasks=zoo_choice', '--include_path=/nonexistent/tasks'],
     r"--include_path='/nonexistent/tasks' is not a directory of task YAML files"),
    (['--tasks=zoo_choice', f'--include_path={TASKS}', '--cwd'],  # no data file from there
     r"--tasks=zoo_choice: Unable to find .*zoo_choice.jsonl.*found from the working "
     'directory'),
    (['--tasks=zoo_choice', f'--include_path={TASKS}',
      f'--config={helpers.config_file("bert_base")}'],
     r"model.family='encoder': the lm-eval adapter scores causal language models"),
])
def test_the_command_says_what_is_wrong_in_one_line(tmp_path, args, message):
  elsewhere = '--cwd' in args  # run from tmp_path instead of the repository root
  command = [sys.executable, '-m', 'zoo.harness', f'--workdir={tmp_path}',
             f'--config={helpers.config_file("gpt_shakespeare")}',
             *(a for a in args if a != '--cwd')]
  result = subprocess.run(command, env=helpers.cpu_env(), cwd=tmp_path if elsewhere else REPO,
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 2, result.stderr[-2000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('error: ') and re.search(message, last), last


def test_the_command_prints_its_table_and_at_most_five_other_lines(tmp_path):
  from zoo.train import loop  # pylint: disable=g-import-not-at-top
  smoke = helpers.config_file('gpt_shakespeare')
  loop.train(run_lib.load(smoke, ['train.steps=2', 'optim.warmup_steps=1']), str(tmp_path))
  command = [sys.executable, '-m', 'zoo.harness', f'--workdir={tmp_path}',  # its config.json
             '--tasks=zoo_choice', f'--include_path={TASKS}', '--limit=2']
  result = subprocess.run(command, env=helpers.cpu_env(), cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  lines = (result.stdout + result.stderr).strip().splitlines()
  table = [line for line in lines if line.startswith('|')]
  assert len(table) == 3 and 'zoo_choice' in table[2]  # header, rule, the task's row
  assert len(lines) - len(table) <= 5, '\n'.join(lines)
