"""The analytic plan: parameter counts, FLOPs, KV-cache and per-device bytes, nothing built.

Shapes come from `jax.eval_shape`, so a 540B-parameter config plans on a laptop in seconds.
Conventions:
- flops_per_token: training (forward + backward), the convention of zoo/counting.py (also
  the training loop's MFU): 6 x (active parameters except input embedding tables) + 6 x
  layers x seq_len x heads x head_dim (causal attention counted as half of the full 12 x ...).
- kv_cache_bytes_per_token: keys and values a generated token adds to the self-attention of
  every decoder layer without a window, at the compute dtype (decoders and T5's decoder; not
  encoders). A local layer (model.attention.window: Gemma's local layers, Mistral's) keeps
  its window in a ring instead, a chunked one (Llama 4) its chunk: kv_cache_local's bytes
  per sequence, whatever the length;
  kv_cache_bytes_per_sequence: {context: [bytes with the ring, bytes if every layer kept
  every token]}.
- per_device_bytes: params, optimizer state (AdamW: two float32 moments; Adafactor: row
  and column statistics per layer, or one moment, + momentum) and gradients, each leaf
  split over the mesh axes its logical axes map to; a dimension that does not divide its
  mesh axes stays replicated (and is listed in `not_divisible`).
- mesh: config.mesh with -1 resolved against this machine's device count; the product need
  not match the devices here, so a pod's mesh plans on a laptop.
"""

import math

import flax.linen as nn
import jax
import numpy as np

from zoo import config as config_lib
from zoo import counting
from zoo import families
from zoo import sharding
from zoo.families import decoder
from zoo.models import delta_net
from zoo.models import dims
from zoo.models import mla
from zoo.models import transformer
from zoo import muon
from zoo import optim
from zoo.train import state as state_lib
from zoo.train import teacher as teacher_lib


def mesh_sizes_for(mesh_config, num_devices):
  sizes = {axis: mesh_config.get(axis, 1) for axis in sharding.MESH_AXES}
  known = math.prod(s for s in sizes.values() if s != -1)
  return {axis: (max(num_devices // known, 1) if s == -1 else s) for axis, s in sizes.items()}


def _shard_factor(shape, logical_axes, rules, sizes, not_divisible, name):
  mesh_axes = nn.logical_to_mesh_axes(logical_axes, rules)
  factor = 1
  for dim, axes in zip(shape, mesh_axes):
    axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
    split = math.prod(sizes.get(a, 1) for a in axes)  # an axis not given: 1
    if dim % split:
      not_divisible.append(f'{name}: dim {dim} over {"x".join(axes)}={split}')
    else:
      factor *= split
  return factor


def moe_communication(m, expert_shards):
  """Bytes a token moves over the `expert` mesh axis per MoE layer (zoo/models/moe.py).

  capacity: two all-to-alls (dispatch, combine) of its k slots of D values, padded by the
  capacity factor: 2 k cf D bytes x (X-1)/X. dropless: two ragged all-to-alls of its k
  (token, choice) pairs, unpadded: 2 k D bytes x (X-1)/X under uniform routing (the pairs
  whose expert lives on the token's own shard stay). Training moves the same again backward.
  """
  moe, x = m.moe, expert_shards
  value_bytes = np.dtype(m.dtype).itemsize
  slots = moe.top_k * (moe.capacity_factor or 1.0)
  forward = 2 * slots * m.d_model * value_bytes * (x - 1) / x
  layers = (families.total_layers(m) - moe.first_dense * len(families.get(m).LAYER_FIELDS)
            ) // moe.every
  out = {'dispatch': 'capacity' if moe.capacity_factor else 'dropless',
         'num_experts': moe.num_experts, 'top_k': moe.top_k, 'moe_layers': layers,
         'expert_shards': x, 'bytes_per_token_per_layer_forward': int(forward),
         'bytes_per_token_per_layer_train': int(2 * forward)}
  if moe.num_groups:
    out['group_limit'] = group_limit(moe, x)
  return out


def group_limit(moe, expert_shards):
  """What DeepSeek-V3's group limit does to the all-to-all. Experts lie contiguous on the
  expert shards and in the groups, so when G divides X each group is a block of X/G shards
  (put a block on one host and a token's pairs reach at most top_groups hosts, where
  without the limit they may reach min(top_k, G)); when X divides G a shard holds whole
  groups and a token reaches at most top_groups shards. The bytes stay top_k pairs' (each
  pair is sent: no per-host deduplication)."""
  x, groups, kept = expert_shards, moe.num_groups, moe.top_groups
  out = {'groups': groups, 'top_groups': kept, 'shards_per_group': x // groups,
         'groups_reached_at_most': kept,
         'groups_reached_at_most_without_limit': min(moe.top_k, groups)}
  shards = min(moe.top_k, x)
  if groups % x == 0:
    shards = min(shards, kept)
  out.update(shards_reached_at_most=shards)
  return out


def ring_communication(m, context_shards):
  """Bytes a token's device sends round the `context` ring per attention layer
  (zoo/kernels/ring.py): its keys and values (G kv heads x K) travel n-1 hops, plus their
  slot and segment id; backward, the rematerialised forward passes them again and their
  gradients travel back as well (about 3 x the forward in all)."""
  n = context_shards
  kv = 2 * dims.kv_heads(m) * dims.head_dim(m) * np.dtype(m.dtype).itemsize + 8
  forward = kv * (n - 1)
  return {'context_shards': n, 'bytes_per_token_per_layer_forward': int(forward),
          'bytes_per_token_per_layer_train': int(3 * forward)}


def regroup_share(stages, repeats):
  """The share of the layer groups a circular pipeline moves to another stage each step:
  group g lies on stage g // repeats (contiguous blocks) and runs on stage g % stages."""
  groups = range(stages * repeats)
  return sum(g // repeats != g % stages for g in groups) / len(groups)


def pipeline_plan(config, sizes, param_bytes_per_device):
  """The pipeline on sizes['stage'] stages (zoo/models/pipeline.py), fill-drain or circular
  (model.pipeline_repeats rounds): its bubble, the activations each device hands across a
  stage boundary per training step (one microbatch's [b, L, D], its sequence split over
  `context`, forward and its gradient back, every iteration, per stack; a later stack's
  microbatches carry the earlier stack's output too, as T5's decoder does the encoder's;
  the rows' ids and masks are not counted) and, circular, the stacked parameters moved to
  the stages that run them and their gradients back (regroup_share of
  param_bytes_per_device, the stacked parameters' bytes per device, each way)."""
  m, t = config.model, config.train
  stages, repeats = sizes['stage'], m.pipeline_repeats
  microbatches = m.pipeline_microbatches or stages
  iterations = repeats * microbatches + stages - 1
  shards = sizes['data'] * sizes['fsdp'] * sizes.get('expert', 1)
  rows = t.batch_size / t.microbatches / microbatches / shards
  stacks = len(families.get(m).LAYER_FIELDS)
  handed_per_iteration = 2 * stacks - 1  # each stack's activations + what later ones carry
  length = config.data.seq_len / sizes.get('context', 1)  # a device's chunk of the sequence
  handed = rows * length * m.d_model / sizes['tensor'] * np.dtype(m.dtype).itemsize
  return {'stages': stages, 'microbatches': microbatches, 'repeats': repeats,
          'bubble': (stages - 1) / iterations,
          'layers_per_stage': families.total_layers(m) // stages,
          'boundary_bytes_per_step_per_device': int(2 * handed_per_iteration * iterations *
                                                    t.microbatches * handed),
          'regroup_bytes_per_step_per_device': int(
              2 * regroup_share(stages, repeats) * param_bytes_per_device)}


def state_bytes(boxed, rules, sizes, optim_config, trainable=None):
  """-> (parameter count, per-device bytes of params, optimizer state and gradients, the
  dims that do not divide their mesh axes, per-device optimizer-state bytes of each
  optimizer (float32 state, split like its parameter)). trainable: a tree of bools like the
  parameters (train.lora), None = all: the others keep no optimizer state or gradient."""
  specs = nn.get_partition_spec(boxed)
  leaves = jax.tree_util.tree_flatten_with_path(nn.unbox(boxed))[0]
  trains = ([True] * len(leaves) if trainable is None else jax.tree.leaves(trainable))
  spec_leaves = jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  total, param_bytes, grad_bytes, not_divisible = 0, 0.0, 0.0, []
  by_optimizer = {name: 0.0 for name in config_lib.OPTIMIZERS}
  as_named = {}
  for optimizer in config_lib.OPTIMIZERS:
    as_named[optimizer] = optim_config.copy_and_resolve_references()
    with as_named[optimizer].unlocked():
      as_named[optimizer].name = optimizer
  for (path, leaf), spec, trains_leaf in zip(leaves, spec_leaves, trains):
    name = '/'.join(str(getattr(k, 'key', k)) for k in path)
    size = int(np.prod(leaf.shape))
    total += size
    factor = _shard_factor(leaf.shape, tuple(spec), rules, sizes, not_divisible, name)
    param_bytes += size * np.dtype(leaf.dtype).itemsize / factor
    if not trains_leaf:
      continue
    grad_bytes += size * np.dtype(leaf.dtype).itemsize / factor
    stacked = len(spec) > 0 and spec[0] == 'layers'
    matrix = muon.matrix_dims(path, spec)
    for optimizer, o in as_named.items():
      by_optimizer[optimizer] += 4 * optim.state_floats(o, leaf.shape, stacked,
                                                        matrix) / factor
  per_device = {
      'params': int(param_bytes),
      'optimizer_state': int(by_optimizer[optim_config.name]),
      'gradients': int(grad_bytes),
  }
  per_device['total'] = sum(per_device.values())
  return total, per_device, not_divisible, {k: int(v) for k, v in by_optimizer.items()}


def muon_plan(boxed, rules, sizes, muon_config):
  """Muon's Newton-Schulz per training step and device (zoo/muon.py): its FLOPs (each
  device's share: a matrix's work splits over the mesh axes it is placed on and repeats
  over the others), the matrices orthogonalized whole on a device (their shards moved to
  the layer/expert dim) and those left sharded (the iteration's products then need XLA's
  collectives), and the largest float32 stack slice one device holds (the iteration keeps
  about four)."""
  specs = jax.tree.leaves(nn.get_partition_spec(boxed),
                          is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  leaves = jax.tree_util.tree_flatten_with_path(nn.unbox(boxed))[0]
  flops, whole, sharded, largest = 0.0, 0, 0, 0
  for (path, leaf), spec in zip(leaves, specs):
    matrix = muon.matrix_dims(path, spec)
    if matrix is None:
      continue
    mesh_spec = [None if leaf.shape[i] % _split(a, sizes) else a
                 for i, a in enumerate(nn.logical_to_mesh_axes(tuple(spec), rules))]
    placed = muon.placement(leaf.shape, matrix, mesh_spec, sizes, muon_config.gather)
    split = math.prod(_split(a, sizes) for a in placed)
    flops += muon.ns_flops(leaf.shape, matrix, muon_config.ns_steps) / split
    count = muon.stack_shape(leaf.shape, matrix)[0]
    if placed[1] is None and placed[2] is None:
      whole += count
    else:
      sharded += count
    largest = max(largest, 4 * int(np.prod(leaf.shape)) // split)
  return {'flops_per_step_per_device': flops, 'matrices_whole_on_a_device': whole,
          'matrices_sharded': sharded, 'largest_stack_bytes_per_device': largest}


def teacher_plan(config, sizes):
  """train.teacher: its parameters, laid out by the student's rules on the same mesh (it
  keeps no optimizer state or gradients)."""
  teacher_config = teacher_lib.config_for(config)
  boxed = counting.abstract_params(teacher_config)
  total, held, _, _ = state_bytes(boxed, sharding.rules(config), sizes, teacher_config.optim)
  return {'params': total, 'params_bytes_per_device': held['params'],
          # its forward pass: a third of training's FLOPs (zoo/counting.py's convention)
          'forward_flops_per_token': counting.flops_per_token(teacher_config, boxed) / 3}


def _split(axes, sizes):
  axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
  return math.prod(sizes.get(a, 1) for a in axes)


def stacked_param_bytes(boxed, rules, sizes):
  """Per-device bytes of the parameters stacked on the layer axis (what a pipeline's
  stages hold; the embedding tables are not)."""
  specs = jax.tree.leaves(nn.get_partition_spec(boxed),
                          is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  held = 0.0
  for leaf, spec in zip(jax.tree.leaves(nn.unbox(boxed)), specs):
    if len(spec) > 0 and spec[0] == 'layers':
      held += (int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize /
               _shard_factor(leaf.shape, tuple(spec), rules, sizes, [], ''))
  return int(held)


def step_equivalents(run):
  """The whole run in steps of the final shape, by tokens: what a time estimate of the
  final shape's step is multiplied by."""
  return run.total_tokens / (run.config.train.batch_size * run.config.data.seq_len)


def run_plan(run, sizes, per_device):
  """The whole run: tokens per step and in all; with train.microbatches under fsdp, the
  collectives accumulation repeats (parameters all-gathered forward and backward, gradients
  reduce-scattered, once per microbatch)."""
  config = run.config
  t = config.train
  tokens_per_step = t.batch_size * config.data.seq_len
  out = {'tokens_per_step': tokens_per_step, 'steps': t.steps,
         'tokens': run.total_tokens, 'microbatches': t.microbatches,
         'rows_per_microbatch': t.batch_size // t.microbatches,
         'step_equivalents': step_equivalents(run)}
  if len(run.phases) > 1:
    out['phases'] = [{'steps': [p.first, p.last], 'batch_size': p.batch_size,
                      'seq_len': p.seq_len, 'tokens': p.tokens} for p in run.phases]
  if run.span_lengths:  # T5 reads raw pieces longer than its inputs
    raw, inputs, targets = run.span_lengths
    out['span_corruption'] = {'raw_tokens': raw, 'inputs': inputs, 'targets': targets,
                              'corpus_tokens_per_step': t.batch_size * raw}
  fsdp = sizes.get('fsdp', 1)
  if fsdp > 1:
    gathered = per_device['params'] * (fsdp - 1)  # the other shards' bytes, per device
    out['fsdp_collective_bytes_per_step_per_device'] = 3 * t.microbatches * gathered
    out['fsdp_collective_bytes_per_step_per_device_unaccumulated'] = 3 * gathered
  return out


def plan(run, num_devices=None, mesh_sizes=None, boxed=None):
  """The resolved run's (zoo/run) plan as a dict (see the module docstring for each
  field's convention)."""
  config = run.config
  m = config.model
  num_devices = jax.device_count() if num_devices is None else num_devices
  sizes = mesh_sizes or mesh_sizes_for(config.mesh, num_devices)
  boxed = counting.abstract_params(config) if boxed is None else boxed
  trainable = state_lib.trainable(config, nn.unbox(boxed))
  total, per_device, not_divisible, by_optimizer = state_bytes(
      boxed, sharding.rules(config), sizes, config.optim, trainable)
  active = counting.active_params(boxed, m.moe)

  result = {
      'config': {'family': m.family, 'd_model': m.d_model,
                 'num_layers': families.total_layers(m),
                 'vocab_size': m.vocab_size, 'seq_len': config.data.seq_len},
      'params_total': total,
      'params_active': active,
      **({'params_active_without_input_embedding': active - m.vocab_size * m.d_model}
         if m.moe.num_experts and not m.tie_embeddings else {}),
      **({'params_mtp': counting.mtp_params(boxed)} if m.mtp.depth else {}),
      **({'vision': counting.image_counts(config, boxed)}
         if counting.image_counts(config, boxed) else {}),
      'flops_per_token': counting.flops_per_token(config, boxed),
      'remat_flops_per_token': counting.remat_flops_per_token(config, boxed),
      'flops_convention': counting.convention(config),
      **({'quant': m.quant.mode,
          'quantized_flops_per_token': counting.quantized_flops_per_token(config, boxed)}
         if m.quant.mode != 'none' else {}),
      'mesh': sizes,
      'per_device_bytes': per_device,
      'optimizer': config.optim.name,
      'optimizer_state_bytes_per_device': by_optimizer,
      'run': run_plan(run, sizes, per_device),
      'compiled': False,
      'not_divisible': not_divisible,
  }
  if trainable is not None:  # against full fine-tuning: the model without adapters
    plain = config.copy_and_resolve_references()
    plain.train.lora.rank = 0
    full = state_bytes(counting.abstract_params(plain), sharding.rules(config), sizes,
                       config.optim)[1]
    result['lora'] = {
        'params_trainable': sum(int(np.prod(x.shape)) for x, t in zip(
            jax.tree.leaves(nn.unbox(boxed)), jax.tree.leaves(trainable)) if t),
        'bytes_saved_per_device': full['total'] - per_device['total']}
  if config.optim.name == 'muon':
    result['muon'] = muon_plan(boxed, sharding.rules(config), sizes, config.optim.muon)
  if config.train.teacher.workdir:
    result['teacher'] = teacher_plan(config, sizes)
    per_device.pop('total')
    per_device['teacher'] = result['teacher']['params_bytes_per_device']
    per_device['total'] = sum(per_device.values())
  if m.moe.num_experts:
    result['moe'] = moe_communication(m, sizes.get('expert', 1))
  if sizes.get('context', 1) > 1:
    result['context'] = ring_communication(m, sizes['context'])
  if sizes.get('stage', 1) > 1:
    result['pipeline'] = pipeline_plan(config, sizes, stacked_param_bytes(
        boxed, sharding.rules(config), sizes))
  cached_layers = families.get(m).kv_cache_layers(m)
  if cached_layers:
    result.update(kv_cache(config, cached_layers))
  return result


def kv_cache(config, cached_layers):
  """The KV-cache fields of the plan (module docstring): local and chunked layers apart."""
  m = config.model
  per_token = 2 * dims.kv_heads(m) * dims.head_dim(m) * np.dtype(m.dtype).itemsize
  if m.mla.kv_lora_rank:  # the latent and the rotary key (zoo/models/mla.py)
    per_token = mla.cache_values_per_token(m) * np.dtype(m.dtype).itemsize
  rings = {}  # kind -> (layers, the tokens its ring keeps)
  for kind, span in (('local', m.attention.window), ('chunked', m.attention.chunk)):
    if span:
      layers = (sum(transformer.layer_kind(m, i) == kind for i in range(cached_layers))
                if m.attention.pattern else cached_layers)
      rings.update({kind: (layers, span)} if layers else {})
  ringed = sum(n for n, _ in rings.values())
  out = {'kv_cache_bytes_per_token': (cached_layers - ringed) * per_token}
  recurrent = decoder.delta_layers(m)
  if recurrent:  # Gated DeltaNet layers: a fixed-size state, at any length
    d = m.delta
    out['recurrent_state'] = {'layers': recurrent, 'bytes_per_sequence': recurrent * (
        delta_net.state_bytes(d.key_heads, d.value_heads, d.key_dim, d.value_dim,
                              d.conv_width, np.dtype(m.dtype).itemsize))}
  if ringed:
    kind = next(iter(rings)) if len(rings) == 1 else 'local and chunked'
    out['kv_cache_local'] = {'layers': ringed, 'window': max(w for _, w in rings.values()),
                             'kind': kind,
                             'bytes_per_sequence': sum(n * w for n, w in rings.values()) *
                                                   per_token}
    contexts = sorted({config.data.seq_len, m.max_length} |
                      {n for n in (32_768, 131_072) if n <= m.max_length})
    out['kv_cache_bytes_per_sequence'] = {
        n: [(cached_layers - ringed) * n * per_token +
            sum(k * min(w, n) for k, w in rings.values()) * per_token,
            cached_layers * n * per_token] for n in contexts}
  return out


def quantized_share(result):
  """The share of a plan's step FLOPs (with remat's) that model.quant runs quantized; 0
  without it."""
  return result.get('quantized_flops_per_token', 0) / (result['flops_per_token'] +
                                                       result['remat_flops_per_token'])


def report(result):
  """A human-readable summary of `plan()`'s dict."""
  lines = [*_model_lines(result), *_split_lines(result), *_kv_cache_lines(result),
           *_compiled_lines(result)]
  states = result['optimizer_state_bytes_per_device']
  lines.append(f"optimizer state ({result['optimizer']}): {_size(states[result['optimizer']])} "
               'per device; ' + ', '.join(f'{name} would keep {_size(b)}' for name, b in
                                          states.items() if name != result['optimizer']))
  lines.extend(_run_lines(result))
  if result['not_divisible']:
    lines.append('replicated because a dim does not divide its mesh axes: ' +
                 '; '.join(result['not_divisible']))
  return '\n'.join(lines)


COMPILED_PARTS = ('arguments', 'outputs_not_aliased', 'temporaries', 'code')  # compiled.py's


def _per_device_line(result):
  """Bytes per device by part, as the analytic model counts them (a compiled plan's
  compiler parts and total are on its `compiled train step` line)."""
  parts = result.get('analytic_bytes_per_device', result['per_device_bytes'])
  return ('per device (analytic): ' + ', '.join(f'{k} {_gib(v)}' for k, v in parts.items()) +
          ('; the compiler\'s on the compiled train step line'
           if 'analytic_bytes_per_device' in result else ''))


def _model_lines(result):
  """Parameters, FLOPs, LoRA, the mesh, the kernel, bytes per device."""
  lines = [
      f"{result['config']['family']}: {result['params_total']:,} parameters "
      f"({result['params_active']:,} active per token" + (
          f"; {result['params_active_without_input_embedding']:,} without the input embedding, "
          "as the MoE model cards count" if 'params_active_without_input_embedding' in result
          else '') +
      (f"; {result['params_mtp']:,} in the multi-token prediction modules"
       if 'params_mtp' in result else '') + ')',
      f"training FLOPs/token: {result['flops_per_token']:.4g} ({result['flops_convention']})" +
      (f"; {result['quantized_flops_per_token']:.4g} of them (with remat's) in "
       f"{result['quant']}" if 'quant' in result else ''),
      *([f"image tower: {result['vision']['params']:,} of the parameters, "
         f"{result['vision']['flops_per_image']:.4g} training FLOPs per image (in the "
         "FLOPs/token where the task's rows hold images)"] if 'vision' in result else []),
      *([f"LoRA: {result['lora']['params_trainable']:,} parameters train; optimizer state "
         f"and gradients {_gib(result['lora']['bytes_saved_per_device'])} per device less than "
         'full fine-tuning'] if 'lora' in result else []),
      f"mesh: {result['mesh']}",
      *([f"attention kernel: {result['attention_kernel']} ({result['attention_kernel_why']})"]
        if 'attention_kernel' in result else []),
      _per_device_line(result),
  ]
  if 'teacher' in result:
    lines.append(f"teacher (train.teacher): {result['teacher']['params']:,} parameters, "
                 f"{_gib(result['teacher']['params_bytes_per_device'])} per device, its "
                 f"forward {result['teacher']['forward_flops_per_token']:.4g} FLOPs/token")
  if 'muon' in result:
    u = result['muon']
    lines.append(f"muon: Newton-Schulz {u['flops_per_step_per_device']:.4g} FLOPs/step per "
                 f"device; {u['matrices_whole_on_a_device']:,} matrices whole on a device, "
                 f"{u['matrices_sharded']:,} sharded; largest stack "
                 f"{_gib(u['largest_stack_bytes_per_device'])} per device")
  return lines


def _split_lines(result):
  """What the experts, a split sequence and a pipeline move between devices."""
  lines = []
  if 'moe' in result:
    moe = result['moe']
    lines.append(f"experts: {moe['num_experts']} (top-{moe['top_k']}, {moe['dispatch']}) in "
                 f"{moe['moe_layers']} layers over {moe['expert_shards']} expert shards: "
                 f"{moe['bytes_per_token_per_layer_train']:,} bytes/token/layer over the "
                 'expert axis per training step')
    if 'group_limit' in moe:
      g = moe['group_limit']
      lines.append(f"group limit: a token's {moe['top_k']} pairs land in at most "
                   f"{g['groups_reached_at_most']} of {g['groups']} groups (without it "
                   f"{g['groups_reached_at_most_without_limit']}), "
                   + (f"each group {g['shards_per_group']} expert shards"
                      if g['shards_per_group'] else
                      f"{g['groups'] // moe['expert_shards']} groups to a shard")
                   + f", at most {g['shards_reached_at_most']} shards; the bytes stay top-k's")
  if 'context' in result:
    ring = result['context']
    lines.append(f"sequence split over {ring['context_shards']} context shards (ring "
                 f"attention): {ring['bytes_per_token_per_layer_train']:,} bytes/token/layer "
                 'round the ring per training step')
  if 'pipeline' in result:
    pipe = result['pipeline']
    schedule = ('fill-drain' if pipe['repeats'] == 1 else
                f"circular, {pipe['repeats']} rounds; "
                f"{_size(pipe['regroup_bytes_per_step_per_device'])} of parameters and "
                'gradients moved between stages')
    lines.append(f"pipeline: {pipe['stages']} stages of {pipe['layers_per_stage']} layers, "
                 f"{pipe['microbatches']} microbatches ({schedule}): bubble "
                 f"{pipe['bubble']:.1%}; {_size(pipe['boundary_bytes_per_step_per_device'])} "
                 'per device across stage boundaries per step')
  return lines


def _kv_cache_lines(result):
  """The KV cache's bytes (a local layer's ring apart)."""
  lines = []
  if 'kv_cache_local' in result:
    local, at = result['kv_cache_local'], result['kv_cache_bytes_per_sequence']
    lines.append(
        f"KV cache: {result['kv_cache_bytes_per_token']:,} bytes/token in the global layers; "
        f"{local['layers']} {local['kind']} layers keep their {local['window']:,}-token "
        f"{'chunk' if local['kind'] == 'chunked' else 'window'} "
        f"({_size(local['bytes_per_sequence'])} per sequence); per sequence " +
        ', '.join(f'{_size(ring)} at {n:,} tokens ({_size(full)} without the ring)'
                  for n, (ring, full) in at.items()))
  elif 'kv_cache_bytes_per_token' in result:
    lines.append(f"KV cache: {result['kv_cache_bytes_per_token']:,} bytes/token")
  if 'recurrent_state' in result:
    state = result['recurrent_state']
    lines.append(f"Recurrent state: {state['layers']} Gated DeltaNet layers hold "
                 f"{_size(state['bytes_per_sequence'])} per sequence at any length (float32 "
                 'state, the convolution\'s last inputs)')
  return lines


def _compiled_lines(result):
  """The compiled step's FLOPs and bytes, or why it did not fit, and the estimated step time."""
  lines = []
  if result.get('compiled'):
    analytic = ((result['flops_per_token'] + result['remat_flops_per_token']) *
                result['run']['tokens_per_step'])
    uncounted = ('a pipeline' if 'pipeline' in result else
                 'sparse attention\'s blocks of queries, a loop counted once, or unrolled '
                 'steps that do not fit')
    flops = (f'FLOPs not counted by the compiler ({uncounted}: the analytic count is used)'
             if result['compiled_flops_per_step'] is None else
             f"{result['compiled_flops_per_step']:.4g} FLOPs/step "
             f"({result['compiled_flops_per_step'] / analytic:.3f} x the analytic count "
             "with remat)")
    if result.get('pallas_attention_flops_per_step'):
      flops += (f" + {result['pallas_attention_flops_per_step']:.4g} FLOPs of Pallas "
                'attention (analytic; the compiler does not count its kernels)')
    narrow = result.get('compiled_narrow_dots')
    if narrow:
      flops += ', ' + ', '.join(f'{n} {kind} x {kind} dots' for kind, n in narrow.items())
    total = result['per_device_bytes']['total']
    parts = ', '.join(f"{k} {_gib(result['per_device_bytes'][k])}" for k in COMPILED_PARTS
                      if k in result['per_device_bytes'])
    lines.append(f"compiled train step: {flops}, {_gib(total)} per device ({parts}; the "
                 f"memory model estimated {_gib(result['estimated_bytes_per_device'])}, "
                 f"{result['estimated_bytes_per_device'] / total:.2f} x), compiled in "
                 f"{result['compile_seconds']:.0f}s")
  if 'compile_failed' in result:
    lines.append(f"compiled train step: {result['compile_failed']}")
  if 'compile_error' in result:
    lines.append(f"compiled train step: does not fit: {result['compile_error']} (the memory "
                 f"model estimated {_gib(result['estimated_bytes_per_device'])})")
  if 'estimated_step_seconds' in result:
    how = ('analytic FLOPs at peak over 1 - the pipeline bubble' if 'pipeline' in result
           else 'compiled FLOPs' + (' + the Pallas attention\'s' if result.get(
               'pallas_attention_flops_per_step') else '') + ' at peak, HBM bytes at bandwidth')
    if result.get('ragged_buffers') and 'pipeline' not in result:
      how = ("analytic FLOPs at peak: the compiler counts every row of the ragged dots' "
             'receive buffers, sized for the worst routing')
    elif result.get('compiled') and result['compiled_flops_per_step'] is None and (
        'pipeline' not in result):
      how = ("analytic FLOPs at peak: the compiler counts sparse attention's loop once, or "
             'the unrolled steps that count every layer do not fit')
    if result.get('estimated_by') == 'sweep':
      how = ("the sweep's: analytic FLOPs at peak plus the mesh's collectives at the links' "
             f"bandwidth; memory {_gib(result['estimated_bytes_per_device'])} by its model")
    lines.append(f"estimated step time on {result['topology']['name']}: "
                 f"{result['estimated_step_seconds']:.3f}s (roofline: {how}); fits in "
                 f"{result['topology']['hbm_bytes_per_chip'] / 2**30:.0f} GiB HBM: "
                 f"{'yes' if result['fits'] else 'NO'}")
  return lines


def _run_lines(result):
  run = result['run']
  line = (f"run: {run['tokens_per_step']:,} tokens/step x {run['steps']:,} steps = "
          f"{run['tokens']:.4g} tokens")
  if 'phases' in run:
    shown = [f"{p['batch_size']} x {p['seq_len']} to step {p['steps'][1]:,}"
             for p in run['phases']]
    if len(shown) > 6:
      shown[3:-2] = [f'... ({len(shown) - 5} more)']
    line = (f"run: {run['steps']:,} steps in {len(run['phases'])} phases, " + ', '.join(shown)
            + f" = {run['tokens']:.4g} tokens")
  if 'estimated' in run:  # the sweep's answer (zoo/plan/suggest.py)
    line += f"; at the step time of the sweep's fastest mesh that fits: {run['estimated']}"
  elif 'estimated_seconds' in run:
    line += (f"; at the estimated step time on {result['topology']['name']}: "
             f"{duration(run['estimated_seconds'])}")
  lines = [line]
  if 'span_corruption' in run:
    spans = run['span_corruption']
    lines.append(f"span corruption: {spans['raw_tokens']}-token pieces of the corpus -> "
                 f"{spans['inputs']} inputs + {spans['targets']} targets; "
                 f"{spans['corpus_tokens_per_step']:,} corpus tokens a step")
  if run['microbatches'] > 1:
    line = (f"gradient accumulation: {run['microbatches']} microbatches of "
            f"{run['rows_per_microbatch']} rows")
    if 'fsdp_collective_bytes_per_step_per_device' in run:
      line += (f"; under fsdp the parameters are all-gathered (forward and backward) and the "
               f"gradients reduce-scattered once per microbatch: "
               f"{_size(run['fsdp_collective_bytes_per_step_per_device'])} per device per "
               f"step (one batch at once: "
               f"{_size(run['fsdp_collective_bytes_per_step_per_device_unaccumulated'])})")
    lines.append(line)
  return lines


def _gib(num_bytes):
  return f'{num_bytes / 2**30:,.2f} GiB'


def _size(num_bytes):
  return (f'{num_bytes / 2**30:,.2f} GiB' if num_bytes >= 2**30 else
          f'{num_bytes / 2**20:,.1f} MiB')


def duration(seconds):
  if seconds < 2 * 3600:
    return f'{seconds / 60:,.1f} minutes'
  if seconds < 3 * 86400:
    return f'{seconds / 3600:,.1f} hours'
  return f'{seconds / 86400:,.1f} days'
