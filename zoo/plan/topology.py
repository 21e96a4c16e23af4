"""TPU slices by name (v4-128, v5p-1024, v5e-256, v6e-64), their chips, and their devices
for ahead-of-time compiles through libtpu on a machine without TPUs; and GPU machines by
name (h100-8, h200-64, b200-16: that many GPUs, 8 to a node joined by NVLink, the nodes
by InfiniBand), which plan mode estimates analytically (a GPU compile needs the GPUs:
--plan_compile on the machine itself).

Names follow Cloud TPU: v4 and v5p count TensorCores (2 per chip), v5e and v6e count
chips. Per-chip figures: bf16 and int8 peak FLOP/s (v5e, v5p, v6e run int8 at twice bf16's
rate, v4 at the same; none of them has fp8 units), HBM bytes and bandwidth, ICI bandwidth (all
links together) and DCN bandwidth (between slices), from the Cloud TPU system-architecture
pages (DCN: v5p's 50 Gbps per chip; v5e and v6e a host's NICs over its 8 chips, 2 x 100 and
4 x 200 Gbps; v4's is not given there and is taken as v5p's). GPUs, from NVIDIA's SXM data
sheets (dense, without sparsity): bf16 and fp8 peaks, HBM size and bandwidth, NVLink (all
links of one GPU; 900 GB/s on H100 and H200, 1.8 TB/s on B200) and one 400 Gb/s InfiniBand
NIC per GPU between nodes.
"""

import contextlib
import dataclasses
import math
import os
import re

from zoo.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Chip:
  generation: str  # as get_topology_desc spells it
  cores_per_chip: int  # in the slice name
  dims: int  # torus dimensions
  peak_flops: float  # bf16, per chip
  int8_flops: float  # int8 (model.quant.mode='int8'), per chip
  hbm_bytes: float
  hbm_bandwidth: float  # bytes/s
  ici_bandwidth: float  # bytes/s, per chip (a GPU: NVLink)
  dcn_bandwidth: float  # bytes/s, per chip (a GPU: InfiniBand between nodes)
  platform: str = 'tpu'
  fp8_flops: float = 0.0  # per chip; 0: no fp8 matmul units

CHIPS = {
    'v4': Chip('v4', 2, 3, 275e12, 275e12, 32 * 2**30, 1228e9, 300e9, 50e9 / 8),
    'v5p': Chip('v5p', 2, 3, 459e12, 918e12, 95 * 2**30, 2765e9, 600e9, 50e9 / 8),
    'v5e': Chip('v5e', 1, 2, 197e12, 394e12, 16 * 2**30, 819e9, 200e9, 200e9 / 8 / 8),
    'v6e': Chip('v6e', 1, 2, 918e12, 1836e12, 32 * 2**30, 1640e9, 448e9, 800e9 / 8 / 8),
    'h100': Chip('h100', 1, 1, 989e12, 1979e12, 80e9, 3.35e12, 900e9, 400e9 / 8, 'gpu',
                 1979e12),
    'h200': Chip('h200', 1, 1, 989e12, 1979e12, 141e9, 4.8e12, 900e9, 400e9 / 8, 'gpu',
                 1979e12),
    'b200': Chip('b200', 1, 1, 2250e12, 4500e12, 180e9, 8e12, 1800e9, 400e9 / 8, 'gpu',
                 4500e12),
}
GPUS_PER_NODE = 8
# device_kind (jax) prefix -> the chip, for plans compiled on the machine itself, the first
# that matches (v5p's devices say 'TPU v5'); their peaks are zoo/train/metrics.py's (a test
# holds the two tables together)
DEVICE_KINDS = (('NVIDIA H100', 'h100'), ('NVIDIA H200', 'h200'), ('NVIDIA GH200', 'h200'),
                ('NVIDIA B200', 'b200'), ('TPU v5 lite', 'v5e'), ('TPU v5e', 'v5e'),
                ('TPU v5', 'v5p'), ('TPU v4', 'v4'), ('TPU v6 lite', 'v6e'), ('TPU v6e', 'v6e'))
_ALIASES = {'v5litepod': 'v5e', 'v5lite': 'v5e'}


def seconds(chip, flops, quantized_share, mode):
  """Seconds for `flops` on one chip at peak, the `quantized_share` of them (model.quant's
  matmuls, counting.quantized_flops_per_token) at the int8 rate when mode is 'int8'; fp8
  is a ConfigError (no TPU here has fp8 matmul units: XLA would emulate it)."""
  if mode == 'fp8' and not chip.fp8_flops:
    raise ConfigError(f"model.quant.mode='fp8': TPU {chip.generation} has no fp8 matmul units "
                      "(fp8 peaks are GPUs': H100, H200, B200); use model.quant.mode='int8'")
  fast = quantized_share if mode in ('int8', 'fp8') else 0.0
  quantized = chip.fp8_flops if mode == 'fp8' else chip.int8_flops
  return flops * ((1 - fast) / chip.peak_flops + fast / quantized)


def chip_of(device):
  """The Chip of a jax device (by its device_kind), or None for one not listed (CPUs)."""
  return next((CHIPS[name] for prefix, name in DEVICE_KINDS
               if device.device_kind.startswith(prefix)), None)


@dataclasses.dataclass(frozen=True)
class Slice:
  name: str
  chip: Chip
  chips: int  # in all slices
  shape: tuple  # chips along each torus dimension of one slice
  slices: int = 1  # 'NxNAME': N slices joined over DCN (multi-slice)


def _torus(chips, dims):
  """Chips -> the slice's torus shape as Cloud TPU lays it out (v5p-128: 4x4x4, v4-32:
  2x2x4, v5e-8: 2x4)."""
  order = (0, 1, 2) + (2, 1, 0) * 8 if dims == 3 else (1, 0) * 8
  shape = [1] * dims
  for axis in order[:int(math.log2(chips))]:
    shape[axis] *= 2
  return tuple(shape)


def _gpus(name, generation, count):
  """'h100-64' -> 8 nodes of 8 GPUs, each node a 'slice' (NVLink inside, InfiniBand
  between)."""
  if count < 1 or (count > GPUS_PER_NODE and count % GPUS_PER_NODE) or (
      count < GPUS_PER_NODE and count & (count - 1)):
    raise ConfigError(f'--plan_topology={name!r}: {count} GPUs are not 1, 2, 4 or a whole '
                      f'number of {GPUS_PER_NODE}-GPU nodes; use one like {generation}-8 or '
                      f'{generation}-64')
  nodes = max(1, count // GPUS_PER_NODE)
  return Slice(name, CHIPS[generation], count, (count // nodes,), nodes)


def parse(name):
  """'v5p-128' (or '2xv5p-128', two slices over DCN), 'h100-8' -> Slice; a bad name is a
  ConfigError listing what works."""
  gpu = re.fullmatch(r'(h100|h200|b200)-(\d+)', name.strip().lower())
  if gpu:
    return _gpus(name, gpu.group(1), int(gpu.group(2)))
  match = re.fullmatch(r'(?:([1-9]\d*)x)?(v4|v5p|v5e|v5litepod|v5lite|v6e)-(\d+)',
                       name.strip().lower())
  examples = ('v4-8 … v4-4096, v5p-8 … v5p-12288, v5e-1 … v5e-256, v6e-1 … v6e-256, '
              'NxNAME for N slices, and h100-8, h200-64, b200-16 for GPUs')
  if not match:
    raise ConfigError(f'--plan_topology={name!r} is not a TPU slice name; use one like '
                      f'{examples}')
  slices = int(match.group(1) or 1)
  generation = _ALIASES.get(match.group(2), match.group(2))
  chip = CHIPS[generation]
  cores = int(match.group(3))
  chips = cores // chip.cores_per_chip
  if cores % chip.cores_per_chip or chips < 1 or chips & (chips - 1) or (
      chip.dims == 2 and chips > 256):
    raise ConfigError(f'--plan_topology={name!r}: no such {generation} slice (its number counts '
                      f'{"TensorCores, 2 per chip" if chip.cores_per_chip == 2 else "chips"}, '
                      f'a power of two); use one like {examples}')
  return Slice(name, chip, chips * slices, _torus(chips, chip.dims), slices)


def devices(tpu_slice):
  """The slice's TPU devices (one per chip), from libtpu's topology description."""
  if tpu_slice.chip.platform != 'tpu':
    raise ConfigError(f'--plan_topology={tpu_slice.name}: a GPU plan is analytic (compiling '
                      'for GPUs needs them); drop --plan_sweep_compile, or run --plan_compile '
                      'on the GPU machine')
  try:
    import libtpu  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    raise ConfigError("--plan_topology needs libtpu; pip install 'zoo[tpu]' (or "
                      "'jax[tpu]'), then rerun") from None
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  shape = tpu_slice.shape if tpu_slice.chip.dims == 3 else (*tpu_slice.shape, 1)
  host = tuple(min(s, b) for s, b in zip(shape, (2, 2, 1)))
  with _quiet_libtpu(tpu_slice):
    topology = topologies.get_topology_desc(
        platform='tpu', topology_name=f'{tpu_slice.chip.generation}:' +
        'x'.join(map(str, tpu_slice.shape)),
        chip_config_name='megacore' if tpu_slice.chip.cores_per_chip == 2 else 'default',
        chips_per_host_bounds=host, num_slices=tpu_slice.slices)
  return topology.devices


@contextlib.contextmanager
def _quiet_libtpu(tpu_slice):
  """libtpu looks for a TPU VM's metadata unless told the slice; told, it stays quiet. The
  variables are set only while it loads (child processes must not think they are on a VM)."""
  values = {'TPU_ACCELERATOR_TYPE': tpu_slice.name.split('x')[-1],
            'TPU_WORKER_HOSTNAMES': 'localhost',
            'TPU_SKIP_MDS_QUERY': '1',
            'ALLOW_MULTIPLE_LIBTPU_LOAD': '1'}  # plans in parallel processes
  saved = {k: os.environ.get(k) for k in values}
  os.environ.update({k: v for k, v in values.items() if saved[k] is None})
  try:
    yield
  finally:
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
