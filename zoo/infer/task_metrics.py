"""Task metrics (data.task.metrics) from predictions and references, through the libraries
that define them: scikit-learn (accuracy, F1, Matthews correlation), scipy (Pearson,
Spearman), sacrebleu (corpus BLEU, 0-100) and rouge-score (ROUGE-L F-measure, 0-1). They
come with the optional extra `zoo[tasks]`; a run that asks for one without it stops
before anything compiles (`check`).

F1 is the positive class's (label 1) for two classes, as GLUE reports it (MRPC, QQP), and
the unweighted mean over classes (macro) for more.
"""

import importlib.util

import numpy as np

from zoo.errors import ConfigError

NEEDS = {'accuracy': 'sklearn', 'f1': 'sklearn', 'mcc': 'sklearn', 'pearson': 'scipy',
         'spearman': 'scipy', 'bleu': 'sacrebleu', 'rouge_l': 'rouge_score'}
PACKAGES = {'sklearn': 'scikit-learn', 'scipy': 'scipy', 'sacrebleu': 'sacrebleu',
            'rouge_score': 'rouge-score'}


def check(metrics):
  """The libraries the metrics need, importable; else one line naming the extra."""
  for metric in metrics:
    module = NEEDS.get(metric)
    if module and importlib.util.find_spec(module) is None:
      raise ConfigError(f"data.task.metrics: {metric!r} needs {PACKAGES[module]}; "
                        "pip install 'zoo[tasks]' or drop the metric")


def accuracy(predicted, labels):
  from sklearn import metrics  # pylint: disable=g-import-not-at-top
  return float(metrics.accuracy_score(labels, predicted))


def f1(predicted, labels, num_labels):
  from sklearn import metrics  # pylint: disable=g-import-not-at-top
  if num_labels == 2:
    return float(metrics.f1_score(labels, predicted, average='binary', zero_division=0))
  return float(metrics.f1_score(labels, predicted, labels=np.arange(num_labels),
                                average='macro', zero_division=0))


def mcc(predicted, labels):
  from sklearn import metrics  # pylint: disable=g-import-not-at-top
  return float(metrics.matthews_corrcoef(labels, predicted))


def _constant(values):
  return np.ptp(np.asarray(values, np.float64)) == 0


def pearson(predicted, labels):
  """Pearson's r; 0 where either side is constant (r is undefined there)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  if _constant(predicted) or _constant(labels):
    return 0.0
  return float(stats.pearsonr(predicted, labels)[0])


def spearman(predicted, labels):
  """Spearman's rho; 0 where either side is constant."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  if _constant(predicted) or _constant(labels):
    return 0.0
  return float(stats.spearmanr(predicted, labels)[0])


def exact_match(outputs, references):
  """Share of outputs equal to their reference, surrounding whitespace ignored."""
  return float(np.mean([o.strip() == r.strip() for o, r in zip(outputs, references)]))


def bleu(outputs, references):
  import sacrebleu  # pylint: disable=g-import-not-at-top
  return float(sacrebleu.corpus_bleu(list(outputs), [list(references)]).score)


def rouge_l(outputs, references):
  """Mean ROUGE-L F-measure over the pairs."""
  from rouge_score import rouge_scorer  # pylint: disable=g-import-not-at-top
  scorer = rouge_scorer.RougeScorer(['rougeL'])
  return float(np.mean([scorer.score(r, o)['rougeL'].fmeasure
                        for o, r in zip(outputs, references)]))


def mc_accuracy(choice_scores, answers):
  """Share of examples whose highest-scoring choice is the answer (ties: the first)."""
  return float(np.mean([int(np.argmax(s)) == a for s, a in zip(choice_scores, answers)]))
