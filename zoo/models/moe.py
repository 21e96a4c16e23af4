"""Mixture of experts: a top-k router, experts, and two ways to send tokens to them.

- capacity (moe.capacity_factor > 0): each sequence gives every expert at most
  C = ceil(k x L x capacity_factor / E) slots, filled in priority order (every token's first
  choice before any second choice, then position); tokens past capacity skip the expert and
  pass on the residual. With expert parallelism the [experts, slots] buffers travel to their
  expert's shard and back with two explicit all-to-alls over the `expert` mesh axis.
- dropless (capacity_factor = 0): the (token, choice) pairs sorted by expert and multiplied
  with `jax.lax.ragged_dot`; nothing is dropped. With expert parallelism the sorted pairs
  go to their experts' shards and back with two ragged all-to-alls (zoo/collectives.py), so
  each pair's activations cross the network once each way, however many shards there are.

Both run under `shard_map` over the batch axes (data, fsdp, expert), and over `context`
where the sequence is split (dropless only: each device routes its chunk's tokens), with
the expert weights split over `expert` and their F over `tensor` (Megatron's split: each
tensor shard runs its tokens through its F/t slice of every expert and the outputs are
summed over `tensor`), so the communication is what is written here, not the
partitioner's choice. Routing is per token and capacity per sequence, so results do not
depend on the mesh.

Gates: top-k probabilities renormalised to sum to 1 (Mixtral); with top_k = 1 the raw
probability (Switch), so the router still gets a gradient. They scale the experts' outputs,
or with moe.gate_input (Llama 4, dropless) their inputs. DeepSeek-V3 (`route`): sigmoid
affinities, experts chosen within each token's best groups, gates renormalised and scaled.
Auxiliary losses over the global batch (Switch, Fedus et al. eq. 4; ST-MoE z-loss):
balance = E x sum_i f_i P_i with f_i the share of (token, choice) pairs sent to expert i and
P_i the mean router probability of i (1 at uniform routing); z = mean (logsumexp logits)^2.

Glossary: B batch, L length, D d_model, F expert mlp, E experts, A top_k, C capacity slots,
T tokens, M (token, choice) pairs, I rows received from other shards, X expert-parallel
shards, G expert groups.
"""

import functools
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from zoo import collectives
from zoo import sharding
from zoo.models import dims
from zoo.models import layers
from zoo.models import quant

# what each layer sows (and, with balance_scope 'sequence', sequence_balance and sequences)
SUMS = ('pairs_per_expert', 'probs', 'z', 'dropped', 'tokens')


def statistics(sums):
  """One layer's sums over the batch (SUMS, each with any leading dims) -> balance_loss,
  z_loss, dropped_fraction (of (token, choice) pairs) and load (per expert, the share of
  tokens that chose it; A/E when balanced). Sums add over microbatches, so a pipeline's
  statistics are those of the whole batch."""
  tokens = sums['tokens']
  pairs = jnp.sum(sums['pairs_per_expert'], axis=-1)  # tokens x A
  share_E = sums['pairs_per_expert'] / pairs[..., None]  # f_i, sums to 1
  E = share_E.shape[-1]
  balance = E * jnp.sum(share_E * sums['probs'], axis=-1) / tokens
  if 'sequence_balance' in sums:  # model.moe.balance_scope='sequence': the mean over sequences
    balance = sums['sequence_balance'] / sums['sequences']
  return {'balance_loss': balance,
          'z_loss': sums['z'] / tokens,
          'dropped_fraction': sums['dropped'] / pairs,
          'load': share_E * (pairs / tokens)[..., None]}


def moved_bias(bias_E, load_E, top_k, rate):
  """Auxiliary-loss-free balancing's step: up for experts below the balanced load A/E,
  down for those above."""
  return bias_E + rate * jnp.sign(top_k / bias_E.shape[-1] - load_E)


def route(logits_TE, top_k, bias_E=None, normalize=True, router='softmax', groups=0,
          top_groups=0, scale=1.0):
  """-> (probabilities [T, E] float32, gates [T, A], expert ids [T, A]). A balancing bias
  moves which experts are chosen, never the gates' values. normalize=False (a Qwen 3 MoE
  checkpoint's norm_topk_prob false): the top-k probabilities as they are.

  router='sigmoid' (DeepSeek-V3): each expert's affinity sigmoid(logit); the returned
  probabilities (what the balance statistics read) are them normalised to sum to 1. groups:
  the experts in `groups` equal groups; a token keeps the `top_groups` groups whose two best
  bias-adjusted scores sum highest, the others' scores count as 0 in its choice (as
  DeepSeek's masked_fill). The gates x `scale` (routed_scaling_factor)."""
  logits_TE = logits_TE.astype(jnp.float32)
  if router == 'sigmoid':
    scores_TE = jax.nn.sigmoid(logits_TE)
    probs_TE = scores_TE / jnp.sum(scores_TE, axis=-1, keepdims=True)
  else:
    scores_TE = probs_TE = jax.nn.softmax(logits_TE, axis=-1)
  choice_TE = scores_TE if bias_E is None else scores_TE + jnp.broadcast_to(
      bias_E, scores_TE.shape)
  if groups:  # (T may be several leading dims)
    *T, E = choice_TE.shape
    best_TG2, _ = jax.lax.top_k(choice_TE.reshape(*T, groups, E // groups), 2)
    _, kept = jax.lax.top_k(jnp.sum(best_TG2, axis=-1), top_groups)  # [T, top_groups]
    kept_TG = jnp.any(jax.nn.one_hot(kept, groups, dtype=jnp.bool_), axis=-2)
    choice_TE = jnp.where(jnp.repeat(kept_TG, E // groups, axis=-1), choice_TE, 0.0)
  _, experts_TA = jax.lax.top_k(choice_TE, top_k)
  gates_TA = jnp.take_along_axis(scores_TE, experts_TA, axis=-1)
  if top_k > 1 and normalize:
    gates_TA = gates_TA / (jnp.sum(gates_TA, axis=-1, keepdims=True) + 1e-20)
  return probs_TE, gates_TA * scale, experts_TA


def capacity(seq_len, num_experts, top_k, capacity_factor):
  return max(1, math.ceil(top_k * seq_len * capacity_factor / num_experts))


def slot_positions(experts_LA, num_experts):
  """Each (token, choice)'s slot in its expert, in priority order: all first choices (by
  position), then all second choices, ... -> [L, A] int32."""
  order_AL = experts_LA.T
  one_hot = jax.nn.one_hot(order_AL.reshape(-1), num_experts, dtype=jnp.int32)
  before = jnp.cumsum(one_hot, axis=0) - one_hot
  return jnp.sum(before * one_hot, axis=-1).reshape(order_AL.shape).T


def _expert_mlp(x_MD, w, cfg, group_sizes=None, experts_M=None):
  """Experts on their tokens: x [E, M, D] (batched) or sorted x [M, D] with group sizes and
  each row's expert (for the experts' biases, moe.use_bias)."""
  r = cfg['quant']
  if group_sizes is None:
    matmul = lambda x, kernel: quant.expert_matmul(x, kernel.astype(x.dtype), r)
    bias = lambda b_EF: b_EF[:, None, :]
  else:
    matmul = lambda x, kernel: quant.ragged_dot(r)(x, kernel.astype(x.dtype), group_sizes)
    rows = jnp.clip(experts_M, 0, group_sizes.shape[0] - 1)  # rows past the groups: dropped
    bias = lambda b_EF: b_EF[rows]
  dense = lambda x, name: matmul(x, w[name]) + (
      bias(_once(w[name + '_bias'], name, cfg)).astype(x.dtype) if name + '_bias' in w else 0)
  activation = cfg['activation']
  if activation in layers.GATED:
    h = layers.gated(activation, dense(x_MD, 'wi_0'), dense(x_MD, 'wi_1'), cfg['clamp'])
  else:
    h = layers.ACTIVATION_FNS[activation](dense(x_MD, 'wi_0'))
  return dense(h, 'wo')


def _once(bias, name, cfg):
  """The output projection's bias on one tensor shard (the shards' outputs are summed)."""
  if name != 'wo' or not cfg['split_hidden']:
    return bias
  return bias * (jax.lax.axis_index('tensor') == 0).astype(bias.dtype)


def _capacity_experts(x_BLD, gates_BLA, experts_BLA, w, cfg, num_shards):
  """Dispatch into [E, C] slots per sequence, experts, combine; -> (y, dropped pairs)."""
  B, L, _ = x_BLD.shape
  E = cfg['num_experts']
  C = capacity(L, E, cfg['top_k'], cfg['capacity_factor'])
  slots_BLA = jax.vmap(slot_positions, in_axes=(0, None))(experts_BLA, E)
  kept_BLA = slots_BLA < C
  # [B, L, A, E, C] one-hots summed over A: which slot of which expert each token fills
  dispatch_BLEC = jnp.einsum(
      'blae,blac->blec', jax.nn.one_hot(experts_BLA, E, dtype=x_BLD.dtype),
      jax.nn.one_hot(jnp.where(kept_BLA, slots_BLA, C), C, dtype=x_BLD.dtype))
  combine_BLEC = jnp.einsum(
      'blae,blac->blec', jax.nn.one_hot(experts_BLA, E, dtype=jnp.float32) *
      gates_BLA[..., None],
      jax.nn.one_hot(jnp.where(kept_BLA, slots_BLA, C), C, dtype=jnp.float32))
  x_EBCD = jnp.einsum('blec,bld->ebcd', dispatch_BLEC, x_BLD)
  if num_shards > 1:  # experts' slots to the experts' shards: [E/X, X*B, C, D]
    x_EBCD = jax.lax.all_to_all(x_EBCD, 'expert', 0, 1, tiled=True)
  e, b = x_EBCD.shape[:2]
  y_EBCD = _expert_mlp(x_EBCD.reshape(e, b * C, -1), w, cfg).reshape(
      x_EBCD.shape)
  if num_shards > 1:  # and back: [E, B, C, D]
    y_EBCD = jax.lax.all_to_all(y_EBCD, 'expert', 1, 0, tiled=True)
  y_BLD = jnp.einsum('blec,ebcd->bld', combine_BLEC.astype(y_EBCD.dtype), y_EBCD)
  return y_BLD, jnp.sum(~kept_BLA)


def _grouped_mlp(x_MD, experts_M, num_groups, w, cfg):
  """Rows tagged with their group (num_groups = past the last group: skipped) through
  ragged_dot, sorted and back; -> [M, D] in the rows' order (skipped rows 0)."""
  order_M = jnp.argsort(experts_M, stable=True)
  group_sizes = jnp.bincount(experts_M, length=num_groups).astype(jnp.int32)
  y_MD = _expert_mlp(x_MD[order_M], w, cfg, group_sizes, experts_M[order_M])
  return jnp.zeros_like(y_MD).at[order_M].set(y_MD)


def _dropless_experts(x_BLD, gates_BLA, experts_BLA, w, cfg, num_shards):
  """(token, choice) pairs through ragged_dot, on their experts' shards; -> (y, 0 dropped)."""
  B, L, D = x_BLD.shape
  A = cfg['top_k']
  experts_M = experts_BLA.reshape(-1)  # M = B*L*A pairs, token-major
  x_MD = jnp.repeat(x_BLD.reshape(B * L, D), A, axis=0)
  gates_M1 = gates_BLA.reshape(-1, 1)
  if cfg['gate_input']:  # Llama 4: the gate scales what goes in
    x_MD = x_MD * gates_M1.astype(x_MD.dtype)
  if num_shards == 1:
    y_MD = _grouped_mlp(x_MD, experts_M, cfg['num_experts'], w, cfg)
  else:
    y_MD = _expert_parallel_mlp(x_MD, experts_M, w, cfg, num_shards)
  if not cfg['gate_input']:
    y_MD = y_MD * gates_M1.astype(y_MD.dtype)
  return jnp.sum(y_MD.reshape(B, L, A, D), axis=2), jnp.zeros((), jnp.int32)


def _expert_parallel_mlp(x_MD, experts_M, w, cfg, num_shards):
  """Pairs sorted by expert travel to their experts' shards and back with two ragged
  all-to-alls over `expert`: each pair's D values cross the network once each way.

  Shard s holds experts [s*E/X, (s+1)*E/X). The receive buffer has room for X*M rows (every
  shard's pairs choosing this shard's experts), so nothing is ever dropped."""
  M, _ = x_MD.shape
  E, X = cfg['num_experts'], num_shards
  local = E // X
  me = jax.lax.axis_index('expert')
  order_M = jnp.argsort(experts_M, stable=True)  # by expert, so by destination shard
  counts_XE = jax.lax.all_gather(jnp.bincount(experts_M, length=E), 'expert')  # [source, e]
  sends_XX = jnp.sum(counts_XE.reshape(X, X, local), axis=-1).astype(jnp.int32)  # [src, dst]
  exclusive = lambda a, axis: jnp.cumsum(a, axis=axis) - a
  # dispatch: my pairs for shard j start at my row offset for j and land after the pairs
  # of the shards before me; on the way back the roles swap
  send_X, recv_X = sends_XX[me], sends_XX[:, me]
  send_offsets_X, land_offsets_X = exclusive(sends_XX, 1)[me], exclusive(sends_XX, 0)[me]
  recv_offsets_X, back_offsets_X = exclusive(sends_XX, 0)[:, me], exclusive(sends_XX, 1)[:, me]

  x_MD = x_MD[order_M]
  x_ID = collectives.ragged_all_to_all(
      x_MD, jnp.zeros((X * M,) + x_MD.shape[1:], x_MD.dtype), send_offsets_X, send_X,
      land_offsets_X, recv_X, 'expert')
  # received rows run (source 0: my experts in order), (source 1: ...), ...: tag each with
  # its local expert (rows past the received ones: `local`, skipped)
  local_counts = jax.lax.dynamic_slice_in_dim(counts_XE, me * local, local, axis=1)  # [X, E/X]
  ends = jnp.cumsum(local_counts.reshape(-1))
  segment_I = jnp.searchsorted(ends, jnp.arange(X * M), side='right')
  expert_I = jnp.where(segment_I < X * local, segment_I % local, local)
  y_ID = _grouped_mlp(x_ID, expert_I, local, w, cfg)
  y_MD = collectives.ragged_all_to_all(
      y_ID, jnp.zeros_like(x_MD), recv_offsets_X, recv_X, back_offsets_X, send_X, 'expert')
  return jnp.zeros_like(y_MD).at[order_M].set(y_MD)


def _moe_shard(x_BLD, router, bias_E, w, cfg, num_shards, batch_axes):
  """One shard's tokens (and its experts' weights) -> (y, SUMS over the global batch);
  router: {'kernel': [D, E]} and with moe.use_bias {'bias': [E]} (gpt-oss); batch_axes: the
  mesh axes the tokens are split over (rows, and the sequence's chunks)."""
  B, L, _ = x_BLD.shape
  E, A = cfg['num_experts'], cfg['top_k']
  logits_BLE = jnp.einsum('bld,de->ble', x_BLD.astype(jnp.float32), router['kernel'])
  if 'bias' in router:
    logits_BLE = logits_BLE + router['bias'].astype(jnp.float32)[None, None, :]
  probs_BLE, gates_BLA, experts_BLA = route(
      logits_BLE, A, bias_E, cfg['normalize_top_k'], cfg['router'], cfg['num_groups'],
      cfg['top_groups'], cfg['routed_scale'])
  experts_fn = _dropless_experts if cfg['capacity_factor'] == 0 else _capacity_experts
  y_BLD, dropped = experts_fn(x_BLD, gates_BLA, experts_BLA, w, cfg, num_shards)
  if cfg['split_hidden']:  # each tensor shard's F/t slice: its part of the sum
    y_BLD = jax.lax.psum(y_BLD, 'tensor')

  sums = {'pairs_per_expert': jnp.sum(jax.nn.one_hot(experts_BLA, E), axis=(0, 1, 2)),
          'probs': jnp.sum(probs_BLE, axis=(0, 1)),
          'z': jnp.sum(jnp.square(jax.nn.logsumexp(logits_BLE, axis=-1))),
          'dropped': dropped.astype(jnp.float32), 'tokens': jnp.float32(B * L)}
  if cfg['balance_scope'] == 'sequence':  # each sequence's E sum_i f_i P_i, summed
    share_BE = jnp.sum(jax.nn.one_hot(experts_BLA, E), axis=(1, 2)) / (L * A)
    sums['sequence_balance'] = E * jnp.sum(share_BE * jnp.mean(probs_BLE, axis=1))
    sums['sequences'] = jnp.float32(B)
  if batch_axes:
    sums = jax.lax.psum(sums, batch_axes)
  return y_BLD, sums


def _weight_specs(w, mesh, hidden):
  """The experts' weights in their shard_map: experts over `expert`, F over `tensor` where
  it divides (the layout they are stored in, so fsdp alone gathers them), else whole."""
  e = 'expert' if mesh.shape.get('expert', 1) > 1 else None
  tensor = mesh.shape.get('tensor', 1)
  f = 'tensor' if tensor > 1 and hidden % tensor == 0 else None
  specs = {'wi_0': P(e, None, f), 'wi_1': P(e, None, f), 'wo': P(e, f, None),
           'wi_0_bias': P(e, f), 'wi_1_bias': P(e, f), 'wo_bias': P(e, None)}
  return {k: specs[k] for k in w}, f is not None


class MoE(nn.Module):
  """Drop-in for the MLP: routed experts (+ optional shared experts). Sows the sums its
  statistics are made of (SUMS, over the global batch; `statistics` finishes them) into
  the 'moe' collection.

  With moe.bias_update_rate > 0 it keeps a selection bias per expert in the 'moe_bias'
  collection (not a parameter: no gradient, no optimizer). Where that collection is mutable
  (training) the bias moves by the rate after routing (`moved_bias`), so it steers the next
  step's choices; a pipeline moves it once per step from the whole batch's load instead
  (zoo/models/transformer.py)."""
  config: Any  # frozen model config
  out_init_scale: float = 1.0

  @nn.compact
  def __call__(self, x_BLD):
    m, moe = self.config, self.config.moe
    E, D = moe.num_experts, x_BLD.shape[-1]
    F = moe.expert_mlp_dim or m.mlp_dim
    dtype, param_dtype = jnp.dtype(m.dtype), jnp.dtype(m.param_dtype)
    std = m.kernel_init_std
    init = lambda fan_in, scale=1.0: nn.initializers.normal(
        (std or fan_in ** -0.5) * scale ** 0.5)
    param = lambda name, shape, axes, fan_in, scale=1.0: self.param(
        name, nn.with_logical_partitioning(init(fan_in, scale), axes), shape, param_dtype)
    router = {'kernel': param('router', (D, E), ('embed', None), D).astype(jnp.float32)}
    w = {'wi_0': param('wi_0', (E, D, F), ('expert', 'embed', 'mlp'), D),
         'wo': param('wo', (E, F, D), ('expert', 'mlp', 'embed'), F, self.out_init_scale)}
    if m.activation in layers.GATED:
      w['wi_1'] = param('wi_1', (E, D, F), ('expert', 'embed', 'mlp'), D)
    if moe.use_bias:  # gpt-oss: biases on the router's logits and the experts' matmuls
      zeros = lambda name, shape, axes: self.param(
          name, nn.with_logical_partitioning(nn.initializers.zeros, axes), shape, param_dtype)
      for name in list(w):
        w[name + '_bias'] = zeros(name + '_bias', (E, w[name].shape[-1]), ('expert', 'mlp')
                                  if name != 'wo' else ('expert', 'embed'))
      router['bias'] = zeros('router_bias', (E,), (None,))
    cfg = {'num_experts': E, 'top_k': moe.top_k, 'normalize_top_k': moe.normalize_top_k,
           'capacity_factor': moe.capacity_factor, 'activation': m.activation,
           'router': moe.router, 'num_groups': moe.num_groups, 'top_groups': moe.top_groups,
           'routed_scale': moe.routed_scale, 'balance_scope': moe.balance_scope,
           'quant': m.quant, 'clamp': (m.swiglu_limit, m.swiglu_alpha),
           'gate_input': moe.gate_input, 'split_hidden': False}

    rate, bias, bias_E = moe.bias_update_rate, None, None
    if rate:
      bias = self.variable('moe_bias', 'bias', jnp.zeros, (E,), jnp.float32)
      bias_E = bias.value

    x_BLD = x_BLD.astype(dtype)
    mesh = jax.sharding.get_abstract_mesh()
    batch_axes = () if mesh.empty else tuple(a for a in sharding.BATCH_AXES if a in mesh.shape)
    length_axes = ('context',) if not mesh.empty and mesh.shape.get('context', 1) > 1 else ()
    if mesh.empty or mesh.size == 1 or x_BLD.shape[0] % math.prod(
        mesh.shape[a] for a in batch_axes) or (
            length_axes and x_BLD.shape[1] % mesh.shape['context']):
      # no mesh, or init's one-row example batch
      y_BLD, sums = _moe_shard(x_BLD, router, bias_E, w, cfg, 1, ())
    else:
      weight_specs, split_hidden = _weight_specs(w, mesh, F)
      token_spec = P(batch_axes, length_axes or None)
      fn = jax.shard_map(
          functools.partial(_moe_shard, cfg={**cfg, 'split_hidden': split_hidden},
                            num_shards=mesh.shape.get('expert', 1),
                            batch_axes=batch_axes + length_axes),
          mesh=mesh, in_specs=(token_spec, P(), P(), weight_specs),
          out_specs=(token_spec, P()), check_vma=False)
      y_BLD, sums = fn(x_BLD, router, bias_E, w)
    for name in sums:
      self.sow('moe', name, sums[name])
    if bias is not None and self.is_mutable_collection('moe_bias') and (
        not self.is_initializing()):
      bias.value = moved_bias(bias_E, statistics(sums)['load'], moe.top_k, rate)

    if moe.num_shared_experts:
      shared_BLD = layers.MLP(
          dims.shared_mlp_dim(m), m.activation, use_bias=m.use_bias,
          clamp=(m.swiglu_limit, m.swiglu_alpha), init_std=std,
          out_init_scale=self.out_init_scale, quant=cfg['quant'], name='shared', dtype=dtype,
          param_dtype=param_dtype)(x_BLD)
      if moe.shared_gate:  # Qwen2-MoE, Qwen3-Next: x sigmoid(x w), one gate per token
        gate_BL1 = layers.DenseGeneral(1, ('embed', None), init_std=std, name='shared_gate',
                                       dtype=dtype, param_dtype=param_dtype)(x_BLD)
        shared_BLD = (shared_BLD.astype(jnp.float32) *
                      jax.nn.sigmoid(gate_BL1.astype(jnp.float32))).astype(dtype)
      y_BLD = y_BLD + shared_BLD
    return y_BLD.astype(dtype)
