"""--mode=plan: will this shape fit this mesh, and how fast? Answered before any hardware.

- analytic.py: counts, FLOPs, KV cache and per-device state bytes from shapes alone;
- compiled.py: the real train step compiled ahead of time (--plan_compile on simulated CPU
  devices, --plan_topology=v5p-128 for a TPU slice through libtpu): the compiler's memory
  and FLOPs;
- sweep.py: every mesh of a slice ranked by an analytic step-time estimate (--plan_sweep);
- residuals.py: what the backward pass keeps, traced (the sweep's memory model reads it);
- calibration.py: the memory model's grid of TPU compiles (benchmarks/plan_calibration.py);
- suggest.py: the sweep's answer in words (plan's run line, the preflight's slice);
- post.py: what a post-training objective adds (its reference, pairs, GRPO's sampling);
- topology.py: TPU slice names, chips and their speeds.
"""

import json

import jax

from zoo.train import runtime
from zoo import counting
from zoo import sharding
from zoo import storage
from zoo.errors import ConfigError
from zoo.plan import analytic
from zoo.plan import compiled as compiled_lib
from zoo.plan import post as post_lib
from zoo.plan import preflight
from zoo.plan import suggest
from zoo.plan import serving
from zoo.plan import sweep as sweep_lib
from zoo.plan import topology


def _topology(tpu_slice):
  return {'name': tpu_slice.name, 'chips': tpu_slice.chips, 'slices': tpu_slice.slices,
          'shape': list(tpu_slice.shape), 'hbm_bytes_per_chip': tpu_slice.chip.hbm_bytes,
          'peak_flops_per_chip': tpu_slice.chip.peak_flops}


def _estimated(run, result, tpu_slice):
  """The sweep's analytic step time and memory model for the configured mesh (a GPU plan)."""
  sizes = result['mesh']
  seconds, per_device = sweep_lib.estimate(run.config, sizes, tpu_slice.chip, result,
                                           counting.abstract_params(run.config),
                                           tpu_slice.slices)
  result.update(estimated_step_seconds=seconds, estimated_bytes_per_device=int(per_device),
                fits=per_device <= tpu_slice.chip.hbm_bytes, estimated_by='sweep')
  result['run']['estimated_seconds'] = seconds * result['run']['step_equivalents']


def _compiled(run, result, devices, tpu_slice):
  config = run.config
  sizes = sharding.mesh_shape(config.mesh, len(devices))
  sharding.check_divisible(config, sizes, run.family)
  # with stages the cost compiles (layers unrolled) would run no pipeline: the step time
  # takes the analytic FLOPs over 1 - the bubble, the memory is the compiler's; DeepSeek
  # Sparse Attention's blocks of queries are a loop whose body the compiler's cost counts
  # once: its step time takes the analytic FLOPs too
  pipelined = 'pipeline' in result
  sparse = bool(config.model.mla.kv_lora_rank and config.model.mla.index_heads)
  # the memory model's figure (zoo/plan/memory.py, the sweep's and the preflight's) for this
  # mesh, shown beside the compiler's
  platform = 'tpu' if tpu_slice else devices[0].platform
  result['estimated_bytes_per_device'] = int(preflight.estimate(run, sizes, platform)['total'])
  try:
    out = compiled_lib.compile_step(run, devices,
                                    scan_corrected_cost=not (pipelined or sparse))
  except compiled_lib.DoesNotFit as e:  # the answer plan mode is asked for
    result.update(mesh=sizes, fits=False, compile_error=str(e))
    return
  except compiled_lib.CompilerFailed as e:
    result.update(mesh=sizes, compile_failed=str(e))
    return
  analytic_flops = pipelined or sparse or out['flops_per_step_per_device'] is None
  result.update(compiled=True, mesh=sizes, compile_seconds=out['compile_seconds'],
                compiled_flops_per_step=None if analytic_flops else
                out['flops_per_step_per_device'] * len(devices),
                compiled_hbm_bytes_per_step_per_device=out['hbm_bytes_per_step_per_device'],
                compiled_narrow_dots=out['narrow_dots'])
  result['analytic_bytes_per_device'] = dict(result['per_device_bytes'])
  result['per_device_bytes'].update(out['per_device_bytes'])  # the compiler's total wins
  # the roofline on a slice, or on this machine's own chips where they are known (a GPU)
  chip = tpu_slice.chip if tpu_slice else topology.chip_of(devices[0])
  if chip:
    result.setdefault('topology', _topology(topology.Slice(
        f'{len(devices)} x {devices[0].device_kind}', chip, len(devices), (len(devices),))))
    seconds = lambda flops: topology.seconds(chip, flops, analytic.quantized_share(result),
                                             config.model.quant.mode)
    # a dropless mixture on an expert axis runs its ragged dots over receive buffers sized
    # for the worst routing, and the compiler counts every row (DeepSeek-V3: 37.8x)
    m = config.model
    buffered = bool(m.moe.num_experts and not m.moe.capacity_factor and
                    sizes.get('expert', 1) > 1)
    if pipelined or buffered or analytic_flops:
      result['ragged_buffers'] = buffered
      flops = ((result['flops_per_token'] + result['remat_flops_per_token']) *
               result['run']['tokens_per_step'] / len(devices))
      result['estimated_step_seconds'] = seconds(flops) / (
          1 - result['pipeline']['bubble'] if pipelined else 1)
    else:
      # Pallas kernels are custom calls the compiler's count leaves out: their attention
      # FLOPs are added from the analytic count
      uncounted = (counting.attention_flops_per_token(config) * result['run']['tokens_per_step']
                   if runtime.pallas_attention(config, sizes.get('context', 1),
                                               on=chip.platform)
                   else 0)
      result['pallas_attention_flops_per_step'] = uncounted
      result['estimated_step_seconds'] = max(
          seconds(out['flops_per_step_per_device']) +
          uncounted / len(devices) / chip.peak_flops,
          out['hbm_bytes_per_step_per_device'] / chip.hbm_bandwidth)
    result['fits'] = out['per_device_bytes']['total'] <= chip.hbm_bytes
    result['run']['estimated_seconds'] = (result['estimated_step_seconds'] *
                                          result['run']['step_equivalents'])


def run(resolved, json_path=None, compile_step=False, topology_name=None, sweep=False,
        sweep_compile=0, sweep_top=20, sweep_all=False):
  """Plans the resolved run (zoo/run), prints the report (and sweep table: its `sweep_top`
  fastest meshes that fit, or with `sweep_all` every mesh), optionally writes the JSON (every
  mesh); -> the dict. sweep_compile: compile down the sweep's ranking until this many
  meshes fit the compiler (sweep.confirm)."""
  config = resolved.config
  tpu_slice = topology.parse(topology_name) if topology_name else None
  if tpu_slice:  # a precision the chip cannot run is refused before anything compiles
    topology.seconds(tpu_slice.chip, 0, 0, config.model.quant.mode)
  if sweep and not tpu_slice:
    raise ConfigError('--plan_sweep needs --plan_topology=NAME for the chip count and speeds, '
                      'e.g. --plan_topology=v5p-128')
  if sweep_compile < 0 or (sweep_compile and not sweep):
    raise ConfigError(f'--plan_sweep_compile={sweep_compile} compiles that many of the '
                      "sweep's best meshes: it needs --plan_sweep and a count >= 0")
  runtime.size_label_head(config)  # as training sizes the head
  result = analytic.plan(resolved, tpu_slice.chips if tpu_slice else None)
  if config.train.objective != 'lm':
    result['post_training'] = post_lib.plan(config, result['mesh'], result)
  # the kernel the step would use on the planned platform
  result['attention_kernel'], why = runtime.attention_kernel(
      config, result['mesh'].get('context', 1),
      on=tpu_slice.chip.platform if tpu_slice else jax.default_backend())
  result["attention_kernel_why"] = (
      f"{why} (model.attention.kernel={config.model.attention.kernel!r})")
  if tpu_slice:
    result['topology'] = _topology(tpu_slice)
  if 'causal_lm' in resolved.family.OBJECTIVES and not config.model.num_labels:
    chip = tpu_slice.chip if tpu_slice else topology.chip_of(jax.devices()[0])
    result['serving'] = serving.plan(config, result, chip.hbm_bytes if chip else None)
  if sweep:
    result['sweep'] = sweep_lib.sweep(resolved, tpu_slice)
    if sweep_compile:
      sweep_lib.confirm(resolved, result['sweep'], sweep_compile, topology.devices(tpu_slice),
                        tpu_slice.chip)
    answer = suggest.best(resolved, tpu_slice, result['sweep'])
    if answer:  # the whole run at the fastest mesh that fits (the compiler's, if compiled)
      result['run'].update(estimated_seconds=answer.seconds,
                           estimated_mesh=answer.row['mesh'],
                           estimated=suggest.describe(answer))
  elif tpu_slice and tpu_slice.chip.platform == 'gpu':  # no GPU compiler without the GPUs
    _estimated(resolved, result, tpu_slice)
  elif tpu_slice or compile_step:
    devices = topology.devices(tpu_slice) if tpu_slice else jax.devices()
    _compiled(resolved, result, devices, tpu_slice)
  print('\n'.join([analytic.report(result), *post_lib.lines(result), *serving.lines(result)]),
        flush=True)
  if sweep:
    print(sweep_lib.table(result['sweep'], tpu_slice, sweep_top, sweep_all), flush=True)
  if json_path:
    storage.write_bytes(json_path, json.dumps(result, indent=2).encode())
  return result
