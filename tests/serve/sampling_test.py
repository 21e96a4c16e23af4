"""Per-row sampling: each row's filters equal zoo.infer.generate's with that row's settings
(min-p alone without the sort too),
the penalties equal a float64 numpy count, a row's draw depends only on its seed and token
index, and a banned id (EOS before min_tokens) is never drawn."""

import jax
import jax.numpy as jnp
import numpy as np

from zoo.infer import generate
from zoo.serve import sampling
from zoo.serve import scheduler as scheduler_lib

SETTINGS = [dict(temperature=0.7, top_k=3), dict(temperature=1.3, top_p=0.6),
            dict(temperature=1.0, min_p=0.2), dict(temperature=0.5, top_k=5, top_p=0.9,
                                                   min_p=0.05)]


def _arrays(settings, index=0, banned=-1):
  rows = [(scheduler_lib.Sampling(max_tokens=1, seed=7 + r, **s), index, banned)
          for r, s in enumerate(settings)]
  return {k: jnp.asarray(v) for k, v in sampling.host_arrays(rows, len(settings)).items()}


def test_each_rows_filters_are_generates_with_its_settings():
  logits = jax.random.normal(jax.random.PRNGKey(0), (len(SETTINGS), 32)) * 3
  a = _arrays(SETTINGS)
  got = sampling.filter_rows(logits, a['temperature'], a['top_k'], a['top_p'], a['min_p'])
  for r, s in enumerate(SETTINGS):
    want = generate.filter_logits(logits[r:r + 1], **s)
    np.testing.assert_array_equal(np.isfinite(got[r]), np.isfinite(want[0]))
    np.testing.assert_allclose(np.where(np.isfinite(want[0]), got[r], 0),
                               np.where(np.isfinite(want[0]), want[0], 0), rtol=1e-6)
  no_sort = sampling.min_p_rows(logits, a['temperature'], a['min_p'])  # min-p alone
  alone = sampling.filter_rows(logits, a['temperature'], 0 * a['top_k'], 1 + 0 * a['top_p'],
                               a['min_p'])
  np.testing.assert_array_equal(no_sort, alone)


def test_penalties_equal_a_numpy_count():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 16)).astype(np.float32) * 2
  seen = np.array([[3, 3, 5, 9, 9, 9, -1], [1, 2, 2, 2, 4, -1, -1]], np.int32)
  outputs_from = np.array([2, 1], np.int32)
  settings = [dict(repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.25),
              dict(repetition_penalty=1.0, frequency_penalty=1.5, presence_penalty=0.0)]
  got = sampling.penalize_rows(jnp.asarray(logits), jnp.asarray(seen),
                               jnp.asarray(outputs_from), _arrays(settings))
  want = logits.astype(np.float64)
  for r, s in enumerate(settings):
    ids = [t for t in seen[r] if t >= 0]
    output = ids[outputs_from[r]:]
    for t in set(ids):
      x = want[r, t]
      want[r, t] = x / s['repetition_penalty'] if x > 0 else x * s['repetition_penalty']
    for t in set(output):
      want[r, t] -= s['frequency_penalty'] * output.count(t) + s['presence_penalty']
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_draw_depends_on_its_seed_and_index_alone_and_never_takes_the_banned_id():
  sample = jax.jit(sampling.sample_rows)  # one compile for every call below
  logits = jnp.zeros((4, 8))  # uniform: every id could come
  first = sample(logits, _arrays([dict(temperature=1.0)] * 4, index=3))
  again = sample(logits.at[1:].set(5.0 * jnp.arange(8)),
                 _arrays([dict(temperature=1.0)] * 4, index=3))
  assert int(first[0]) == int(again[0])  # row 0's draw ignores the other rows
  draws = {int(sample(logits, _arrays([dict(temperature=1.0)] * 4, index=i))[0])
           for i in range(40)}
  assert len(draws) > 3  # the index moves the key
  banned = [int(t) for i in range(40) for t in sample(
      logits, _arrays([dict(temperature=1.0)] * 4, index=i, banned=2))]
  assert 2 not in banned
  greedy = sample(jnp.eye(4, 8) * 3, _arrays([{}] * 4))
  np.testing.assert_array_equal(greedy, [0, 1, 2, 3])
