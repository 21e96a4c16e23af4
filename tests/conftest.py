"""Every test sees 8 CPU devices and float32 matmuls at full precision.

XLA's CPU backend compiles at LLVM optimization level 0 (subprocesses too, through
helpers.cpu_env): the suite compiles far more than it runs, and level 0 takes about a
quarter off each compile (the whole suite on 2 cores: 1510 s before, 1149 s after). No
fast math runs at any level; results differ from level 2 at most by rounding (where LLVM
would have fused a multiply-add), inside every test's tolerance. XLA:CPU's older loop
emitters stand in for its MLIR fusion emitters (--xla_cpu_use_fusion_emitters=false), which
take longer to compile the same fusions: nine mesh runs of sharding_test on 2 cores, 123 s
with them and 93 s without; the steps themselves run as fast. Notebooks run on one device,
as a reader runs them, with the same compiler flags.

The tests that compile for TPUs ahead of time (plan mode, the sharding notebook's plans)
take the fixture low_effort: JAX's exec_time_optimization_effort -1, in the test's process
and the subprocesses it starts: about half the compile time (docs/performance.md, compile
times), with buffers placed apart from the default's and less rematerialised. A test of
what the compiler places (the memory model's calibration, remat's working set) compiles at
the default effort, plan mode's and a pod's own. CPU steps compiled at -1 run slower.

Compiled executables go to a persistent cache shared by the whole run, subprocesses
included (the CLI tests compile the same smoke steps many times): it halves their time.

The workers and the subprocesses start with the huge pages the CLI gives XLA:CPU's
temporaries, so no CLI subprocess restarts itself, and with the jax changes the CLI applies
(zoo/platform.py).
"""

import os
import shutil
import tempfile

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8'
                           ' --xla_backend_optimization_level=0'
                           ' --xla_cpu_use_fusion_emitters=false').strip()
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
_CACHE = None
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  _CACHE = os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='zoo-test-jax-')
# every process without a cap, the zoo's too (zoo/train/runtime.py reads this): a capped
# process scans the whole directory at each write, and capped and uncapped writers in one
# directory break the capped ones' writes (docs/contracts.md, Known problems)
os.environ.setdefault('JAX_COMPILATION_CACHE_MAX_SIZE', '-1')
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '0')

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from tests import tiers  # pylint: disable=g-import-not-at-top,wrong-import-position

from zoo import platform  # pylint: disable=g-import-not-at-top,wrong-import-position

if platform.TUNABLE not in os.environ.get('GLIBC_TUNABLES', ''):  # read by the workers' glibc
  os.environ['GLIBC_TUNABLES'] = platform.tuned(os.environ)['GLIBC_TUNABLES']
platform.apply()

jax.config.update('jax_default_matmul_precision', 'highest')
jax.config.update('jax_numpy_rank_promotion', 'raise')


# The longest files first, longest first: --dist loadfile hands each file to one worker,
# so a long file dealt last keeps one worker busy while the other waits (these ten are 2 to
# 7 minutes of worker time each, more than half the suite).
FIRST = ('tests/configs_test.py', 'tests/sharding_test.py', 'tests/launch_test.py',
         'tests/expert_parallel_test.py', 'tests/pod_test.py', 'tests/notebooks_test.py',
         'tests/plan_tpu_test.py', 'tests/infer/generate_test.py',
         'tests/plan_calibration_test.py', 'tests/train/finetune_test.py')


def pytest_collection_modifyitems(items):
  rank = lambda item: (FIRST.index(item.nodeid.split('::')[0])
                       if item.nodeid.split('::')[0] in FIRST else len(FIRST))
  items.sort(key=rank)  # stable: each file's tests keep their order
  slow = tiers.read()  # tests/slow.txt: the fast tier is -m "not slow"
  for item in items:
    if item.nodeid in slow:
      item.add_marker(pytest.mark.slow)


@pytest.fixture
def low_effort(monkeypatch):
  """TPU compiles at exec_time_optimization_effort -1 (above), in this process and in the
  subprocesses the test starts."""
  monkeypatch.setenv('JAX_EXEC_TIME_OPTIMIZATION_EFFORT', '-1')
  before = jax.config.jax_exec_time_optimization_effort
  jax.config.update('jax_exec_time_optimization_effort', -1.0)
  yield
  jax.config.update('jax_exec_time_optimization_effort', before)


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  if _CACHE:
    shutil.rmtree(_CACHE, ignore_errors=True)
