"""Everything the zoo does differently because of a platform, in one place. `import zoo`
runs `skip_absent_tpu()`; the command-line entry points (zoo/cli.py) call `apply()`, and so
does the test suite (tests/conftest.py), before anything compiles.

  apply()                    installs the two jax changes below (idempotent)
  skip_absent_tpu()          libtpu quiet where no TPU chip is attached
  unrolled_threefry_on_cpu() large random arrays hashed without a loop on CPUs (same bits)
  compiler_options(platform) the XLA options the zoo's jit passes (CPU: region analysis)
  cpu_dot_operands(on, *xs)  bfloat16 attention scores' operands widened on CPUs (an XLA:CPU
                             run-time failure)
  restart_tuned()            huge pages for XLA:CPU's temporaries (a glibc tunable, read at
                             process start, so the CLI re-executes itself once)

The other CPU-specific code is an attention layout, not a workaround: causal attention in
query blocks (zoo/kernels/causal.py). docs/performance.md has what each of these buys.
"""

import dataclasses
import glob
import os
import sys


def apply():
  """The jax changes the zoo's entry points run with."""
  skip_absent_tpu()
  unrolled_threefry_on_cpu()


# ----------------------------------------------------------------------- XLA options

# XLA:CPU's copy insertion, unless told to analyse regions, copies each donated buffer that
# an output takes while another use of its input is still to run: every AdamW moment and
# parameter, 32 MiB a step at zoo.bench's shape. An XLA:CPU option, passed per jit.
CPU_COMPILER_OPTIONS = {'xla_cpu_copy_insertion_use_region_analysis': True}


def compiler_options(platform):
  """-> the XLA options the zoo compiles with on `platform` ('cpu', 'tpu', 'gpu'), or None."""
  return CPU_COMPILER_OPTIONS if platform == 'cpu' else None


# ------------------------------------------------------------------- jax's backends

def _no_tpu_chip():
  raise RuntimeError('no TPU chip on this machine\'s PCI bus')


def skip_absent_tpu():
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


def unrolled_threefry_on_cpu():
  """jax lowers the Threefry hash behind jax.random on CPUs as a loop over its five round
  groups (a smaller program to compile), where TPU and GPU get the rounds unrolled. Each
  loop iteration writes its whole [N] state to memory, so XLA:CPU hashes a large array (a
  dropout mask) many times slower than unrolled (docs/performance.md). Arrays of at least UNROLLED_THREEFRY_MIN_SIZE words now get the unrolled
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


# ------------------------------------------------------------------------ XLA:CPU dots

def cpu_dot_operands(target, *operands):
  """The operands of a bfloat16 x bfloat16 -> float32 dot (preferred_element_type), widened
  to float32 where `target`, the platform the kernels are traced for (zoo/kernels
  `platform()`: the default backend, or what a plan traces for), is a CPU: XLA:CPU compiles
  some such dots (the attention scores of a batched decode step) to a thunk that fails at
  run time ('Unsupported element type for DotThunk::Execute: BF16 x BF16 = F32',
  docs/contracts.md "Known problems"). Exact: a bfloat16 value is a float32 one and the
  products are summed in float32 either way. For a GPU or TPU they are returned as they
  are."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if target != 'cpu':
    return operands
  return tuple(x.astype(jnp.float32) if x.dtype == jnp.bfloat16 else x for x in operands)


# ------------------------------------------------------------------------ huge pages

# XLA:CPU takes each run's temporaries as one block, which glibc serves with a fresh mmap and
# unmaps on free, so every step faults its working set back in 4 KiB at a time; with glibc's
# `hugetlb` tunable those mmaps get transparent huge pages, 2 MiB a fault. (Keeping the block
# in the heap instead faults nothing but fragments the heap: several times the RSS.) glibc
# reads tunables when a process starts, so the CLI entry points restart themselves once with
# the tunable added; not where the kernel has huge pages off, where jax would pick a GPU or
# TPU (JAX_PLATFORMS, else the device files), or where GLIBC_TUNABLES already names it.
# `python -m zoo.bench` prints the setting it ran with (docs/performance.md).

TUNABLE = 'glibc.malloc.hugetlb'
SETTING = f'{TUNABLE}=1'  # madvise(MADV_HUGEPAGE) on malloc's mmaps and heap
THP_ENABLED = '/sys/kernel/mm/transparent_hugepage/enabled'
ACCELERATOR_FILES = ('/dev/nvidia[0-9]*', '/dev/accel[0-9]*', '/dev/vfio/[0-9]*')


def wanted(environ):
  """Whether a process with this environment would run XLA on CPUs with 4 KiB pages where
  huge ones are there for the asking."""
  if sys.platform != 'linux' or _glibc() < (2, 35) or _thp_mode() not in ('always',
                                                                            'madvise'):
    return False
  if TUNABLE in environ.get('GLIBC_TUNABLES', ''):
    return False  # the user's (or an earlier restart's) choice
  platforms = environ.get('JAX_PLATFORMS', '')
  if platforms:
    return platforms.split(',')[0].strip() == 'cpu'
  return not any(glob.glob(pattern) for pattern in ACCELERATOR_FILES)


def tuned(environ):
  """environ with SETTING added to the user's GLIBC_TUNABLES, if any."""
  tunables = environ.get('GLIBC_TUNABLES')
  return {**environ, 'GLIBC_TUNABLES': f'{tunables}:{SETTING}' if tunables else SETTING}


def restart_tuned():
  """Re-executes this process (same interpreter, same argv) with SETTING, where wanted;
  returns only where not."""
  if wanted(os.environ):
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, tuned(os.environ))


def _glibc():
  """glibc's (major, minor), or (0, 0) for another C library."""
  try:
    name, version = os.confstr('CS_GNU_LIBC_VERSION').split()
    return tuple(int(v) for v in version.split('.')[:2]) if name == 'glibc' else (0, 0)
  except (ValueError, OSError, AttributeError):
    return (0, 0)


def _thp_mode():
  """The kernel's transparent huge page mode (the bracketed word), or None."""
  try:
    with open(THP_ENABLED, encoding='ascii') as f:
      text = f.read()
  except OSError:
    return None
  return text[text.find('[') + 1:text.find(']')] if '[' in text else None
