"""zoo: encoder, decoder and encoder-decoder transformers in Flax, on a jax.sharding mesh."""

import dataclasses
import os


def _no_tpu_chip():
  raise RuntimeError('no TPU chip on this machine\'s PCI bus')


def _skip_absent_tpu():
  """libtpu (the test and tpu extras bring it, for AOT plans) makes jax try a TPU backend on
  every machine; where no TPU chip is attached, libtpu prints INVALID_ARGUMENT errors about
  TPU_WORKER_HOSTNAMES before giving up, which read as failures in CI logs. There the TPU
  backend's factory fails at once, quietly (jax logs it at INFO), as it would without
  libtpu. A TPU VM (chips on its PCI bus), JAX_PLATFORMS and JAX_FORCE_TPU_INIT keep jax's
  own behaviour; AOT compiles for a TPU slice load libtpu on their own (zoo/plan/topology.py)."""
  if os.environ.get('JAX_PLATFORMS') or 'JAX_FORCE_TPU_INIT' in os.environ:
    return
  try:
    # pylint: disable=g-import-not-at-top,protected-access
    from jax._src import hardware_utils
    from jax._src import xla_bridge
    registration = xla_bridge._backend_factories.get('tpu')
    if (registration and not xla_bridge._backends and
        hardware_utils.num_available_tpu_chips_and_device_id()[0] == 0):
      xla_bridge._backend_factories['tpu'] = dataclasses.replace(
          registration, factory=_no_tpu_chip, fail_quietly=True)
  except (ImportError, AttributeError, TypeError):  # another jax: its own behaviour
    pass


_skip_absent_tpu()
