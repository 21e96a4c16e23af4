"""The routing-collapse warning: one expert chosen by most tokens for several logged rows."""

import ml_collections
import numpy as np

from zoo.train import metrics


def test_collapse_warns_once_after_the_configured_rows_in_a_row(capsys):
  watch = metrics.CollapseWatch(ml_collections.ConfigDict({'collapse_share': 0.5,
                                                           'collapse_rows': 3}))
  balanced, collapsed = np.full((2, 4), 0.5), np.array([[0.5] * 4, [0.9, 0.5, 0.3, 0.3]])
  assert [watch.check(s, load) for s, load in enumerate(
      [collapsed, collapsed, balanced, collapsed, collapsed, collapsed, collapsed])] == [
          False, False, False, False, False, True, False]
  assert 'expert 0 of MoE layer 1 takes 90% of its tokens' in capsys.readouterr().out
