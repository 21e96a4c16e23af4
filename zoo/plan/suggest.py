"""The sweep's answer in words, the one source of every slice the zoo suggests: plan mode's
run line, the preflight's refusal (the smallest v5p slice the run fits on) and the plans
the docs quote (tests/docs_test.py recomputes them) all read it from here.

An answer is the sweep's fastest mesh that fits (zoo/plan/sweep.py, the analytic estimate)
and the whole run at its step time.
"""

import dataclasses

from zoo import sharding
from zoo.plan import analytic
from zoo.plan import sweep as sweep_lib
from zoo.plan import topology

GENERATION = 'v5p'  # the slices the preflight suggests
LARGEST = 8192  # v5p's largest slice in TensorCores (4,096 chips) the search tries


@dataclasses.dataclass(frozen=True)
class Answer:
  tpu_slice: topology.Slice
  row: dict  # the sweep's row: mesh, pipeline_microbatches, pipeline_repeats, step_seconds
  seconds: float  # the whole run at the row's step time
  microbatches: int  # train.microbatches (gradient accumulation)


def best(run, tpu_slice, rows=None):
  """The resolved run's answer on `tpu_slice` (from the sweep's `rows`, swept here when
  None): its fastest mesh that fits, by the compiler where --plan_sweep_compile compiled
  some (sweep.confirm), else by the estimate; None when none fits."""
  rows = sweep_lib.sweep(run, tpu_slice) if rows is None else rows
  if any('compiled_bytes' in r for r in rows):
    fitting = [r for r in rows if r.get('compiled_fits')]
  else:
    fitting = [r for r in rows if not r['invalid'] and r['fits'] and 'compile_failed' not in r]
  if not fitting:
    return None
  return Answer(tpu_slice, fitting[0],
                fitting[0]['step_seconds'] * analytic.step_equivalents(run),
                run.config.train.microbatches)


def smallest(run):
  """The answer on the smallest GENERATION slice where a mesh fits (slices too small to hold
  the parameters, optimizer state and gradients at all are not swept), or None up to
  LARGEST."""
  chip = topology.CHIPS[GENERATION]
  whole = analytic.plan(run, mesh_sizes={a: 1 for a in sharding.MESH_AXES})['per_device_bytes']
  static = sum(whole[part] for part in ('params', 'optimizer_state', 'gradients'))
  cores = 4 * chip.cores_per_chip  # the smallest v5p slice: 4 chips
  while static * chip.cores_per_chip > chip.hbm_bytes * cores and cores < LARGEST:
    cores *= 2  # more than a chip's HBM each, however it is split
  while cores <= LARGEST:
    answer = best(run, topology.parse(f'{GENERATION}-{cores}'))
    if answer:
      return answer
    cores *= 2
  return None


def describe(answer):
  """-> 'v5p-32, fsdp 8 x stage 2 (16 pipeline microbatches, 2 rounds): 2.1 hours' (after
  the slice, 'N microbatches, ' with gradient accumulation)."""
  row = answer.row
  accumulated = f'{answer.microbatches} microbatches, ' if answer.microbatches > 1 else ''
  pipeline = (f' ({row["pipeline_microbatches"]} pipeline microbatches, '
              f'{row["pipeline_repeats"]} round{"s" if row["pipeline_repeats"] > 1 else ""})'
              if row['pipeline_microbatches'] else '')
  mesh = sharding.describe(row['mesh']) or 'one device'
  return (f'{answer.tpu_slice.name}, {accumulated}{mesh}{pipeline}: '
          f'{analytic.duration(answer.seconds)}')
