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


UNROLLED_THREEFRY_MIN_SIZE = 1 << 16  # random words from which CPUs hash without a loop


def _unrolled_threefry_on_cpu():
  """jax lowers the Threefry hash behind jax.random on CPUs as a loop over its five round
  groups (a smaller program to compile), where TPU and GPU get the rounds unrolled. Each
  loop iteration writes its whole [N] state to memory, so XLA:CPU hashes a large array ~20x
  slower than unrolled (a [2048, 1024] dropout mask: 27 ms against 1.3; dropout was 6% of the
  bench step). Arrays of at least UNROLLED_THREEFRY_MIN_SIZE words now get the unrolled
  rounds on CPUs too; smaller ones (keys, fold_in) keep the loop, which compiles faster.
  The hash, so every random number, is the same either way."""
  try:
    # pylint: disable=g-import-not-at-top,protected-access
    from jax._src.random import threefry2x32 as threefry
    from jax.interpreters import mlir
    unrolled, rolled = (threefry._threefry2x32_lowering_rule,
                        threefry._threefry2x32_cpu_lowering_rule)
  except (ImportError, AttributeError):  # another jax: its own lowering
    return

  def lowering(ctx, *args):
    size = 1
    for dim in ctx.avals_out[0].shape:
      size *= dim
    return (unrolled if size >= UNROLLED_THREEFRY_MIN_SIZE else rolled)(ctx, *args)
  mlir.register_lowering(threefry.threefry2x32_p, lowering, platform='cpu')


_skip_absent_tpu()
_unrolled_threefry_on_cpu()
