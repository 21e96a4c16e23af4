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
- memory (device_bytes; docs/plan.md "The memory model"): params, optimizer state and
  gradients as the rules shard them, the update's float32 temporaries; what the backward
  keeps and one layer's working set, traced per batch row (zoo/plan/residuals.py: JAX's
  residuals of the loss with the config's remat policy and without, the attention kernel
  of the platform), the layer's with the copies of its largest weight fsdp gathers, a
  dropless expert-parallel dispatch's buffers and, over tensor, a MoE layer's [pairs, D]
  arrays whole on each tensor shard, or the loss's float32 logits and their
  gradient, whichever is larger; a pipeline's kept iterations, buffers and regrouped
  parameters (_pipeline_activations, analytic.pipeline_plan). Its constants are fitted
  to the TPU compiler's memory_analysis bytes over zoo/plan/calibration.py's grid
  (benchmarks/plan_calibration.py; docs/performance.md has the table against the bytes
  the compiler places, which are lower).
"""

import math

import flax.linen as nn
import jax
import numpy as np

from zoo.run import checks as run_checks
from zoo import counting
from zoo import families
from zoo import run as run_lib
from zoo import sharding
from zoo.errors import ConfigError
from zoo.families import loss as loss_lib
from zoo.models import layers as layers_lib
from zoo.plan import analytic
from zoo.plan import compiled
from zoo.plan import residuals
from zoo.plan import topology
from zoo.train import runtime
from zoo.train import state as state_lib


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
  layout = layout or Layout(config, boxed)
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

  return seconds, device_bytes(config, sizes, plan_result, boxed, chip.platform, traced,
                               layout)['total']


# XLA:GPU holds less of the traced activations than XLA:TPU, whose compiler the model is
# calibrated on: 0.72 x (llama3_8b, 2 layers, 16 x 4096) to 0.80 x (gpt2_xl, 8 x 1024) and
# about 0.85 x (gpt2_xl, 16 x 1024) on an H200 (docs/performance.md, GPU)
GPU_ACTIVATIONS = 0.8
# Fitted to the TPU compiler's memory_analysis bytes over the calibration grid
# (zoo/plan/calibration.py, docs/performance.md): the update's float32 temporaries, per
# gradient byte; the copies of a layer's largest weight fsdp gathers (forward, backward and
# its gradient before the reduce-scatter); the share of an expert-parallel dispatch's
# buffers live at the peak
UPDATE, GATHERED_COPIES, DISPATCH = 0.5, 3, 0.8
# and the [pairs, D] arrays of a MoE layer (zoo/models/moe.py) each tensor shard holds whole:
# the repeated input, sorted, the experts' output sorted and back, in the recomputed forward
# and as gradients, and the [pairs, D] index arrays XLA:TPU expands the row gathers and
# scatters to (qwen3-moe-no-expert and deepseek-v3-tensor in the grid)
PAIR_COPIES = 8


def device_bytes(config, sizes, plan_result, boxed, on='tpu', traced=None, layout=None):
  """Per-device bytes of the train step on the mesh `sizes`, with the attention kernel that
  runs on platform `on` -> {'params', 'optimizer_state', 'gradients', 'update' (its
  temporaries; with microbatches the accumulated gradients too), 'activations' (what the
  backward keeps and the largest working set), 'gathered' (the weights fsdp gathers for a
  layer, a circular pipeline's regrouped copy), 'teacher' (train.teacher's parameters),
  'total'}: the module docstring's memory
  model. traced: residuals.measure's for the mesh's context (the sweep's, computed once);
  layout: the sweep's Layout of `boxed` (made here when None)."""
  m, t = config.model, config.train
  data, fsdp, tensor = sizes['data'], sizes['fsdp'], sizes['tensor']
  expert, context, stages = (sizes.get(a, 1) for a in ('expert', 'context', 'stage'))
  compute_bytes = np.dtype(m.dtype).itemsize
  layout = layout or Layout(config, boxed)
  held = layout.held(sizes)
  # a device's rows of one microbatch at a time, of its L / context positions (a ring's
  # block of queries and keys), split over tensor
  traced = traced or residuals.measure(config, on, context)
  rows = t.batch_size / (data * fsdp * expert) / t.microbatches
  layer = traced['layer'] * rows / tensor  # one layer's working set
  if m.moe.num_experts and tensor > 1:
    # but the tensor shards each hold a MoE layer's [pairs, D] buffers whole (they split F)
    layer += rows * config.data.seq_len / context * _pair_values(m) * (
        1 - 1 / tensor) * compute_bytes
  if m.moe.num_experts and expert > 1 and not m.moe.capacity_factor:
    # and the buffers of a dropless expert-parallel dispatch (the trace has no expert axis)
    layer += DISPATCH * rows * config.data.seq_len / context * _mlp_working(
        m, expert, tensor) * compute_bytes
  if stages > 1:  # the logits are gone by the pipeline's backward pass, the peak
    activations = _pipeline_activations(config, sizes, rows, traced, layer)
    gathered = analytic.pipeline_plan(config, sizes, layout.stacked(sizes))[
        'regroup_bytes_per_step_per_device']
    if fsdp > 1:  # one layer's parameters and the vocabulary tables gathered whole
      params = plan_result['params_total'] / stages
      layers = families.total_layers(m) / stages
      tables = _params_along(boxed, 'vocab')
      gathered += ((params - tables) / layers + tables) * compute_bytes / tensor
    if m.moe.num_experts and fsdp > 1:
      # the stage's expert stacks, every layer's at once: fsdp gathers them for the experts'
      # shard_map (F split over tensor) and XLA hoists that gather out of the microbatch
      # loop (qwen3_235b_a22b's row in docs/performance.md)
      gathered += sum(int(np.prod(leaf.shape)) / _expert_split(leaf, spec, tensor, expert)
                      for leaf, spec in _with_axes(boxed) if 'expert' in spec
                      ) / stages * compute_bytes
  else:
    gathered = (GATHERED_COPIES * _largest_layer_weight(boxed, tensor, expert) *
                compute_bytes if fsdp > 1 else 0.0)
    # the float32 logits and their gradient: the working set of the loss's backward
    length = families.loss_length(config)
    logits = (rows * (loss_lib.chunk_len(config, length) or length / context) *
              m.vocab_size / tensor * 4 * 2)
    # the peak: a layer's backward with its gathered weights, or the loss's
    activations = traced['kept'] * rows / tensor + max(layer, logits - gathered)
  if on == 'gpu':
    activations *= GPU_ACTIVATIONS
  update = held['gradients'] * (UPDATE + (t.microbatches > 1))
  out = {'params': held['params'], 'optimizer_state': held['optimizer_state'],
         'gradients': held['gradients'], 'update': update, 'activations': activations,
         'gathered': gathered, 'teacher': _teacher_bytes(config, sizes)}
  return {**out, 'total': sum(out.values())}


class Layout:
  """The parameters' bytes per device on a mesh as the config's rules, optimizer and LoRA
  split them (analytic.state_bytes, and a pipeline stage's stacks), each mesh's counted
  once: a sweep asks for a mesh's once for every pipeline schedule it tries."""

  def __init__(self, config, boxed):
    self.config, self.boxed, self._seen = config, boxed, {}

  def held(self, sizes):
    """{'params', 'optimizer_state', 'gradients'} bytes per device on the mesh `sizes`."""
    c = self.config
    return self._once('held', sizes, lambda: analytic.state_bytes(
        self.boxed, sharding.rules(c), sizes, c.optim,
        state_lib.trainable(c.train.lora.rank, nn.unbox(self.boxed)))[1])

  def stacked(self, sizes):
    """analytic.stacked_param_bytes on the mesh `sizes`."""
    return self._once('stacked', sizes, lambda: analytic.stacked_param_bytes(
        self.boxed, sharding.rules(self.config), sizes))

  def _once(self, what, sizes, make):
    key = (what, tuple(sorted(sizes.items())))
    if key not in self._seen:
      self._seen[key] = make()
    return self._seen[key]


def _teacher_bytes(config, sizes):
  """train.teacher's parameters per device (its forward's activations come and go before
  the student's backward: not counted)."""
  if not config.train.teacher.workdir:
    return 0
  return analytic.teacher_plan(config, sizes)['params_bytes_per_device']


def _largest_layer_weight(boxed, tensor, expert):
  """Elements of a layer's largest weight on one device once fsdp has gathered it (split
  over tensor; an expert stack as the experts' shard_map takes it, `_expert_split`)."""
  return max((int(np.prod(leaf.shape[1:])) / (
      _expert_split(leaf, spec, tensor, expert) if 'expert' in spec else tensor)
              for leaf, spec in _with_axes(boxed) if spec[:1] == ('layers',)), default=0)


def _expert_split(leaf, spec, tensor, expert):
  """The devices an expert stack is split over in the experts' shard_map: expert, and
  tensor where it divides the stack's F (zoo/models/moe.py); fsdp gathers the rest."""
  f = leaf.shape[spec.index('mlp')] if 'mlp' in spec else 1
  return expert * (tensor if f % tensor == 0 else 1)


def _pipeline_activations(config, sizes, rows, traced, layer):
  """Bytes of a pipeline's activations (zoo/models/pipeline.py) on the mesh `sizes`' stages
  (not the config's: the sweep's rows) for `rows` per device (a microbatch's):
  every one of the R M + S - 1 iterations keeps what the stage's layers keep for its
  microbatch (remat: the bubble's iterations too; `traced`'s layers); one microbatch's
  working set of a layer (`layer`, the rows') at a time; the [M, b, L, D] buffers (the
  stack's input and output, the circular round's); and, outside the stack, about four
  float32 [tokens, D] arrays (the stack's input and output and their gradients, as the
  compiler holds them: calibrated on llama3_70b and llama3_8b, docs/performance.md). The
  logits are not counted: their memory is free again before the pipeline's backward pass,
  where the peak is (turning the loss's chunking off moves it by 0.08 GiB)."""
  m = config.model
  stages, tensor = sizes.get('stage', 1), sizes['tensor']
  microbatches = m.pipeline_microbatches or stages
  rounds = m.pipeline_repeats * microbatches
  kept = rows * traced['layers'] / stages / tensor * (rounds + stages - 1) / rounds
  row_values = config.data.seq_len / sizes.get('context', 1) * m.d_model  # a row's [L, D]
  buffers = (2 + (m.pipeline_repeats > 1)) * rows * row_values / tensor * np.dtype(
      m.dtype).itemsize
  outside = rows * row_values * 4 * 4
  return kept + layer / microbatches + buffers + outside


def _mlp_working(m, expert_shards, tensor):
  """Values per token the busiest feed-forward holds while its layer runs (forward or the
  rematerialised backward): a dense MLP's 2 F/t; a MoE layer's buffers, twice (the
  recomputed forward and its gradients): dropless, the expert-parallel receive buffer
  holds X x k rows per token (room for every shard's pairs: zoo/models/moe.py), capacity
  k x cf slots; each row D in, D out and the experts' F-wide intermediates (3 gated)."""
  moe = m.moe
  if not moe.num_experts:
    return 2 * m.mlp_dim / tensor
  rows = moe.top_k * (moe.capacity_factor or expert_shards)
  hidden = (3 if m.activation in layers_lib.GATED else 2) * (moe.expert_mlp_dim or m.mlp_dim)
  return 2 * rows * (2 * m.d_model + hidden / tensor)


def _pair_values(m):
  """Values per token in a MoE layer's [pairs, D] arrays: k pairs (k x cf slots with
  capacity), PAIR_COPIES arrays of them."""
  return PAIR_COPIES * m.moe.top_k * (m.moe.capacity_factor or 1) * m.d_model


def _with_axes(boxed):
  """(parameter, its logical axes as a tuple) for each leaf of the boxed parameters."""
  specs = jax.tree.leaves(nn.get_partition_spec(boxed),
                          is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  return [(leaf, tuple(spec)) for leaf, spec in zip(jax.tree.leaves(nn.unbox(boxed)), specs)]


def _params_along(boxed, axis):
  """Parameters of the leaves with logical axis `axis` (e.g. 'vocab': the embedding and an
  untied head)."""
  return sum(int(np.prod(leaf.shape)) for leaf, spec in _with_axes(boxed) if axis in spec)


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
  rows, variants, traced, layout = [], {}, {}, Layout(config, boxed)
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
    row.update(compiled_bytes=int(total), compiled_fits=total <= chip.hbm_bytes)
    fit += row['compiled_fits']
  return fit


def table(rows, tpu_slice, top=20, everything=False):
  """The sweep as text, one mesh per line (with the compiler's bytes where compiled): the
  `top` fastest that fit and a line counting the rest, or with `everything` every mesh,
  those that cannot shard the shape with the reason."""
  fitting = [r for r in rows if not r['invalid'] and r['fits']]
  shown = rows if everything else [  # and every compiled mesh, in ranking order
      r for r in rows if r in fitting[:top] or 'compiled_bytes' in r]
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
    if 'compiled_bytes' in r:
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
