"""Task metrics against hand-computed cases; BLEU and ROUGE-L through their libraries on
known pairs; a metric whose library is missing is one line."""

import importlib.util

import numpy as np
import pytest

from zoo.errors import ConfigError
from zoo.infer import task_metrics as m

PREDICTED = np.array([1, 1, 0, 1, 0, 0, 1, 1])
LABELS = np.array([1, 0, 0, 1, 1, 0, 1, 1])
# true positives 4, false positives 1, false negatives 1, true negatives 2


def test_accuracy_f1_and_mcc_by_hand():
  assert m.accuracy(PREDICTED, LABELS) == pytest.approx(6 / 8)
  precision, recall = 4 / 5, 4 / 5
  assert m.f1(PREDICTED, LABELS, 2) == pytest.approx(2 * precision * recall /
                                                       (precision + recall))
  tp, fp, fn, tn = 4, 1, 1, 2
  mcc = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  assert m.mcc(PREDICTED, LABELS) == pytest.approx(mcc)


def test_multiclass_f1_is_the_mean_over_classes():
  predicted, labels = np.array([0, 1, 2, 2, 1]), np.array([0, 2, 2, 2, 1])
  # class 0: p 1 r 1 -> 1; class 1: p 1/2 r 1 -> 2/3; class 2: p 1 r 2/3 -> 4/5
  assert m.f1(predicted, labels, 3) == pytest.approx((1 + 2 / 3 + 4 / 5) / 3)
  # a class nobody predicts nor holds counts as 0 among four
  assert m.f1(predicted, labels, 4) == pytest.approx((1 + 2 / 3 + 4 / 5) / 4)


def test_pearson_and_spearman_by_hand():
  x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 1.0, 4.0, 8.0])
  dx, dy = x - x.mean(), y - y.mean()
  assert m.pearson(x, y) == pytest.approx((dx @ dy) / np.sqrt((dx @ dx) * (dy @ dy)))
  # ranks of y: 2 1 3 4; rho = 1 - 6 sum d^2 / (n (n^2 - 1)) with d = (1, -1, 0, 0)
  assert m.spearman(x, y) == pytest.approx(1 - 6 * 2 / (4 * 15))
  assert m.pearson(np.ones(4), y) == 0.0 and m.spearman(x, np.zeros(4)) == 0.0


def test_exact_match_ignores_surrounding_whitespace_only():
  assert m.exact_match(['ROMEO', ' JULIET\n', 'romeo'], ['ROMEO', 'JULIET', 'ROMEO']) == (
      pytest.approx(2 / 3))


def test_bleu_through_sacrebleu_on_known_pairs():
  same = ['the cat sat on the mat']
  assert m.bleu(same, same) == pytest.approx(100.0)
  assert m.bleu(['a b c d'], ['e f g h']) == pytest.approx(0.0)
  # 4 of 5 words right: 1-4 gram precisions 4/5, 3/4, 2/3, 1/2 (one wrong last word);
  # same length, no brevity penalty
  got = m.bleu(['the cat sat on a'], ['the cat sat on the'])
  assert got == pytest.approx(100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25, rel=1e-6)


def test_rouge_l_through_rouge_score_on_known_pairs():
  # longest common subsequence 'the cat the mat' = 4 words of 5 (output) and 6 (reference)
  output, reference = 'the cat on the mat', 'the cat sat by the mat'
  precision, recall = 4 / 5, 4 / 6
  want = 2 * precision * recall / (precision + recall)
  assert m.rouge_l([output, reference], [reference, reference]) == pytest.approx((want + 1) / 2)


def test_multiple_choice_accuracy_takes_the_highest_score():
  scores = [np.array([-1.0, -3.0]), np.array([-2.0, -0.5, -4.0]), np.array([-1.0, -1.0])]
  assert m.mc_accuracy(scores, [0, 2, 0]) == pytest.approx(2 / 3)


def test_a_metric_without_its_library_is_one_line(monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, 'find_spec',
                      lambda name, *a: None if name == 'sacrebleu' else real(name, *a))
  m.check(['accuracy', 'exact_match'])
  with pytest.raises(ConfigError, match=r"data.task.metrics: 'bleu' needs sacrebleu; pip "
                     r"install 'zoo\[tasks\]' or drop the metric"):
    m.check(['accuracy', 'bleu'])
