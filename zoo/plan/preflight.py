"""Before anything is written or compiled: does the train step fit in this machine's memory?

The estimate is the memory model (zoo/plan/memory.py: parameters, optimizer state,
gradients, the update's temporaries, activations, fsdp's gathered layer; the sweep's too)
for the configured mesh, with the attention kernel that runs here. It is compared with
what one device has: an accelerator's memory limit, or on CPUs the host memory available
now (MemAvailable, within a cgroup's limit) shared by this process's CPU devices. A step
that cannot fit is a ConfigError (one line, exit 2) with what to do instead; the check is
an estimate, so train.preflight=False skips it for a run known to fit. The launcher runs it
before a training run builds anything (after a bad mesh or config has had its own line).
"""

import os

import jax

from zoo import counting
from zoo import run as run_lib
from zoo.errors import ConfigError
from zoo.plan import analytic
from zoo.plan import suggest
from zoo.plan import memory

GIB = 2**30


def check(run, devices=None):
  """A ConfigError when the run's (zoo/run) train step's estimated bytes per device on the
  configured mesh of `devices` (default: all) exceed what one of this process's devices
  has; with phases, the step of the most tokens is estimated."""
  config = run.config
  if not config.train.preflight:
    return
  devices = devices or jax.devices()
  local = [d for d in devices if d.process_index == jax.process_index()]
  available, where = available_bytes(local[0], local)
  if available is None:
    return  # a device that reports no limit (some plugins): nothing to compare with
  sizes = analytic.mesh_sizes_for(config.mesh, len(devices))
  largest = max(reversed(range(len(run.phases))),  # the final on a tie
                key=lambda k: run.phases[k].tokens_per_step)
  shaped = run if largest == len(run.phases) - 1 else run_lib.resolve(run.phase_configs[largest])
  needed = estimate(shaped, sizes, local[0].platform)
  if needed['total'] <= available:
    return
  parts = ', '.join(f'{name.replace("_", " ")} {needed[name] / GIB:.2f}'
                    for name in ('params', 'optimizer_state', 'gradients', 'update',
                                 'activations', 'gathered', 'teacher') if needed[name])
  answer = suggest.smallest(run)
  slice_ = (f'the smallest {suggest.GENERATION} slice it fits by the sweep\'s estimate is '
            f'{suggest.describe(answer)} (--mode=plan --plan_topology='
            f'{answer.tpu_slice.name} --plan_sweep)' if answer else
            f'it fits no {suggest.GENERATION} slice up to {suggest.GENERATION}-'
            f'{suggest.LARGEST} by the sweep\'s estimate')
  raise ConfigError(
      f'the train step needs ~{needed["total"] / GIB:.1f} GiB per device ({parts} GiB) and '
      f'{where} has {available / GIB:.1f} GiB available: this is a job for a bigger machine '
      f"or a pod; {slice_}; run the config's :smoke variant here, or lower "
      'train.batch_size, raise train.microbatches, set model.remat=full or add devices to '
      'the mesh (train.preflight=False skips this estimate)')


def estimate(run, sizes, platform):
  """The resolved run's train step's per-device bytes on the mesh `sizes` on `platform`,
  by part."""
  boxed = counting.abstract_params(run.config)
  base = analytic.plan(run, mesh_sizes=sizes, boxed=boxed)
  return memory.device_bytes(run.config, sizes, base, boxed, on=platform)


def available_bytes(device, local_devices):
  """-> (bytes one device can use, which memory that is), or (None, None) if unknown."""
  if device.platform != 'cpu':
    limit = (device.memory_stats() or {}).get('bytes_limit')
    return (limit, f'one {device.device_kind}') if limit else (None, None)
  count = len(local_devices)
  return host_available() / count, (f'this host ({count} CPU device'
                                    f'{"s" if count > 1 else ""})')


def host_available():
  """Bytes of host memory a new allocation can get now: MemAvailable, capped by a cgroup v2
  memory limit (a container's) less what the cgroup already uses."""
  available = _meminfo_available()
  try:
    with open('/sys/fs/cgroup/memory.max', encoding='ascii') as f:
      limit = f.read().strip()
    with open('/sys/fs/cgroup/memory.current', encoding='ascii') as f:
      used = int(f.read())
    if limit != 'max':
      available = min(available, int(limit) - used)
  except (OSError, ValueError):
    pass
  return available


def _meminfo_available():
  try:
    with open('/proc/meminfo', encoding='ascii') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
