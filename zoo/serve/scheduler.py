"""Continuous batching: which sequences run in the engine's next step, and with which pages.

A sequence's tokens are its prompt and what it generated; `cached` of them have their keys
and values in its pages, and the rest are fed next. A sequence with one token to feed
decodes (a row of the decode step); one with more prefills, `prefill_chunk` tokens of it a
step (a row of the prefill step), so a long prompt never holds up the running decodes for
more than one chunk. A row whose feed reaches its last token samples the next one.

Requests wait in arrival order and are admitted between steps while rows and pages last;
an admitted prompt takes its pages at once, the pages of a prefix another request computed
included (zoo/serve/pages.py; not for models with recurrent layers, whose state at the
prefix's end is not kept), and a slot for its per-sequence state. When a decoding
sequence needs a page and none is left, the sequence admitted last gives its pages back
and waits at the front of the queue: it is computed again from its tokens when pages free
up, and its output is unchanged (a sampled token is keyed by the request's seed and its
index, zoo/serve/sampling.py).

Static batching (serve.batching='static', the baseline continuous batching is measured
against: benchmarks/serve_load.py) admits a batch only when the last one is done, each
sequence reserving `static_pages` pages at once, as a contiguous cache of the context
would; nothing is shared or preempted.
"""

import collections
import dataclasses
import itertools

from zoo.serve import pages as pages_lib


@dataclasses.dataclass
class Sampling:
  """One request's sampling settings (OpenAI's names where it has them)."""
  max_tokens: int
  temperature: float = 0.0  # 0 = greedy
  top_k: int = 0  # 0 = all
  top_p: float = 1.0
  min_p: float = 0.0
  repetition_penalty: float = 1.0  # prompt and output (CTRL); 1 = off
  frequency_penalty: float = 0.0  # output tokens' counts; 0 = off
  presence_penalty: float = 0.0  # output tokens seen at all; 0 = off
  seed: int = 0
  min_tokens: int = 0  # EOS held back before this many tokens
  stop_ids: tuple = ()  # token ids that end the output (EOS, a turn's end)

  @property
  def penalized(self):
    return (self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0 or
            self.presence_penalty != 0.0)


@dataclasses.dataclass(eq=False)
class Sequence:
  prompt: list
  sampling: Sampling
  id: int = 0
  output: list = dataclasses.field(default_factory=list)
  pages: list = dataclasses.field(default_factory=list)
  cached: int = 0  # tokens whose keys and values are in its pages
  hashed: int = 0  # leading full pages registered in the pool's prefix cache
  slot: int = 0  # its row in the pools of per-sequence state (1..max_seqs while running)
  finish_reason: str | None = None  # 'stop', 'length', 'cancelled', 'error'
  error: str = ''  # why a step failed ('error')
  preemptions: int = 0

  @property
  def tokens(self):
    return self.prompt + self.output

  @property
  def pending(self):
    return len(self.prompt) + len(self.output) - self.cached


@dataclasses.dataclass
class Row:
  seq: Sequence
  start: int  # the first fed token's position
  count: int  # tokens fed
  samples: bool  # the feed reaches the last token: a new one is sampled


@dataclasses.dataclass
class Plan:
  prefill: list  # Rows of the prefill step
  decode: list  # Rows of the decode step


class Scheduler:
  """The waiting queue, the running sequences and the page pool."""

  def __init__(self, pool, max_seqs, prefill_rows, prefill_chunk, share_prefixes=True,
               static_pages=0):
    self.pool, self.share_prefixes = pool, share_prefixes and not static_pages
    self.static_pages = static_pages
    self.max_seqs, self.prefill_rows, self.prefill_chunk = max_seqs, prefill_rows, prefill_chunk
    self.waiting = collections.deque()
    self.running = []  # in admission order
    self.preemptions, self.shared_pages = 0, 0  # so far; shared: pages a prefix match gave
    self._ids = itertools.count(1)
    self._slots = list(range(max_seqs, 0, -1))

  def add(self, seq):
    """Queues a sequence (the engine bounds the queue: serve.max_queue)."""
    seq.id = seq.id or next(self._ids)
    self.waiting.append(seq)

  def finish(self, seq, reason):
    """Ends a waiting or running sequence; its pages go back to the pool at once."""
    seq.finish_reason = reason
    if seq in self.running:
      self.running.remove(seq)
    elif seq in self.waiting:
      self.waiting.remove(seq)
    self._release(seq)

  def plan(self):
    """Admits what fits, makes room for every decode -> the next step's rows."""
    self._admit()
    decode = []
    for seq in list(self.running):
      if seq.pending == 1 and seq in self.running and self._room_for(seq, seq.cached + 1):
        decode.append(Row(seq, seq.cached, 1, True))
    prefill = []
    for seq in self.running:
      if seq.pending > 1 and len(prefill) < self.prefill_rows:
        count = min(seq.pending, self.prefill_chunk)
        prefill.append(Row(seq, seq.cached, count, count == seq.pending))
    return Plan(prefill, [row for row in decode if row.seq in self.running])

  def fed(self, row):
    """A row's tokens are in the cache now: registers the pages they filled."""
    seq = row.seq
    seq.cached = row.start + row.count
    full = seq.cached // self.pool.size
    if full > seq.hashed:
      hashes = pages_lib.prefix_hashes(seq.tokens[:full * self.pool.size], self.pool.size)
      for i in range(seq.hashed, full):
        self.pool.register(seq.pages[i], hashes[i])
      seq.hashed = full

  def _admit(self):
    if self.static_pages and self.running:
      return  # static batching: the next batch when this one is done
    while self.waiting and len(self.running) < self.max_seqs:
      seq = self.waiting[0]
      tokens = seq.tokens
      size = self.pool.size
      # the last token is always fed (its logits give the next), so its page is never shared
      shared = (self.pool.match(pages_lib.prefix_hashes(tokens[:len(tokens) - 1], size))
                if self.share_prefixes else [])
      fresh = self.pool.allocate(self.static_pages or -(-len(tokens) // size) - len(shared))
      if fresh is None:
        self.pool.release(shared)
        return
      self.waiting.popleft()
      seq.pages, seq.cached, seq.hashed = shared + fresh, len(shared) * size, len(shared)
      self.shared_pages += len(shared)
      seq.slot = self._slots.pop()
      self.running.append(seq)

  def _room_for(self, seq, tokens):
    """Pages for `tokens` tokens of seq, preempting the last admitted while none are left;
    False when seq itself was preempted."""
    while len(seq.pages) * self.pool.size < tokens:
      page = self.pool.allocate(1)
      if page:
        seq.pages += page
        continue
      victim = self.running[-1]
      self._preempt(victim)
      if victim is seq:
        return False
    return True

  def _preempt(self, seq):
    self.running.remove(seq)
    self._release(seq)
    seq.preemptions += 1
    self.preemptions += 1
    self.waiting.appendleft(seq)

  def _release(self, seq):
    self.pool.release(seq.pages)
    if seq.slot:
      self._slots.append(seq.slot)
    seq.pages, seq.cached, seq.hashed, seq.slot = [], 0, 0, 0
