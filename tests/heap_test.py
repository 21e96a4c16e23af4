"""The CLI's restart with a heap XLA:CPU's per-run temporaries do not page-fault back in."""

import subprocess
import sys

import pytest

from tests import helpers
from zoo import heap

# Runs a jitted step whose temporary (a [4096, 4096] float32 product that a second matmul
# reads: 64 MiB) outgrows
# glibc's mmap threshold, three times through zoo.cli.start; prints the heap setting the
# process ran with and the page faults of the third run.
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
  print(os.environ.get('MALLOC_ARENA_MAX'),
        resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)

cli.start(run)
'''


def _third_run(**env):
  clean = {k: v for k, v in helpers.cpu_env().items() if k not in heap.SETTINGS}
  result = subprocess.run([sys.executable, '-c', _STEPS], env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  arena, faults = result.stdout.split()
  return arena, int(faults)


@pytest.mark.skipif(not heap.wanted({'JAX_PLATFORMS': 'cpu'}), reason='not a glibc Linux')
def test_a_cpu_cli_restarts_with_a_heap_that_keeps_its_temporaries():
  assert _third_run() == ('1', pytest.approx(0, abs=500))
  arena, faults = _third_run(MALLOC_ARENA_MAX='8')  # the user's own setting: no restart
  assert arena == '8' and faults > 10_000  # 64 MiB in 4 KiB pages, faulted in again


@pytest.mark.parametrize('environ,devices,expected', [
    ({'JAX_PLATFORMS': 'cpu'}, [], True),
    ({'JAX_PLATFORMS': 'cpu'}, ['/dev/nvidia0'], True),
    ({'JAX_PLATFORMS': 'tpu,cpu'}, [], False),
    ({}, [], True),
    ({}, ['/dev/accel0'], False),
    ({'MALLOC_ARENA_MAX': '4'}, [], False),
])
def test_the_heap_is_tuned_only_where_xla_runs_on_cpus_and_the_user_chose_nothing(
    monkeypatch, environ, devices, expected):
  monkeypatch.setattr(sys, 'platform', 'linux')
  monkeypatch.setattr(heap, '_glibc', lambda: True)
  monkeypatch.setattr(heap.glob, 'glob', lambda pattern: [d for d in devices
                                                          if d.startswith(pattern[:9])])
  assert heap.wanted(environ) is expected
