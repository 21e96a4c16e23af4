"""The real train step, compiled ahead of time for a mesh of devices that need not be here:
simulated CPU devices (--plan_compile) or a TPU slice described by libtpu (--plan_topology).

What comes back is the compiler's: per-device memory and per-device FLOPs and HBM bytes
(cost_analysis). The memory is what XLA placed: memory_analysis's arguments, outputs and
code beside the temporaries of the compiler's own buffer assignment (read from its dump),
the bytes XLA:TPU checks against HBM (memory_analysis's temporaries are larger on TPU:
docs/contracts.md, Known problems). cost_analysis counts the body of the layer scan once, so
the FLOPs and bytes are corrected by compiling the same step with 1 and 2 unrolled layers (per
stack): cost(L layers) = cost(1) + (L - 1) x (cost(2) - cost(1)), or with a layer pattern of
p layers its repeats: cost(p) + (L / p - 1) x (cost(2p) - cost(p)); ring attention's hops
(mesh.context) are unrolled in those compiles for the same reason. Unrolled layers run no
pipeline (mesh.stage): the plan adds the bubble to the step time itself.
"""

import glob
import os
import re
import tempfile
import time

import flax.linen as nn
import jax
import numpy as np

from zoo import families
from zoo import objectives
from zoo import kernels
from zoo import progress
from zoo import run as run_lib
from zoo import sharding
from zoo.kernels import ring
from zoo.train import runtime


class DoesNotFit(Exception):
  """The TPU compiler ran out of HBM placing the step: `needed` bytes (its temporaries,
  arguments and outputs as far as it got: a lower bound) against `available`."""

  def __init__(self, needed, available):
    super().__init__(f'the TPU compiler needs at least {needed / 2**30:,.2f} GiB, '
                     f'more than the {available / 2**30:,.2f} GiB of HBM')
    self.needed, self.available = needed, available


class CompilerFailed(Exception):
  """The compiler stopped with an internal error on this program (its bug, not the
  model's: docs/contracts.md, Known problems); the message is its first line."""

  def __init__(self, error):
    first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
    super().__init__(f'the compiler failed with an internal error (a compiler bug; another '
                     f'mesh may compile): {first[:300]}')


def _exhausted(error):
  """(needed, available) bytes of an XLA out-of-HBM compile error, or None."""
  found = re.search(r'RESOURCE_EXHAUSTED.*?\(([\d.]+)G\) exceeds available HBM \(([\d.]+)G\)',
                    str(error), re.S)
  return tuple(float(v) * 2**30 for v in found.groups()) if found else None


def lower(run, mesh):
  """The resolved run's (zoo/run) jitted train step lowered for `mesh` with abstract state
  and batch (no memory)."""
  config = run.config
  parts = runtime.model_state(run, mesh)
  batch_sharding = sharding.batch_sharding(mesh)
  batch = objectives.abstract_batch(config, batch_sharding)
  teacher = (parts.teacher.shardings, parts.teacher.abstract) if parts.teacher else ()
  step = jax.jit(parts.train_step(config),
                 in_shardings=(parts.shardings, batch_sharding, *teacher[:1]),
                 out_shardings=(parts.shardings, sharding.replicated(mesh)),
                 donate_argnums=(0,))
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.rules(config)), kernels.target(
      mesh.devices.flat[0].platform):
    return step.lower(parts.abstract, batch, *teacher[1:])


def _cost(compiled):
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return np.array([cost.get('flops', 0.0), cost.get('bytes accessed', 0.0)])


def _unrolled_cost(run, mesh):
  """Per-device (flops, bytes) of the full depth, from 1- and 2-layer unrolled compiles
  (with model.moe.first_dense = k dense layers: k + 1 and k + 2, the dense ones counted
  once; with model.attention.pattern of p layers: p and 2p, each repeat's cost times the
  repeats, a tail of t layers as t / p of one)."""
  config, fields = run.config, run.family.LAYER_FIELDS
  dense = config.model.moe.first_dense if config.model.moe.num_experts else 0
  unit = len(config.model.attention.pattern) or 1

  def cost(layers):
    variant = config.copy_and_resolve_references()
    with variant.unlocked():
      variant.model.scan_layers = False
      for field, n in zip(fields, layers):
        variant.model[field] = n
    with ring.unrolled():  # every hop's block counted
      return _cost(lower(run_lib.resolve(variant), mesh).compile())

  base = cost([dense + unit] * len(fields))
  total = base.copy()
  for i, field in enumerate(fields):
    layers = [dense + unit] * len(fields)
    layers[i] = dense + 2 * unit
    total += (config.model[field] - dense - unit) / unit * (cost(layers) - base)
  return total


def memory_bytes(memory, temporaries=None):
  """A compiled program's memory_analysis() -> its per-device bytes by part and in total;
  `temporaries`: the buffer assignment's (compile_placed), else memory_analysis's."""
  parts = {
      'arguments': int(memory.argument_size_in_bytes),
      'outputs_not_aliased': int(memory.output_size_in_bytes - memory.alias_size_in_bytes),
      'temporaries': int(memory.temp_size_in_bytes if temporaries is None else temporaries),
      'code': int(memory.generated_code_size_in_bytes),
  }
  return {**parts, 'total': sum(parts.values())}


_TEMP = re.compile(r'^allocation \d+: size (\d+), preallocated-temp', re.M)


def compile_placed(lowered):
  """lowered.compile() -> (compiled, its temporaries' bytes as the compiler's buffer
  assignment placed them, or None where it wrote none: a cached executable)."""
  with tempfile.TemporaryDirectory() as dump:
    compiled = lowered.compile(compiler_options={'xla_dump_to': dump})
    found = glob.glob(os.path.join(dump, '*after_optimizations-buffer-assignment.txt'))
    if not found:
      return compiled, None
    with open(found[0], encoding='utf-8') as f:
      return compiled, sum(int(size) for size in _TEMP.findall(f.read()))


_DEFINITION = re.compile(r'^\s*(?:ROOT )?%?([\w.\-]+) = ([a-z0-9]+)\[', re.M)
_MATMUL = re.compile(r'= ([a-z0-9]+)\[[^\]]*\]\S* (?:dot|convolution)\(([^)]*)\)')
NARROW = ('s8', 'f8e4m3fn', 'f8e5m2')


def narrow_dots(hlo_text):
  """{'s8' or an fp8 type: count} of the compiled step's dot and convolution instructions
  that multiply int8 (accumulating in int32: XLA:CPU widens some operands to s32 first) or
  fp8 operands; a scanned layer's dots count once (they sit in the loop body)."""
  types = dict(_DEFINITION.findall(hlo_text))
  counts = {}
  for result, operands in _MATMUL.findall(hlo_text):
    names = [o.strip().split(' ')[-1].lstrip('%') for o in operands.split(',')[:2]]
    kinds = {types.get(n, '') for n in names}
    kind = 's8' if result == 's32' else kinds.pop() if len(kinds) == 1 else ''
    if kind in NARROW:
      counts[kind] = counts.get(kind, 0) + 1
  return counts


def compile_step(run, devices, scan_corrected_cost=True):
  """The resolved run's train step compiled -> dict: per-device memory from the compiler,
  FLOPs and HBM bytes per step, timings. scan_corrected_cost=False skips the two extra
  compiles (the cost then counts one layer); FLOPs None when those do not fit the chip."""
  config = run.config
  mesh = sharding.make_mesh(config.mesh, devices)
  device = mesh.devices.flat[0]
  mesh_text = sharding.describe(mesh.shape) or 'one device'
  print(f'compiling the train step (batch {config.train.batch_size} x '
        f'{config.data.seq_len}) for {mesh.size} {device.platform.upper()} devices '
        f'({device.device_kind}), mesh {mesh_text} (times: docs/performance.md, compile '
        'times)', flush=True)
  start = time.time()
  try:
    with progress.heartbeat('compiling the train step'):
      compiled, placed = compile_placed(lower(run, mesh))
  except jax.errors.JaxRuntimeError as e:
    exhausted = _exhausted(e)
    if exhausted is None and str(e).startswith('INTERNAL'):
      print(f'compile failed after {time.time() - start:.0f} s', flush=True)
      raise CompilerFailed(e) from None
    if exhausted is None:
      raise
    print(f'compiled in {time.time() - start:.0f} s: it does not fit', flush=True)
    raise DoesNotFit(*exhausted) from None
  compile_seconds = time.time() - start
  print(f'compiled in {compile_seconds:.0f} s', flush=True)
  memory = compiled.memory_analysis()
  corrected = config.model.scan_layers and scan_corrected_cost
  if corrected:
    start = time.time()
    unit = len(config.model.attention.pattern) or 1
    print(f'compiling {len(run.family.LAYER_FIELDS) + 1} more steps with {unit} '
          f'and {2 * unit} layers unrolled, to count the FLOPs of every layer', flush=True)
  flops, bytes_accessed = _cost(compiled)
  if corrected:
    try:
      with progress.heartbeat('compiling the unrolled steps'):
        flops, bytes_accessed = _unrolled_cost(run, mesh)
      print(f'compiled in {time.time() - start:.0f} s', flush=True)
    except jax.errors.JaxRuntimeError as e:  # unrolled layers can hold more than the scan
      if _exhausted(e) is None:
        raise
      print('the unrolled steps do not fit the chip: the step time takes the analytic FLOPs',
            flush=True)
      flops = None
  return {
      'narrow_dots': narrow_dots(compiled.as_text()),
      'per_device_bytes': memory_bytes(memory, placed),
      'flops_per_step_per_device': None if flops is None else float(flops),
      'hbm_bytes_per_step_per_device': float(bytes_accessed),
      'compile_seconds': round(compile_seconds, 1),
      'mesh_devices': int(mesh.size),
  }
