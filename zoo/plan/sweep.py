"""--plan_sweep: every factorization of a slice's chips into data x fsdp x tensor (x expert
for MoE, x context where ring attention is built for the shape, x stage where the layer
stacks pipeline), each with an analytic per-device memory and step-time estimate, sorted
by time;
--plan_sweep_compile=N compiles the N fastest that fit for the slice (`confirm`) and shows
the compiler's bytes beside the estimate.

The estimate (a ranking aid; compile the chosen mesh with --plan_topology to confirm):
- compute: training FLOPs per step (zoo/plan/analytic.py convention, plus what the remat
  policy recomputes: zoo/counting.py remat_flops_per_token) / (chips x peak bf16 FLOP/s),
  over (1 - the pipeline bubble) with stages;
- communication at the chip's ICI bandwidth, not overlapped with compute; across slices
  (NxNAME) the traffic of mesh.dcn_axis that crosses them at its DCN bandwidth (collectives
  done inside each slice first, then each chip's share exchanged between slices; stages
  at a slice's edge hand their activations over DCN), meshes whose dcn_axis the slices do
  not split skipped:
  fsdp: parameters all-gathered for forward and backward and gradients reduce-scattered,
  3 x P x (f-1)/f bytes (per tensor shard); data (and context, which holds whole
  parameters too): gradients all-reduced, 2 x P/(f t) x (r-1)/r over r = data x context;
  tensor: 4 all-reduces of the [B, L, D] activations per layer (2 forward, 2 backward),
  each 2 x bytes x (t-1)/t; expert: the MoE dispatch/combine traffic of
  analytic.moe_communication per MoE layer; context: ring attention's key/value traffic
  (analytic.ring_communication); stage: each pipeline iteration hands one microbatch's
  activations to the next stage and their gradient back, and a circular schedule moves the
  parameters to their stages and the gradients back (analytic.pipeline_plan); fsdp,
  data and tensor traffic are of the stage's own layers;
- memory: zoo/plan/memory.py's model (docs/plan.md "The memory model"), its constants
  fitted to the bytes the TPU compiler places over zoo/plan/calibration.py's grid
  (benchmarks/plan_calibration.py; the table in docs/performance.md).
"""

import math

import numpy as np

from zoo.run import checks as run_checks
from zoo import counting
from zoo import families
from zoo import run as run_lib
from zoo import sharding
from zoo.errors import ConfigError
from zoo.plan import analytic
from zoo.plan import compiled
from zoo.plan import memory
from zoo.plan import residuals
from zoo.plan import topology
from zoo.train import runtime


def factorizations(n, axes):
  """All assignments of sizes (products of n's factors) to `axes` whose product is n."""
  if len(axes) == 1:
    return [{axes[0]: n}]
  return [{axes[0]: d, **rest} for d in range(1, n + 1) if n % d == 0
          for rest in factorizations(n // d, axes[1:])]


def _invalid(config, sizes, slices, phase_batches=(), on='tpu'):
  """Why the zoo cannot build this mesh for the config (None: it can): the checks a run
  makes before it compiles (the dims the mesh splits, the attention kernel on the mesh's
  context axis, every phase's batch over the batch axes), the first failing one's message."""
  axis = config.mesh.dcn_axis
  if sizes[axis] % slices:
    return f'mesh.dcn_axis={axis}: {axis}={sizes[axis]} does not split over {slices} slices'
  if sizes['stage'] > 1 and config.model.attention.pattern:
    return 'a pipeline of patterned layers (model.attention.pattern) is not built'
  shards = sizes['data'] * sizes['fsdp'] * sizes['expert']
  for batch in phase_batches:
    if batch % shards:
      return f'a phase\'s batch of {batch} does not split over data x fsdp x expert = {shards}'
  try:
    sharding.check_divisible(config, sizes, families.get(config.model))
    runtime.attention_kernel(config, sizes['context'], on=on)
  except ConfigError as e:
    return str(e).split(';')[0]
  return None


def _hierarchical(nbytes, size, slices, reduce):
  """(ICI, DCN) bytes per chip of a collective over an axis of `size` devices that spans
  `slices` slices (size / slices in each): an all-reduce (reduce) of an nbytes buffer works
  inside the slice and then exchanges each chip's 1/(size/slices) share across slices; an
  all-gather of nbytes from shards of nbytes / size gathers the other slices' shards over
  DCN first."""
  inside = size // slices
  ici = nbytes * (inside - 1) / inside
  dcn = (nbytes / inside if reduce else nbytes / size * slices) * (slices - 1) / slices
  return ici, dcn


def estimate(config, sizes, chip, plan_result, boxed, slices=1, traced=None, layout=None):
  """(seconds per step, per-device bytes) for one mesh; with slices > 1 the traffic of
  mesh.dcn_axis that crosses slices goes at the chip's DCN bandwidth. layout: the sweep's
  Layout of `boxed` (made here when None)."""
  layout = layout or memory.Layout(config, boxed)
  m, t = config.model, config.train
  chips = math.prod(sizes.values())
  data, fsdp, tensor = sizes['data'], sizes['fsdp'], sizes['tensor']
  context, stages = sizes.get('context', 1), sizes.get('stage', 1)
  tokens = t.batch_size * config.data.seq_len
  tokens_per_device = tokens / (data * fsdp * sizes.get('expert', 1) * context)  # batch axes
  compute_bytes = np.dtype(m.dtype).itemsize
  params = plan_result['params_total'] / stages  # a stage's layers (tables counted in too)
  layers = families.total_layers(m) / stages

  flops = (plan_result['flops_per_token'] + plan_result['remat_flops_per_token']) * tokens
  seconds = topology.seconds(chip, flops / chips, analytic.quantized_share(plan_result),
                             m.quant.mode)
  dcn_axis = config.mesh.dcn_axis if slices > 1 else None
  comm, dcn = 0.0, 0.0  # bytes per chip over ICI, over DCN
  regrouped = 0.0  # circular: the parameters moved to their stages and their gradients
  if stages > 1:
    pipe = analytic.pipeline_plan(config, sizes, layout.stacked(sizes))
    seconds /= 1 - pipe['bubble']
    regrouped = pipe['regroup_bytes_per_step_per_device']
    handed = pipe['boundary_bytes_per_step_per_device'] + regrouped
    if dcn_axis == 'stage':  # the stages at a slice's edge hand over DCN; the rest wait
      dcn += handed
    else:
      comm += handed
  if fsdp > 1:  # gathered forward and backward, reduce-scattered: once per microbatch
    gathered = 3 * t.microbatches * params * compute_bytes / tensor
    ici, cross = _hierarchical(gathered, fsdp, slices if dcn_axis == 'fsdp' else 1, False)
    comm, dcn = comm + ici, dcn + cross
  replicas = data * context
  if replicas > 1:  # the slices split data, so data x context over slices
    ici, cross = _hierarchical(2 * params * 4 / (fsdp * tensor), replicas,
                               slices if dcn_axis == 'data' else 1, True)
    comm, dcn = comm + ici, dcn + cross
  if tensor > 1:
    comm += layers * 4 * 2 * tokens_per_device * m.d_model * compute_bytes * (tensor - 1) / tensor
  if m.moe.num_experts and sizes['expert'] > 1:
    moe = analytic.moe_communication(m, sizes['expert'])
    comm += moe['moe_layers'] * tokens_per_device * moe['bytes_per_token_per_layer_train']
  if context > 1:
    ring = analytic.ring_communication(m, context)
    comm += layers * tokens_per_device * ring['bytes_per_token_per_layer_train']
  seconds += comm / chip.ici_bandwidth + dcn / chip.dcn_bandwidth

  return seconds, memory.device_bytes(config, sizes, plan_result, boxed, chip.platform, traced,
                               layout)['total']


def sweep(run, tpu_slice):
  """The resolved run's (zoo/run) meshes on `tpu_slice` -> rows sorted by estimated step
  time (invalid meshes last, with the reason)."""
  config = run.config
  axes = ('data', 'fsdp', 'tensor')
  if config.model.moe.num_experts:
    axes += ('expert',)
  if not run_checks.context_unsupported(config.model, run.family):
    axes += ('context',)
  if config.model.scan_layers:
    axes += ('stage',)
  boxed = counting.abstract_params(config)
  base = analytic.plan(run, mesh_sizes={a: 1 for a in sharding.MESH_AXES}, boxed=boxed)
  rows, variants, traced, layout = [], {}, {}, memory.Layout(config, boxed)
  phase_batches = sorted({p.batch_size for p in run.phases[:-1]})
  for sizes in factorizations(tpu_slice.chips, axes):
    sizes = {a: sizes.get(a, 1) for a in sharding.MESH_AXES}
    for schedule in _pipeline_schedules(config, sizes['stage']):
      if schedule not in variants:
        variants[schedule] = _with_schedule(config, *schedule)
      meshed = variants[schedule]
      reason = _invalid(meshed, sizes, tpu_slice.slices, phase_batches, tpu_slice.chip.platform)
      row = {'mesh': sizes, 'pipeline_microbatches': schedule[0],
             'pipeline_repeats': schedule[1], 'invalid': reason}
      if not reason:
        context = sizes['context']
        if context not in traced:  # what the backward keeps does not hang on the schedule
          traced[context] = residuals.measure(config, tpu_slice.chip.platform, context)
        seconds, per_device = estimate(meshed, sizes, tpu_slice.chip, base, boxed,
                                       tpu_slice.slices, traced[context], layout)
        row.update(step_seconds=seconds, per_device_bytes=int(per_device),
                   fits=per_device <= tpu_slice.chip.hbm_bytes)
      rows.append(row)
  rows.sort(key=lambda r: (r['invalid'] is not None, r.get('step_seconds', 0)))
  return rows


def _pipeline_schedules(config, stages):
  """The (microbatches, repeats) the sweep tries for `stages`: the config's microbatch
  count, or with none set (0) one to eight per stage; fill-drain and 2 and 4 rounds of the
  circular schedule, or the config's rounds where it sets more than one (rows whose layers
  do not split are skipped with the reason); ((0, 1),) without stages."""
  m = config.model
  if stages == 1:
    return ((0, 1),)
  counts = ((m.pipeline_microbatches,) if m.pipeline_microbatches else
            tuple(stages * k for k in (1, 2, 4, 8)))
  repeats = (m.pipeline_repeats,) if m.pipeline_repeats > 1 else (1, 2, 4)
  return tuple((c, r) for r in repeats for c in counts)


def _with_schedule(config, microbatches, repeats):
  m = config.model
  if (microbatches, repeats) == (m.pipeline_microbatches, m.pipeline_repeats):
    return config
  variant = config.copy_and_resolve_references()
  with variant.unlocked():
    variant.model.update(pipeline_microbatches=microbatches, pipeline_repeats=repeats)
  return variant


CONFIRM_MARGIN = 1.5  # meshes estimated to need up to this x HBM are compiled too
CONFIRM_TRIES = 3  # at most this x N compiles for N meshes that fit


def confirm(run, rows, count, devices, chip, margin=CONFIRM_MARGIN):
  """Walks down the ranking (`rows`, the sweep's) compiling the resolved run's train step
  for each mesh on `devices` (the slice's) until `count` fit the compiler: every mesh the
  estimate puts within `margin` x HBM (the estimate can be off either way), at most
  CONFIRM_TRIES x count compiles. Each compiled row gets the compiler's per-device bytes
  (`compiled_bytes`) and whether they fit (`compiled_fits`); -> how many fit."""
  config = run.config
  fit = tried = 0
  for row in rows:
    if fit == count or tried == CONFIRM_TRIES * count:
      break
    if row['invalid'] or row['per_device_bytes'] > margin * chip.hbm_bytes:
      continue
    tried += 1
    meshed = _with_schedule(config, row['pipeline_microbatches'], row['pipeline_repeats'])
    meshed = meshed.copy_and_resolve_references()
    with meshed.unlocked():
      meshed.mesh.update(row['mesh'])
    try:
      total = compiled.compile_step(run_lib.resolve(meshed), devices, scan_corrected_cost=False)[
          'per_device_bytes']['total']
    except compiled.DoesNotFit as e:  # what the compiler had placed: at least this much
      row.update(compiled_bytes=int(e.needed), compiled_fits=False, compiled_at_least=True)
      continue
    except compiled.CompilerFailed as e:  # the next mesh down the ranking is tried
      row['compile_failed'] = str(e)
      continue
    row.update(compiled_bytes=int(total), compiled_fits=total <= chip.hbm_bytes)
    fit += row['compiled_fits']
  return fit


def table(rows, tpu_slice, top=20, everything=False):
  """The sweep as text, one mesh per line (with the compiler's bytes where compiled): the
  `top` fastest that fit and a line counting the rest, or with `everything` every mesh,
  those that cannot shard the shape with the reason."""
  fitting = [r for r in rows if not r['invalid'] and r['fits']]
  shown = rows if everything else [  # and every compiled mesh, in ranking order
      r for r in rows if r in fitting[:top] or 'compiled_bytes' in r or 'compile_failed' in r]
  hbm = tpu_slice.chip.hbm_bytes / 2**30
  confirmed = any('compiled_bytes' in r for r in rows)
  lines = [f'sweep on {tpu_slice.name} ({tpu_slice.chips} chips, {hbm:.0f} GiB HBM each); '
           'analytic estimate' + ('; compiled GiB from the TPU compiler' if confirmed else
                                  ', compile the best with --plan_sweep_compile=N to confirm'),
           ' '.join(f'{a:>7}' for a in sharding.MESH_AXES) + f' {"micro":>6} {"rounds":>6} '
           f'{"step s":>9} {"GiB/device":>11}  fits'
           + (f' {"compiled GiB":>12}' if confirmed else '')]
  for r in shown:
    mesh = ' '.join(f'{r["mesh"][a]:>7}' for a in sharding.MESH_AXES)
    piped = r['pipeline_microbatches']
    mesh += f' {piped or "-":>6} {r["pipeline_repeats"] if piped else "-":>6}'
    if r['invalid']:
      lines.append(f'{mesh}  skipped: {r["invalid"]}')
      continue
    line = (f'{mesh} {r["step_seconds"]:>9.3f} {r["per_device_bytes"] / 2**30:>11.2f}  '
            f'{"yes" if r["fits"] else "NO ":<4}')
    if 'compile_failed' in r:
      line += f' {"failed":>12}: {r["compile_failed"]}'
    elif 'compiled_bytes' in r:
      at_least = '>' if r.get('compiled_at_least') else ''
      line += (f' {at_least + format(r["compiled_bytes"] / 2**30, ".2f"):>12}' +
               ('' if r['compiled_fits'] else ' NO'))
    lines.append(line.rstrip())
  skipped = sum(bool(r['invalid']) for r in rows)
  more = len([r for r in fitting if r not in shown])
  too_big = len(rows) - len(fitting) - skipped
  if not everything and (more or too_big or skipped):
    lines.append(f'... {more} more fit (--plan_sweep_top=N), {too_big} do not fit, {skipped} '
                 'cannot shard the shape (--plan_sweep_all shows every mesh and why)')
  return '\n'.join(lines)
