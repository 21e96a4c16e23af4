"""Every test sees 8 CPU devices and float32 matmuls at full precision."""

import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8').strip()
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

jax.config.update('jax_default_matmul_precision', 'highest')
jax.config.update('jax_numpy_rank_promotion', 'raise')

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def repo():
  return REPO
