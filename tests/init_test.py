"""Starting the zoo on a machine without a TPU: libtpu (the test extra) stays quiet; on CPUs
large random arrays hash without a loop, to the same bits."""

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

import zoo
from tests import helpers


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
  zoo._skip_absent_tpu()  # pylint: disable=protected-access
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
    zoo._unrolled_threefry_on_cpu()  # pylint: disable=protected-access
  np.testing.assert_array_equal(got, want)
