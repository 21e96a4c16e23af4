"""The page pool: pages handed out once, returned on release, page 0 never; a full page's
prefix shared by the next request with the same tokens, kept while nobody holds it until a
fresh page is needed, then evicted oldest first."""

import pytest

from zoo.serve import pages as pages_lib


def test_pages_are_handed_out_once_and_come_back_and_page_0_never():
  pool = pages_lib.PagePool(5, 4)
  first = pool.allocate(3)
  assert 0 not in first and len(set(first)) == 3 and pool.available == 1
  assert pool.allocate(2) is None and pool.available == 1  # nothing taken on a refusal
  pool.release(first)
  assert pool.available == 4 and pool.used == 0
  with pytest.raises(RuntimeError, match='released more often'):
    pool.release(first[:1])


def test_a_registered_prefix_is_shared_then_cached_then_evicted_oldest_first():
  pool = pages_lib.PagePool(4, 2)  # pages 1, 2, 3
  tokens = [5, 6, 7, 8, 9]
  hashes = pages_lib.prefix_hashes(tokens, 2)
  assert len(hashes) == 2  # two full pages
  held = pool.allocate(3)
  pool.register(held[0], hashes[0])
  pool.register(held[1], hashes[1])
  assert pool.match(hashes) == held[:2]  # a second holder
  pool.release(held)  # the first request ends: the prefix pages stay held by the second
  assert pool.available == 1
  pool.release(held[:2])  # the second ends: cached, and counted as available
  assert pool.available == 3 and pool.used == 0
  assert pool.match(hashes[:1]) == held[:1]  # taken back from the cache
  pool.release(held[:1])
  fresh = pool.allocate(2)  # the free page, then the page cached longest ago
  assert fresh == [held[2], held[1]]
  assert pool.match(hashes) == [held[0]]  # the second page's prefix was evicted


def test_prefix_hashes_chain_through_the_pages_before():
  a = pages_lib.prefix_hashes([1, 2, 3, 4], 2)
  b = pages_lib.prefix_hashes([9, 9, 3, 4], 2)
  assert a[1] != b[1]  # the same page of tokens after another prefix is another prefix
  assert pages_lib.prefix_hashes([1, 2, 3], 2) == a[:1]
