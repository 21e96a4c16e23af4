"""The CLI's restart with huge pages for XLA:CPU's per-run temporaries."""

import fnmatch
import subprocess
import sys

import pytest

from tests import helpers
from zoo import heap

# Runs a jitted step whose temporary (a [4096, 4096] float32 product that a second matmul
# reads: 64 MiB) outgrows glibc's mmap threshold, three times through zoo.cli.start; prints
# the tunables the process ran with and the page faults of the third run.
_STEPS = '''
import resource, sys
from zoo import cli

def run(overrides):
  import os, jax, jax.numpy as jnp
  f = jax.jit(lambda x, w: (jnp.tanh(x @ w) @ w.T).sum())
  x, w = jnp.ones((4096, 256)), jnp.ones((256, 4096))
  for _ in range(2):
    f(x, w).block_until_ready()
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x, w).block_until_ready()
  print(os.environ.get('GLIBC_TUNABLES', '-'),
        resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)

cli.start(run)
'''


def _third_run(**env):
  clean = {k: v for k, v in helpers.cpu_env().items() if k != 'GLIBC_TUNABLES'}
  result = subprocess.run([sys.executable, '-c', _STEPS], env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  tunables, faults = result.stdout.split()
  return tunables, int(faults)


@pytest.mark.skipif(not heap.wanted({'JAX_PLATFORMS': 'cpu'}),
                    reason='no glibc >= 2.35 with transparent huge pages here')
def test_a_cpu_cli_restarts_with_huge_pages_for_its_temporaries():
  tunables, faults = _third_run()
  assert tunables == heap.SETTING and faults < 4_000  # 32 huge pages where the kernel has them
  tunables, faults = _third_run(GLIBC_TUNABLES=f'{heap.TUNABLE}=0')  # the user's: kept
  assert tunables == f'{heap.TUNABLE}=0' and faults > 10_000  # 64 MiB in 4 KiB pages


@pytest.mark.parametrize('environ,devices,thp,expected', [
    ({'JAX_PLATFORMS': 'cpu'}, [], 'madvise', True),
    ({'JAX_PLATFORMS': 'cpu'}, ['/dev/nvidia0'], 'always', True),
    ({'JAX_PLATFORMS': 'cpu'}, [], 'never', False),
    ({'JAX_PLATFORMS': 'tpu,cpu'}, [], 'madvise', False),
    ({}, [], 'madvise', True),
    ({}, ['/dev/accel0'], 'madvise', False),
    ({'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=0'}, [], 'madvise', False),
    ({'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'}, [], 'madvise', True),
])
def test_huge_pages_are_asked_for_only_where_xla_runs_on_cpus_and_the_user_chose_none(
    monkeypatch, environ, devices, thp, expected):
  monkeypatch.setattr(sys, 'platform', 'linux')
  monkeypatch.setattr(heap, '_glibc', lambda: (2, 36))
  monkeypatch.setattr(heap, '_thp_mode', lambda: thp)
  monkeypatch.setattr(heap.glob, 'glob', lambda pattern: fnmatch.filter(devices, pattern))
  assert heap.wanted(environ) is expected


def test_the_tunable_joins_the_users_own():
  assert heap.tuned({'A': '1'}) == {'A': '1', 'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=1'}
  assert heap.tuned({'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'})['GLIBC_TUNABLES'] == (
      'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1')
