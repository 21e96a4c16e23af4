"""A task's metrics at eval (data.task.metrics; zoo/infer/task_metrics.py), beside the
eval loss, in every eval row as eval_NAME:

  classification, regression   from the label head's predictions on the eval batches the
                               eval loss reads (accuracy, f1, mcc; pearson, spearman)
  text_to_text,                from outputs generated (generate.*: greedy or beam, at most
  prompt_completion            generate.max_new_tokens) for the first train.eval_batches x
                               train.batch_size eval examples (0: all) against their
                               targets or completions (exact_match, bleu, rouge_l);
                               mc_accuracy: the choice (each example's `choices`, else
                               every distinct completion of the split) the decoder gives
                               the highest log-likelihood after the prompt (as lm-eval's
                               `acc`; zoo/infer/score.py); perplexity: exp(eval loss)
"""

import math

import numpy as np

from zoo import config as config_lib
from zoo import families
from zoo.infer import run as infer_run
from zoo.infer import score as score_lib
from zoo.infer import task_metrics

GENERATED_METRICS = ('exact_match', 'bleu', 'rouge_l')


def metric_names(task_config):
  """data.task.metrics, or the kind's defaults."""
  kind = task_config.kind
  return tuple(task_config.metrics) or config_lib.DEFAULT_TASK_METRICS[kind]


class TaskEval:
  """The metrics of one task run; built (and its libraries checked) before any compile."""

  def __init__(self, config, place, task, state):
    self.config, self.task, self.model = config, task, state.model
    self.names = metric_names(config.data.task)
    task_metrics.check(self.names)
    limit = config.train.eval_batches * config.train.batch_size
    records = task.records['eval'][:limit or None]
    prompt_field, target_field = (('inputs', 'targets') if task.kind == 'text_to_text' else
                                  ('prompt', 'completion'))
    self.references = [r.get(target_field) for r in records]
    if any(n in GENERATED_METRICS for n in self.names):
      family = families.get(config.model)
      self.ids, self.segments = family.tokenize_prompts(
          config, task.tokenizer, [r[prompt_field] for r in records], fit=True)
      self.generate = infer_run.generator(config, place, state, task.tokenizer)
    self.records = records

  def headed(self, predictions, labels):
    """Label-head metrics from the eval batches' predictions and labels (real rows); {}
    for a generated kind."""
    kind, out = self.task.kind, {}
    if predictions is None:
      return out
    predicted = predictions if kind == 'regression' else np.argmax(predictions, axis=-1)
    for name in self.names:
      if name == 'f1':
        out[name] = task_metrics.f1(predicted, labels, self.task.num_labels)
      else:
        out[name] = getattr(task_metrics, name)(predicted, labels)
    return out

  def generated(self, variables, eval_loss):
    """Metrics of generated outputs, multiple choice and perplexity."""
    out = {}
    if any(n in GENERATED_METRICS for n in self.names):
      outputs = self._outputs(variables)
      for name in GENERATED_METRICS:
        if name in self.names:
          out[name] = getattr(task_metrics, name)(outputs, self.references)
    if 'mc_accuracy' in self.names:
      scorer = score_lib.Scorer(self.model, variables, self.config.data.seq_len,
                                self.config.train.batch_size)
      out['mc_accuracy'] = multiple_choice(scorer, self.task.tokenizer, self.records,
                                           self.task.records['eval'])
    if 'perplexity' in self.names:
      out['perplexity'] = math.exp(min(eval_loss, 700.0))
    return out

  def _outputs(self, variables):
    """The eval prompts' generated texts, train.batch_size prompts per call (the last
    batch filled with copies of the first prompt)."""
    rows, outputs = self.config.train.batch_size, []
    for start in range(0, len(self.ids), rows):
      ids, segments = self.ids[start:start + rows], self.segments[start:start + rows]
      short = rows - len(ids)
      if short:
        ids = np.concatenate([ids, np.repeat(self.ids[:1], short, 0)])
        segments = np.concatenate([segments, np.repeat(self.segments[:1], short, 0)])
      tokens = self.generate(variables, ids, segments)
      outputs += infer_run.completions(self.config, self.task.tokenizer,
                                       tokens)[:rows - short]
    return outputs


def multiple_choice(scorer, tokenizer, records, split):
  """Multiple-choice accuracy of prompt_completion `records`: each example's `choices` (else
  every distinct completion of `split`) scored after its prompt ([BOS] prompt, as the
  decoder trained), the answer its completion."""
  everyone = sorted({r['completion'] for r in split})
  head = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
  pairs, counts, answers = [], [], []
  for r in records:
    choices = r.get('choices', everyone)
    prompt = [*head, *tokenizer.encode([r['prompt']])[0]]
    pairs += [(prompt, list(ids)) for ids in tokenizer.encode(choices)]
    counts.append(len(choices))
    answers.append(choices.index(r['completion']))
  scores = np.asarray([s for s, _ in scorer.score(pairs)])
  return task_metrics.mc_accuracy(np.split(scores, np.cumsum(counts)[:-1]), answers)


def make(config, place, corpus, state):
  """-> TaskEval for a task run, None for pretraining: what the training loop and
  --mode=eval are given (zoo/launch.py) to add task metrics to their eval rows."""
  if not config.data.task.kind:
    return None
  return TaskEval(config, place, corpus, state)
