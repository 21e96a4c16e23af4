"""Huge pages for XLA:CPU's per-run temporaries. One executable run takes its temporaries as
one block (330 MiB for the bench's train step); glibc serves a block that large with a fresh
mmap and unmaps it on free, so every step faults its whole working set back in, 4 KiB at a
time: 92,000 page faults and 0.15 s of system time per 0.4 s bench step. With glibc's
`hugetlb` tunable its mmaps are transparent huge pages: 2 MiB a fault, 500 faults a step.

Keeping the block in the heap instead (one arena, no mmap'd chunks, no trimming) faults
nothing but lets the heap fragment: the default job peaked at 4.2 GB of RSS against 1.3.
glibc reads tunables when a process starts, so the CLI entry points restart themselves once
with the tunable added; not where the kernel has huge pages off, where jax would pick a GPU
or TPU (JAX_PLATFORMS, else the device files), or where GLIBC_TUNABLES already names it."""

import glob
import os
import sys

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
