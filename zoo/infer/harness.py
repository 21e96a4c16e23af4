"""lm-evaluation-harness over a zoo checkpoint: `ZooLM` implements its model interface
(loglikelihood, loglikelihood_rolling, generate_until) for a decoder-only run; the command
is `python -m zoo.harness` (zoo/harness.py). Needs the optional extra `zoo[lm-eval]`.

Text is tokenized with the run's tokenizer: a context gets the BOS the model trained with,
and a continuation's ids are the whole text's beyond the context's (the context's trailing
spaces move to the continuation, as lm-eval's own models do). Sequences longer than the
model's context (`data.seq_len`, the length it trained at) keep their last tokens; rolling
log-likelihoods use lm-eval's disjoint windows of that length. Scoring is
zoo/infer/score.py's; generation is zoo.infer.generate's (greedy unless the task samples),
cut at the task's `until` strings.
"""

import collections

import jax
import numpy as np
from lm_eval import evaluator
from lm_eval import tasks as lm_eval_tasks
from lm_eval import utils as lm_eval_utils
from lm_eval.api.model import LM

from zoo import storage
from zoo.errors import ConfigError
from zoo.families import decoding
from zoo.infer import generate
from zoo.infer import run as run_lib
from zoo.infer import score as score_lib
from zoo.train import runtime

class ZooLM(LM):
  """A decoder's model, variables and tokenizer as an lm-eval model."""

  def __init__(self, model, variables, tokenizer, max_length, batch_size=8):
    super().__init__()
    self.model, self.variables, self.tokenizer = model, variables, tokenizer
    self.max_length, self.batch_size = max_length, batch_size
    self.prefix_id = tokenizer.eos_id if tokenizer.bos_id is None else tokenizer.bos_id
    self.scorer = score_lib.Scorer(model, variables, max_length, batch_size)
    self._generators = {}

  @classmethod
  def from_workdir(cls, run, workdir, batch_size=8):
    """The resolved run's (zoo/run) newest checkpoint in `workdir` (or train.init_params)
    with its tokenizer."""
    config = run.config
    if 'causal_lm' not in run.family.OBJECTIVES:
      raise ConfigError(f'model.family={config.model.family!r}: the lm-eval adapter scores '
                        'causal language models; use a decoder run')
    runtime.check_restorable(config, workdir, 'zoo.harness')
    runtime.compile_cache(config)
    place = runtime.placement(run)
    state = runtime.model_state(run, place.mesh)
    runtime.check_same_model(config, workdir, state)  # before its tokenizer is looked for
    tokenizer = runtime.tokenizer(config, workdir)
    _, variables = runtime.restore_variables(config, workdir, state, 'zoo.harness')
    return cls(state.model, variables, tokenizer, config.data.seq_len, batch_size)

  # ------------------------------------------------------------------ tokenization

  def _encode(self, text):
    return list(self.tokenizer.encode([text])[0]) if text else []

  def _split(self, context, continuation):
    """(context ids with the prefix token, continuation ids)."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
      context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, head = self._encode(context + continuation), self._encode(context)
    tail = whole[len(head):] if whole[:len(head)] == head and len(whole) > len(head) else (
        self._encode(continuation))
    return [self.prefix_id, *head], tail

  def score(self, pairs):
    """[(context ids, continuation ids)] -> [(log-probability, greedy?)] (zoo/infer/score.py)."""
    return self.scorer.score(pairs)

  # ------------------------------------------------------------ lm-eval's interface

  def loglikelihood(self, requests):
    return self.score([self._split(*r.args) for r in requests])

  def loglikelihood_rolling(self, requests):
    totals = []
    for request in requests:
      windows = [lm_eval_utils.make_disjoint_window(w) for w in
                 lm_eval_utils.get_rolling_token_windows(
                     self._encode(request.args[0]), self.prefix_id, self.max_length, 1)]
      totals.append(sum(logprob for logprob, _ in self.score(windows)))
    return totals

  def generate_until(self, requests):
    outputs = [None] * len(requests)
    by_settings = collections.defaultdict(list)
    for index, request in enumerate(requests):
      kwargs = dict(request.args[1])
      until = kwargs.get('until', [])
      until = [until] if isinstance(until, str) else list(until)
      new_tokens = int(kwargs.get('max_gen_toks', 256))
      temperature = float(kwargs.get('temperature', 0.0)) if kwargs.get('do_sample') else 0.0
      by_settings[(min(new_tokens, self.max_length - 1), temperature, tuple(until))].append(
          index)
    for (new_tokens, temperature, until), indices in by_settings.items():
      for start in range(0, len(indices), self.batch_size):
        chunk = indices[start:start + self.batch_size]
        texts = self._generate([requests[i].args[0] for i in chunk], new_tokens, temperature)
        for index, text in zip(chunk, texts):
          outputs[index] = run_lib.cut_at_stop(text, until)[0]
    return outputs

  def _generate(self, contexts, new_tokens, temperature):
    """Completions of up to `batch_size` contexts (each cut from the left to leave room)."""
    room = self.max_length - new_tokens
    prompts = [[self.prefix_id, *self._encode(c)][-room:] for c in contexts]
    prompts += [[self.prefix_id]] * (self.batch_size - len(prompts))  # a full batch
    ids, segments = decoding.left_pad(prompts, self.tokenizer.pad_id,
                                      score_lib.bucket(max(len(p) for p in prompts), room))
    key = (new_tokens, temperature)
    if key not in self._generators:
      self._generators[key] = jax.jit(generate.make(
          self.model, new_tokens, {'temperature': temperature}, self.tokenizer.eos_id,
          self.tokenizer.pad_id))
    tokens = np.asarray(self._generators[key](self.variables, ids, segments,
                                              jax.random.PRNGKey(0)))
    texts = []
    for row in tokens[:len(contexts)]:
      row = list(row)
      texts.append(self.tokenizer.decode(row[:row.index(self.tokenizer.eos_id)]
                                         if self.tokenizer.eos_id in row else row))
    return texts


def _task_manager(tasks, include_path):
  """lm-eval's task index: of --include_path alone when it has every task asked for (lm-eval's
  own ~15k tasks take seconds to index), else of both."""
  if include_path:
    local = lm_eval_tasks.TaskManager(include_path=include_path, include_defaults=False)
    if all(t in local.all_tasks for t in tasks):
      return local
  return lm_eval_tasks.TaskManager(include_path=include_path)


def evaluate(run, workdir, tasks, include_path=None, num_fewshot=None, limit=None,
             batch_size=8):
  """-> lm-eval's results dict for `tasks` on the run in `workdir`."""
  if include_path and not storage.isdir(include_path):
    raise ConfigError(f'--include_path={include_path!r} is not a directory of task YAML '
                      'files')
  if batch_size < 1:
    raise ConfigError(f'--batch_size={batch_size} must be >= 1')
  manager = _task_manager(tasks, include_path)
  unknown = [t for t in tasks if t not in manager.all_tasks]
  if unknown:
    local = (sorted(lm_eval_tasks.TaskManager(include_path=include_path,
                                              include_defaults=False).all_tasks)
             if include_path else [])
    raise ConfigError(
        f'--tasks: no task named {", ".join(unknown)}'
        + (f'; the tasks under --include_path: {", ".join(local)}' if local else
           '; pass --include_path=DIR for local task YAML files'))
  try:  # the tasks' data are found (or fetched) before anything is built or compiled
    lm_eval_tasks.get_task_dict(list(tasks), manager)
  except FileNotFoundError as e:  # relative data_files start from the working directory
    raise ConfigError(f'--tasks={",".join(tasks)}: {e}; relative data_files in a task YAML '
                      'are found from the working directory') from None
  model = ZooLM.from_workdir(run, workdir, batch_size)
  return evaluator.simple_evaluate(model=model, tasks=list(tasks), num_fewshot=num_fewshot,
                                   limit=limit, task_manager=manager, bootstrap_iters=0,
                                   log_samples=False)
