"""Continuous batching's plan: requests admitted while rows and pages last (each with a
state slot), a long prompt
fed a chunk a step beside the running decodes, the sequence admitted last preempted when a
page runs out (and admitted again with its tokens, its full pages still cached),
cancellation freeing pages at once; static batching a batch at a time."""

from zoo.serve import pages as pages_lib
from zoo.serve import scheduler as scheduler_lib


def _scheduler(pages=9, size=4, max_seqs=3, rows=1, chunk=4, share=True):
  return scheduler_lib.Scheduler(pages_lib.PagePool(pages, size), max_seqs, rows, chunk, share)


def _seq(length, first=10):
  return scheduler_lib.Sequence(list(range(first, first + length)),
                                scheduler_lib.Sampling(max_tokens=100))


def _step(s, plan, token=1):
  """What the engine does with a plan: feeds the rows, appends a token where one is drawn."""
  for row in plan.prefill + plan.decode:
    s.fed(row)
    if row.samples:
      row.seq.output.append(token)


def test_a_long_prompt_is_fed_a_chunk_a_step_beside_the_running_decodes():
  s = _scheduler(pages=12)
  short, long = _seq(2), _seq(10, first=50)
  s.add(short)
  _step(s, s.plan())  # the short prompt prefilled: it decodes from now on
  s.add(long)
  fed = []
  for _ in range(3):
    plan = s.plan()
    assert [r.seq for r in plan.decode] == [short]  # never held up by the long prompt
    fed.append([(r.start, r.count, r.samples) for r in plan.prefill])
    _step(s, plan)
  assert fed == [[(0, 4, False)], [(4, 4, False)], [(8, 2, True)]]
  assert long.pending == 1 and len(long.pages) == 3


def test_rows_are_bounded_and_each_running_sequence_has_a_state_slot():
  s = _scheduler(pages=20, max_seqs=2)
  seqs = [_seq(3) for _ in range(3)]
  for q in seqs:
    s.add(q)
  s.plan()
  assert s.running == seqs[:2] and list(s.waiting) == seqs[2:]
  assert [q.slot for q in seqs[:2]] == [1, 2]


def test_out_of_pages_the_last_admitted_is_preempted_and_later_recomputed():
  s = _scheduler(pages=4, size=2, max_seqs=2, rows=2, chunk=8)  # 3 pages of 2 tokens
  a, b = _seq(2), _seq(2, first=30)
  s.add(a)
  s.add(b)
  _step(s, s.plan())  # both prompts prefilled (one page each)
  _step(s, s.plan())  # both decode into a second page... only one is left
  assert s.preemptions == 1 and b.preemptions == 1 and s.waiting[0] is b
  assert b.pages == [] and b.cached == 0 and len(b.output) == 1  # its output is kept
  s.finish(a, 'length')
  plan = s.plan()  # b comes back: its full first page from the prefix cache, the rest fed
  assert [(r.seq, r.start, r.count, r.samples) for r in plan.decode] == [(b, 2, 1, True)]
  s.finish(b, 'length')
  assert s.pool.available == 3


def test_a_shared_prefix_is_not_fed_again_and_cancellation_frees_pages_at_once():
  s = _scheduler(pages=9, size=2, max_seqs=2, chunk=8)
  a = _seq(5)
  s.add(a)
  _step(s, s.plan())
  assert a.hashed == 2  # its two full pages registered
  b = scheduler_lib.Sequence(a.prompt[:4] + [99], scheduler_lib.Sampling(max_tokens=5))
  s.add(b)
  plan = s.plan()
  assert b.pages[:2] == a.pages[:2] and b.cached == 4
  assert (b, 4, 1) in [(r.seq, r.start, r.count) for r in plan.decode]  # one token left
  before = s.pool.available
  s.finish(b, 'cancelled')
  assert s.pool.available == before + 1 and b not in s.running  # its own page back


def test_recurrent_models_share_no_prefixes():
  s = _scheduler(pages=9, size=2, share=False)
  a = _seq(5)
  s.add(a)
  _step(s, s.plan())
  b = _seq(5)
  s.add(b)
  s.plan()
  assert b.cached == 0 and not set(a.pages) & set(b.pages)


def test_static_batching_admits_a_batch_when_the_last_is_done_each_reserving_its_pages():
  s = scheduler_lib.Scheduler(pages_lib.PagePool(9, 4), 4, 2, 8, static_pages=3)
  seqs = [_seq(2) for _ in range(4)]
  for q in seqs:
    s.add(q)
  s.plan()
  assert s.running == seqs[:2] and all(len(q.pages) == 3 for q in seqs[:2])  # 8 pages: 2 fit
  s.finish(seqs[0], 'length')
  s.plan()
  assert s.running == seqs[1:2]  # no one joins a running batch
  s.finish(seqs[1], 'length')
  s.plan()
  assert s.running == seqs[2:]
