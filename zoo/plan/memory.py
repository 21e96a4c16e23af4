"""The memory model: a train step's bytes per device on a mesh, by part (docs/plan.md "The
memory model"); the sweep ranks meshes with it and the preflight checks a run with it.

Per device: the parameters, optimizer state and gradients as the rules shard them; the
update's float32 temporaries; and the larger of two peaks: a layer's backward (the layers'
kept residuals, zoo/plan/residuals.py's, traced; the layer's own with its [tokens, D]
values whole on each tensor shard, the copies of its largest weight fsdp gathers, a MoE
layer's dispatch buffers, the weight-gradient inputs the other layers of a scanned group
hold) or the loss's (all the kept residuals, a chunk's logits and the vocabulary tables
fsdp gathers), and through both a tied table's float32 gradient; a pipeline's kept
iterations, buffers and gathered or regrouped parameters instead (circular without remat,
every iteration's picked layers too).

The constants are fitted per compiler (`FITS`): XLA:TPU's to the bytes its buffer
assignment places over zoo/plan/calibration.py's grid (benchmarks/plan_calibration.py) and
the long-sequence rows beside it (docs/performance.md), the others' (XLA:GPU, XLA:CPU)
kept where XLA:GPU's steps were measured against them (docs/performance.md, GPU).
"""

import dataclasses
import math

import flax.linen as nn
import jax
import numpy as np

from zoo import families
from zoo import sharding
from zoo.families import loss as loss_lib
from zoo.plan import analytic
from zoo.plan import post
from zoo.plan import residuals
from zoo.train import state as state_lib


@dataclasses.dataclass(frozen=True)
class Fit:
  """A compiler's share of each traced or counted term that it holds at the peak."""
  update: float  # the update's float32 temporaries, per gradient byte
  working: float  # a rematerialised layer's traced working set (fusions recompute the rest)
  float32: float  # its float32 [rows, tokens, D] ones (a norm's) instead, in a bf16 model
  outside: float  # the residuals outside the layers (the loss's) held at a layer's backward
  kept_none: float  # the residuals traced with remat none
  logits: float  # a loss chunk's float32 logits and their gradient
  tables: float  # the vocabulary tables fsdp gathers, at the loss
  tied_gradient: float  # a tied table's float32 gradient, split over tensor alone
  deferred: tuple  # (F, D) wide [tokens, .] arrays per other layer of a scanned group
  deferring_group: int  # the most devices a weight gradient is summed over that defer them
  pipeline: float  # a pipeline's activations
  pipeline_gathered: float  # a pipeline stage's gathered and regrouped parameters


FITS = {
    # XLA:TPU fuses the optimizer's update into its in-place writes; fusions recompute the
    # cheap elementwise residuals, a norm's float32 ones all; it frees the loss's residuals
    # before the layers' backward; a loss chunk's logits are float32 and a bfloat16 copy;
    # the loss holds one of the two tables gathered; on tensor > 1 it sums a tied table's
    # gradient over fsdp only at the backward's end, holding it till then; where a weight
    # gradient is summed over up to 32 devices the scheduler defers a group's weight
    # gradients to the group's end (their inputs: two [tokens, F] and six [tokens, D]
    # arrays a layer), over 64 and more it does not
    'tpu': Fit(update=0.0, working=0.8, float32=0.0, outside=0.0, kept_none=0.85,
               logits=0.75, tables=0.5, tied_gradient=1.0, deferred=(2, 6),
               deferring_group=32, pipeline=0.85, pipeline_gathered=0.5),
    'other': Fit(update=0.5, working=1.0, float32=1.0, outside=1.0, kept_none=1.0,
                 logits=1.0, tables=0.0, tied_gradient=0.0, deferred=(0, 0),
                 deferring_group=0, pipeline=1.0, pipeline_gathered=1.0),
}
# XLA:GPU holds less of the traced activations than the 'other' fit counts: 0.72 x
# (llama3_8b, 2 layers, 16 x 4096) to 0.80 x (gpt2_xl, 8 x 1024) and about 0.85 x (gpt2_xl,
# 16 x 1024) on an H200 (docs/performance.md, GPU)
GPU_ACTIVATIONS = 0.8
# the copies of a layer's largest weight fsdp gathers (forward, backward and its gradient
# before the reduce-scatter)
GATHERED_COPIES = 3
# a dropless expert-parallel dispatch's receive-sized arrays ([X k rows per token, ...]):
# D wide (received, sorted, the experts' output and their gradients; XLA:TPU's row
# scatters run in 32 bits, two of these each) and F wide (the experts' intermediates),
# from the compiled steps of the grid's expert-axis points. A MoE layer in a group of
# layers (a layer pattern's, a MoE group's, or unscanned: each layer rematerialised behind
# its own barrier, zoo/models/transformer.py `rematted`) holds more of its recomputed
# dispatch at once than one that is a scan's body alone (gpt-oss's peak: 12)
DISPATCH_D, DISPATCH_D_GROUPED, DISPATCH_F = 4, 12, 3
# an MTP module's MoE block (zoo/models/mtp.py; not rematerialised) holds its forward's and
# part of its backward's receive-sized arrays through the stack's backward, beside them
MTP_DISPATCH_D, MTP_DISPATCH_F = 2, 3
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
  layer, a pipeline's gathered and regrouped parameters), 'teacher' (train.teacher's
  parameters), 'total'}. traced: residuals.measure's for the mesh's context (the sweep's,
  computed once); layout: the sweep's Layout of `boxed` (made here when None)."""
  m, t = config.model, config.train
  fit = FITS['tpu' if on == 'tpu' else 'other']
  data, fsdp, tensor = sizes['data'], sizes['fsdp'], sizes['tensor']
  expert, context, stages = (sizes.get(a, 1) for a in ('expert', 'context', 'stage'))
  compute_bytes = np.dtype(m.dtype).itemsize
  layout = layout or Layout(config, boxed)
  held = layout.held(sizes)
  # a device's rows of one microbatch at a time, of its L / context positions (a ring's
  # block of queries and keys), split over tensor
  traced = traced or residuals.measure(config, on, context)
  rows = t.batch_size / (data * fsdp * expert) / t.microbatches
  tokens = rows * config.data.seq_len / context
  # one layer's working set: its [tokens, D] values whole on each tensor shard (a MoE
  # layer's not: PAIR_COPIES below was fitted with them split)
  whole = 0 if m.moe.num_experts else traced['layer_embed']
  layer = (traced['layer'] + (tensor - 1) * whole) * rows / tensor
  if m.remat != 'none' and stages == 1:  # what a rematerialised layer's backward holds
    float32 = traced['layer_float32'] * rows / tensor
    layer = (fit.working * (layer - float32) + fit.float32 * float32 +
             _deferred(m, tokens, tensor, fit, sizes) * compute_bytes)
  if m.moe.num_experts and tensor > 1:
    # but the tensor shards each hold a MoE layer's [pairs, D] buffers whole (they split F)
    layer += tokens * _pair_values(m) * (1 - 1 / tensor) * compute_bytes
  if m.moe.num_experts and expert > 1 and not m.moe.capacity_factor:
    # and the buffers of a dropless expert-parallel dispatch (the trace has no expert axis)
    layer += tokens * _dispatch_values(m, expert, tensor) * compute_bytes
  if stages > 1:  # the logits are gone by the pipeline's backward pass, the peak
    activations = (fit.pipeline * _pipeline_activations(config, sizes, rows, traced, layer) +
                   _pipeline_picked(config, sizes, layout))
    gathered = _pipeline_gathered(config, sizes, plan_result, boxed, layout, fit)
  else:
    gathered = (GATHERED_COPIES * _largest_layer_weight(boxed, tensor, expert) *
                compute_bytes if fsdp > 1 else 0.0)
    share = rows / tensor * (fit.kept_none if m.remat == 'none' else 1)
    # what the backward keeps; by a layer's backward the loss's and the final norm's are
    # freed (their backward ran first), the layers' kept
    kept = traced['kept'] * share
    kept_at_layer = (traced['layers'] + fit.outside * (traced['kept'] - traced['layers'])
                     ) * share
    # the loss: a chunk's float32 logits and their gradient, the tables fsdp gathers
    length = families.loss_length(config)
    loss = (fit.logits * rows * (loss_lib.chunk_len(config, length) or length / context) *
            m.vocab_size / tensor * 4 * 2)
    if fsdp > 1:
      loss += fit.tables * _params_along(boxed, 'vocab') * compute_bytes / tensor
    # the peak: a layer's backward with its gathered weights, or the loss's; through both
    # a tied table's float32 gradient
    activations = max(kept_at_layer + layer, kept + loss - gathered) + _tied_gradient(
        m, sizes, boxed, fit)
  if on == 'gpu':
    activations *= GPU_ACTIVATIONS
  update = held['gradients'] * (fit.update + (t.microbatches > 1))
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
        state_lib.trainable(c, nn.unbox(self.boxed)))[1])

  def stacked(self, sizes):
    """analytic.stacked_param_bytes on the mesh `sizes`."""
    return self._once('stacked', sizes, lambda: analytic.stacked_param_bytes(
        self.boxed, sharding.rules(self.config), sizes))

  def _once(self, what, sizes, make):
    key = (what, tuple(sorted(sizes.items())))
    if key not in self._seen:
      self._seen[key] = make()
    return self._seen[key]


def _tied_gradient(m, sizes, boxed, fit):
  """Bytes of a tied vocabulary table's float32 gradient split over tensor alone, which
  XLA:TPU holds from the loss's backward to the embedding's and only then sums over fsdp
  (`fit.tied_gradient` of it; on tensor 1 it sums the loss's part at once: gemma2_9b,
  gemma3_27b and gpt3_175b in docs/performance.md)."""
  if not m.tie_embeddings or sizes['tensor'] == 1 or sizes['fsdp'] == 1:
    return 0.0
  return fit.tied_gradient * _params_along(boxed, 'vocab') * 4 / sizes['tensor']


def _teacher_bytes(config, sizes):
  """train.teacher's (or an objective's reference copy's) parameters per device (its
  forward's activations come and go before the student's backward: not counted)."""
  if config.train.teacher.workdir:
    return analytic.teacher_plan(config, sizes)['params_bytes_per_device']
  frozen = post.reference(config, sizes)
  return frozen['params_bytes_per_device'] if frozen else 0


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


def _pipeline_picked(config, sizes, layout):
  """Bytes of its parameters a circular pipeline without remat keeps for the backward: each
  of the R M + S - 1 iterations' picked group (the round's G layers, in the compute dtype,
  split like the parameters: 1 / R of the stage's). With a remat policy the checkpoint
  picks them again from the stage's parameters; with one round the pick does not change
  over the iterations, and JAX keeps it outside the loop (zoo/models/pipeline.py)."""
  m = config.model
  if m.remat != 'none' or m.pipeline_repeats == 1:
    return 0.0
  stages = sizes['stage']
  iterations = m.pipeline_repeats * (m.pipeline_microbatches or stages) + stages - 1
  float32_bytes = layout.stacked(sizes)  # the parameters are float32
  return iterations * float32_bytes / 4 * np.dtype(m.dtype).itemsize / m.pipeline_repeats


def _pipeline_gathered(config, sizes, plan_result, boxed, layout, fit):
  """A pipeline stage's parameters moved for a circular schedule, and with fsdp one layer's
  parameters and the vocabulary tables gathered whole (`fit.pipeline_gathered` of them at
  the peak); and a MoE stage's expert stacks, every one: fsdp gathers them for the experts'
  shard_map (F split over tensor) and XLA hoists that gather out of the microbatch loop
  (qwen3_235b_a22b's row in docs/performance.md)."""
  m = config.model
  fsdp, tensor, expert, stages = (sizes.get(a, 1) for a in ('fsdp', 'tensor', 'expert',
                                                            'stage'))
  compute_bytes = np.dtype(m.dtype).itemsize
  gathered = analytic.pipeline_plan(config, sizes, layout.stacked(sizes))[
      'regroup_bytes_per_step_per_device']
  if fsdp > 1:
    params = plan_result['params_total'] / stages
    layers = families.total_layers(m) / stages
    tables = _params_along(boxed, 'vocab')
    gathered += ((params - tables) / layers + tables) * compute_bytes / tensor
  gathered *= fit.pipeline_gathered
  if m.moe.num_experts and fsdp > 1:
    gathered += sum(int(np.prod(leaf.shape)) / _expert_split(leaf, spec, tensor, expert)
                    for leaf, spec in _with_axes(boxed) if 'expert' in spec
                    ) / stages * compute_bytes
  return gathered


def _dispatch_values(m, expert_shards, tensor):
  """Values per token a dropless expert-parallel MoE layer's dispatch holds at its peak: the
  receive buffer has room for X x k rows per token (every shard's pairs: zoo/models/moe.py),
  DISPATCH_D arrays of them D wide (DISPATCH_D_GROUPED in a group of layers) and
  DISPATCH_F F wide (F split over tensor), and each MTP module's block its own
  MTP_DISPATCH_D and MTP_DISPATCH_F beside them."""
  rows = m.moe.top_k * expert_shards
  alone = _group(m) == 1 and m.scan_layers  # a scan's body alone (transformer.rematted)
  width = (m.moe.expert_mlp_dim or m.mlp_dim) / tensor
  mtp = m.mtp.depth * (MTP_DISPATCH_D * m.d_model + MTP_DISPATCH_F * width)
  return rows * ((DISPATCH_D if alone else DISPATCH_D_GROUPED) * m.d_model +
                 DISPATCH_F * width + mtp)


def _deferred(m, tokens, tensor, fit, sizes):
  """Values a scanned group's other layers hold (a layer pattern's, a MoE group's: unrolled
  in one scan body, each rematerialised alone) while the compiler defers their weight
  gradients to the group's end: (group - 1) layers of `fit.deferred` [tokens, F / tensor]
  (a MoE layer's k x F) and [tokens, D] arrays (gathered whole over tensor), where a
  weight gradient is summed over up to `fit.deferring_group` devices (the mesh's all but
  tensor). At 32k tokens (docs/performance.md): Gemma 3's six-layer group deferred over 8
  to 32 devices and not over 64 or 128, whatever the slice and the other axes; Gemma 2's
  pair deferred over 8 (v5p-16), 16 and 32 (tensor 4 on v5p-128 and v5p-256), not over 64
  (fsdp 64 on v5p-128, fsdp 64 x tensor 4 on v5p-512)."""
  if math.prod(sizes.values()) / sizes['tensor'] > fit.deferring_group:
    return 0.0
  group = _group(m)
  width = m.moe.top_k * (m.moe.expert_mlp_dim or m.mlp_dim) if m.moe.num_experts else m.mlp_dim
  wide, deep = fit.deferred
  return (group - 1) * tokens * (wide * width / tensor + deep * m.d_model)


def _group(m):
  """Layers in a scanned stack's unit: a layer pattern's, a MoE group's, or both."""
  return math.lcm(len(m.attention.pattern) or 1, m.moe.every if m.moe.num_experts else 1)


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
