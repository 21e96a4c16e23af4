"""The paged KV cache's bookkeeping on the host: which pages of the pool are free, who holds
each, and which full pages hold a known prefix of tokens (shared between requests).

Page 0 is never handed out: padding tokens write there. A page's reference count is the
number of sequences holding it. A full page is registered under the hash of the tokens up
to and including its own (the hash chains through the pages before it), so a request whose
prompt starts with the same tokens takes the same pages instead of computing them again. A
registered page nobody holds stays cached, in least-recently-freed order, until the free
list runs dry and a new page evicts it.
"""

import collections


class PagePool:
  """Pages 1..count-1 of a pool of `count` pages of `size` tokens."""

  def __init__(self, count, size):
    if count < 2:
      raise ValueError(f'serve.num_pages={count} must be at least 2 (page 0 takes padding)')
    self.count, self.size = count, size
    self._free = collections.deque(range(1, count))
    self._refs = [0] * count
    self._hash_of = {}  # page -> prefix hash, for registered pages
    self._page_of = {}  # prefix hash -> page
    self._cached = collections.OrderedDict()  # registered pages nobody holds, oldest first

  @property
  def available(self):
    """Pages a request could take now: free, or cached and evictable."""
    return len(self._free) + len(self._cached)

  @property
  def used(self):
    return self.count - 1 - self.available

  def allocate(self, n):
    """n fresh pages (held once each), or None when fewer are available (nothing taken)."""
    if n > self.available:
      return None
    pages = []
    for _ in range(n):
      if self._free:
        page = self._free.popleft()
      else:  # evict the cached page freed longest ago
        page, _ = self._cached.popitem(last=False)
        del self._page_of[self._hash_of.pop(page)]
      self._refs[page] = 1
      pages.append(page)
    return pages

  def release(self, pages):
    """Drops one hold on each page; an unheld page goes back to the free list, or, when it
    holds a registered prefix, to the cached pages."""
    for page in pages:
      self._refs[page] -= 1
      if self._refs[page] < 0:
        raise RuntimeError(f'page {page} released more often than it was held')
      if self._refs[page] == 0:
        if page in self._hash_of:
          self._cached[page] = None
        else:
          self._free.append(page)

  def match(self, hashes):
    """The registered pages of the leading prefix hashes, each now held once more."""
    pages = []
    for h in hashes:
      page = self._page_of.get(h)
      if page is None:
        break
      if self._refs[page] == 0:
        del self._cached[page]
      self._refs[page] += 1
      pages.append(page)
    return pages

  def register(self, page, prefix_hash):
    """Marks a full page as holding the prefix with this hash (first writer wins)."""
    if prefix_hash in self._page_of or page in self._hash_of:
      return
    self._page_of[prefix_hash] = page
    self._hash_of[page] = prefix_hash


def prefix_hashes(tokens, size):
  """The chained hash of each full page of `tokens`: page i's covers tokens[:(i + 1) size]."""
  hashes, h = [], None
  for start in range(0, len(tokens) - size + 1, size):
    h = hash((h, tuple(tokens[start:start + size])))
    hashes.append(h)
  return hashes
