"""zoo/platform.py: the CLI's restart with huge pages for XLA:CPU's per-run temporaries;
libtpu quiet where no TPU is attached; large random arrays hashed without a loop on CPUs,
to the same bits; and none of it done by `import zoo`."""

import fnmatch
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax._src import hardware_utils
from jax._src import xla_bridge
from jax._src.random import threefry2x32
from jax.interpreters import mlir

from tests import helpers
from zoo import platform

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


@pytest.mark.skipif(not platform.wanted({'JAX_PLATFORMS': 'cpu'}),
                    reason='no glibc >= 2.35 with transparent huge pages here')
def test_a_cpu_cli_restarts_with_huge_pages_for_its_temporaries():
  tunables, faults = _third_run()
  assert tunables == platform.SETTING and faults < 4_000  # not 64 MiB in 4 KiB pages (16,384)
  tunables, _ = _third_run(GLIBC_TUNABLES=f'{platform.TUNABLE}=0')  # the user's: kept
  assert tunables == f'{platform.TUNABLE}=0'


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
  monkeypatch.setattr(platform, '_glibc', lambda: (2, 36))
  monkeypatch.setattr(platform, '_thp_mode', lambda: thp)
  monkeypatch.setattr(platform.glob, 'glob', lambda pattern: fnmatch.filter(devices, pattern))
  assert platform.wanted(environ) is expected


def test_the_tunable_joins_the_users_own():
  assert platform.tuned({'A': '1'}) == {'A': '1', 'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=1'}
  assert platform.tuned({'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2'})['GLIBC_TUNABLES'] == (
      'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1')


def test_the_cli_starts_without_libtpu_errors_where_no_tpu_is_attached(tmp_path):
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}  # jax picks
  result = subprocess.run(
      [sys.executable, '-m', 'zoo.launch', f'--config={helpers.config_file("gpt_shakespeare")}',
       '--mode=plan'], env=dict(env, PYTHONPATH=helpers.REPO), cwd=tmp_path,
      stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'parameters' in result.stdout
  assert 'TPU_WORKER_HOSTNAMES' not in result.stderr and 'INVALID_ARGUMENT' not in result.stderr


@pytest.mark.parametrize('chips', [0, 4])
def test_the_tpu_backend_is_skipped_only_where_no_chip_is_attached(monkeypatch, chips):
  registration = xla_bridge._backend_factories['tpu']  # pylint: disable=protected-access
  monkeypatch.delenv('JAX_PLATFORMS', raising=False)
  monkeypatch.setattr(xla_bridge, '_backends', {})
  monkeypatch.setattr(xla_bridge, '_backend_factories', {'tpu': registration})
  monkeypatch.setattr(hardware_utils, 'num_available_tpu_chips_and_device_id',
                      lambda: (chips, None))
  platform.skip_absent_tpu()
  kept = xla_bridge._backend_factories['tpu']  # pylint: disable=protected-access
  if chips:  # a TPU VM: jax's own factory, libtpu finds its chips
    assert kept is registration
  else:
    assert kept.fail_quietly and kept.priority == registration.priority
    with pytest.raises(RuntimeError, match='no TPU chip'):
      kept.factory()


def test_large_random_arrays_hash_without_a_loop_on_cpus_to_the_same_bits():
  key = jax.random.PRNGKey(3)
  big, small = (512, 256), (64,)  # 131072 words: unrolled; 64: jax's loop
  bits = lambda shape: jax.jit(lambda k: jax.random.bits(k, shape))
  assert 'while' not in bits(big).lower(key).as_text()
  assert 'while' in bits(small).lower(key).as_text()
  got = np.asarray(bits(big)(key))
  try:  # jax's own CPU lowering: the loop, at every size
    mlir.register_lowering(threefry2x32.threefry2x32_p,
                           threefry2x32._threefry2x32_cpu_lowering_rule, platform='cpu')
    looped = bits(big)
    assert 'while' in looped.lower(key).as_text()
    want = np.asarray(looped(key))
  finally:
    platform.unrolled_threefry_on_cpu()
  np.testing.assert_array_equal(got, want)


def test_importing_the_zoo_quiets_an_absent_tpu_and_changes_nothing_else_in_jax():
  program = (
      'import jax, zoo, zoo.config, zoo.train.loop, zoo.infer.generate\n'
      'from jax._src import xla_bridge\n'
      'text = jax.jit(lambda k: jax.random.bits(k, (512, 256))).lower(jax.random.PRNGKey(0))'
      '.as_text()\n'
      "print('while' in text, '_no_tpu_chip' in repr(xla_bridge._backend_factories['tpu']))\n"
      'print(jax.devices()[0].platform)\n')
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}  # jax picks
  result = subprocess.run([sys.executable, '-c', program], env=dict(env, PYTHONPATH=helpers.REPO),
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  # jax's loop; the TPU factory that gives up quietly (no chip here); the CPU
  assert result.stdout.split() == ['True', 'True', 'cpu']
  assert 'TPU_WORKER_HOSTNAMES' not in result.stderr and 'INVALID_ARGUMENT' not in result.stderr
