"""The device mesh from `config.mesh`, logical-axis rules, and shardings for state and batches."""

import math

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from zoo.errors import ConfigError

MESH_AXES = ('data', 'fsdp', 'tensor', 'expert', 'context', 'stage')
DCN_AXES = ('data', 'fsdp', 'stage')  # axes that may span slices (mesh.dcn_axis)
BATCH_AXES = ('data', 'fsdp', 'expert')  # tokens: data-parallel over expert too


def mesh_shape(mesh_config, num_devices):
  """config.mesh with -1 resolved -> {axis: size}; the product must be the device count."""
  sizes = {axis: mesh_config.get(axis, 1) for axis in MESH_AXES}  # an axis not given: 1
  known = math.prod(size for size in sizes.values() if size != -1)
  for axis, size in sizes.items():
    if size == -1:
      if num_devices % known:
        raise ConfigError(f'mesh: the fixed axes multiply to {known}, which does not divide '
                          f'{num_devices} devices; {_suggest(num_devices)}')
      sizes[axis] = num_devices // known
  if math.prod(sizes.values()) != num_devices:
    raise ConfigError(f'mesh {sizes} has {math.prod(sizes.values())} devices but '
                      f'{num_devices} are present; {_suggest(num_devices)}')
  return sizes


def _suggest(num_devices):
  divisors = [d for d in range(1, num_devices + 1) if num_devices % d == 0]
  return (f'set one axis to -1 or use sizes whose product is {num_devices} '
          f'(divisors: {divisors})')


def describe(sizes):
  """{'data': 1, 'fsdp': 8, 'stage': 2, ...} (or a mesh's shape) -> 'fsdp 8 x stage 2'; ''
  when every axis is 1."""
  return ' x '.join(f'{axis} {n}' for axis, n in sizes.items() if n > 1)


def make_mesh(mesh_config, devices=None):
  """The mesh over `devices` (default: all). TPU devices follow the physical torus; with
  mesh.slices > 1 the axis mesh.dcn_axis (data, fsdp or stage) spans the slices over DCN (the
  hybrid mesh helpers), each slice (on CPU: each process) holding 1/slices of it and the
  other axes whole."""
  devices = jax.devices() if devices is None else devices
  sizes = mesh_shape(mesh_config, len(devices))
  shape = [sizes[a] for a in MESH_AXES]
  slices = mesh_config.get('slices', 1)
  if slices > 1:
    across = mesh_config.get('dcn_axis', 'data')
    if sizes[across] % slices:
      raise ConfigError(f'mesh.slices={slices} must divide mesh.{across}={sizes[across]}: '
                        f'mesh.dcn_axis={across!r} spans the slices; make it a multiple of '
                        'the slice count')
    granules = {getattr(d, 'slice_index', 0) for d in devices}
    if len(granules) != slices and jax.process_count() != slices:
      raise ConfigError(f'mesh.slices={slices} but the devices form {len(granules)} slices and '
                        f'{jax.process_count()} processes; set mesh.slices to one of those')
    dcn = [slices if axis == across else 1 for axis in MESH_AXES]
    grid = mesh_utils.create_hybrid_device_mesh(
        [size // split for size, split in zip(shape, dcn)], dcn, devices,
        process_is_granule=len(granules) != slices, allow_split_physical_axes=True)
  elif devices[0].platform == 'tpu':
    grid = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
  else:
    grid = np.asarray(devices).reshape(shape)
  return Mesh(grid, MESH_AXES)


def axis_size(name):
  """The size of mesh axis `name` in the mesh being traced under (1 outside one, or where
  the mesh lacks it)."""
  mesh = jax.sharding.get_abstract_mesh()
  return 1 if mesh.empty else mesh.shape.get(name, 1)


def rules(config):
  """The config's (logical axis, mesh axes) pairs, as flax wants them."""
  return tuple((logical, tuple(mesh) if isinstance(mesh, (list, tuple)) else mesh)
               for logical, mesh in config.sharding.rules)


def logical_to_shardings(logical_specs, mesh, axis_rules):
  """A tree of logical PartitionSpecs -> NamedShardings on `mesh`."""
  return nn.logical_to_mesh_sharding(logical_specs, mesh, axis_rules)


def fit(sharding, shape):
  """`sharding` with the mesh axes dropped from dims they do not divide (those dims stay
  replicated, as plan mode reports under not_divisible): e.g. GPT-2's vocab of 50257 over
  tensor=8."""
  spec, mesh = list(sharding.spec) + [None] * (len(shape) - len(sharding.spec)), sharding.mesh
  for i, (dim, axes) in enumerate(zip(shape, spec)):
    names = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
    if dim % math.prod(mesh.shape[a] for a in names):
      spec[i] = None
  return NamedSharding(mesh, P(*spec))


def batch_sharding(mesh):
  """Leading (batch) dim split over data x fsdp x expert, the rest replicated."""
  return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh):
  return NamedSharding(mesh, P())


def batch_shards(mesh):
  return math.prod(mesh.shape[a] for a in BATCH_AXES)


def check_batch(batch_size, mesh, num_streams):
  shards = batch_shards(mesh)
  if batch_size % shards or batch_size % num_streams:
    raise ConfigError(f'train.batch_size={batch_size} does not split over data x fsdp x expert '
                      f'= {shards} '
                      f'shards and {num_streams} input streams; use a multiple of '
                      f'{math.lcm(shards, num_streams)}')


def check_divisible(config, sizes, family=None):
  """The dims a mesh must split evenly: batch over data x fsdp x expert, heads over tensor,
  experts over expert, each device's rows over train.microbatches; with the model's
  `family` (its registry module) also the sequence over context (in the family's
  CONTEXT_CHUNKS per device) and its stacks (LAYER_FIELDS) over stage; the first that does
  not -> ConfigError naming both."""
  m, batch = config.model, config.train.batch_size
  checks = [('train.batch_size', batch, 'data x fsdp x expert',
             sizes['data'] * sizes['fsdp'] * sizes['expert']),
            ('model.num_heads', m.num_heads, 'tensor', sizes['tensor'])]
  if family and sizes.get('context', 1) > 1:
    chunks = family.CONTEXT_CHUNKS
    checks.append(('data.seq_len', config.data.seq_len,
                   f'{chunks} x context (chunks per device)' if chunks > 1 else 'context',
                   sizes['context'] * chunks))
  # fewer kv heads than tensor shards (MQA, small GQA) is fine: they stay replicated
  if m.moe.num_experts:
    checks.append(('model.moe.num_experts', m.moe.num_experts, 'expert', sizes['expert']))
  for field, value, axes, size in checks:
    if value % size:
      raise ConfigError(f'{field}={value} does not split over mesh {axes}={size}; use a mesh '
                        f'whose {axes} divides {value} (or change {field})')
  stages = sizes.get('stage', 1)
  if family and stages > 1:
    _check_stages(config, family.LAYER_FIELDS, stages, checks[0][3])
  shards, microbatches = checks[0][3], config.train.microbatches
  if (batch // shards) % microbatches:
    raise ConfigError(f'train.microbatches={microbatches} does not divide the rows each device '
                      f'holds (train.batch_size={batch} / {shards} batch shards = '
                      f'{batch // shards}); use a divisor of it or a larger batch')


def check_stage_split(m, layer_fields, stages, label):
  """-> the pipeline's microbatch count, once each stack splits into stages x repeats layer
  groups and the microbatches fill every stage; `label` names the stage count in the
  message (config.validate: 'mesh.stage=N'; a -1 resolved with the mesh: 'mesh stage=N')."""
  every = m.moe.every if m.moe.num_experts else 1  # a MoE stack scans groups of `every`
  for field in layer_fields:
    if m[field] % (stages * m.pipeline_repeats * every):
      groups, times = ((f' of whole model.moe.every={every} layer groups', f' x {every}')
                       if every > 1 else ('', ''))
      raise ConfigError(f'model.{field}={m[field]} does not split into {label} stages x '
                        f'model.pipeline_repeats={m.pipeline_repeats} layer groups{groups}; '
                        f'use stages and repeats whose product{times} divides it')
  microbatches = m.pipeline_microbatches or stages
  if microbatches < stages:
    raise ConfigError(f'model.pipeline_microbatches={microbatches} is fewer than {label}: '
                      'a stage would never be busy; use at least as many microbatches as '
                      'stages (more shrink the bubble)')
  return microbatches


def _check_stages(config, layer_fields, stages, shards):
  """The pipeline on `stages` stages: each stack splits, microbatches fill every stage,
  and each microbatch's rows split over the batch axes."""
  microbatches = check_stage_split(config.model, layer_fields, stages, f'mesh stage={stages}')
  rows = config.train.batch_size // config.train.microbatches
  if rows % (microbatches * shards):
    raise ConfigError(f'train.batch_size={config.train.batch_size} does not split into '
                      f'{microbatches} pipeline microbatches (model.pipeline_microbatches) '
                      f'of rows over data x fsdp x expert = {shards}; use a multiple of '
                      f'{microbatches * shards * config.train.microbatches}')


def process_rows(mesh, batch_size):
  """The (start, stop) blocks of batch rows that this process's devices hold."""
  index_map = batch_sharding(mesh).addressable_devices_indices_map((batch_size,))
  blocks = []
  for start, stop in sorted({idx[0].indices(batch_size)[:2] for idx in index_map.values()}):
    if blocks and start <= blocks[-1][1]:  # touching or overlapping: one block
      blocks[-1] = (blocks[-1][0], max(stop, blocks[-1][1]))
    else:
      blocks.append((start, stop))
  return blocks


def to_global(local_batch, mesh, batch_size):
  """This process's rows of the batch -> one global jax.Array per key, split over the mesh."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v, (batch_size, *v.shape[1:]))
          for k, v in local_batch.items()}
