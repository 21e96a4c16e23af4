"""Transformer blocks and stacks, composed from the model config.

Glossary: B batch, L length, S key length, D d_model, V vocab.
"""

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo import kernels
from zoo import sharding
from zoo.kernels import bias as bias_lib
from zoo.kernels import mask as mask_lib
from zoo.kernels import ring
from zoo.models import attention
from zoo.models import delta_net
from zoo.models import dims
from zoo.models import head as head_lib
from zoo.models import layers
from zoo.models import lora
from zoo.models import mla
from zoo.models import moe as moe_lib
from zoo.models import mtp as mtp_lib
from zoo.models import pipeline

REMAT_POLICIES = {
    'full': None,  # save nothing, recompute the whole block
    'dots': jax.checkpoint_policies.checkpoint_dots,
    'dots_no_batch': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def dtypes(m):
  return dict(dtype=jnp.dtype(m.dtype), param_dtype=jnp.dtype(m.param_dtype))


def _out_init_scale(m):
  """GPT-2: residual output projections start 1/sqrt(2 layers) smaller."""
  return 1.0 / (2 * m.num_layers) if m.scale_residual_init else 1.0


class Block(nn.Module):
  """One layer: attention (+ cross-attention when given `encoded`) and MLP; sequential
  (pre- or post-norm, with model.sandwich_norm a norm after each sublayer too) or
  PaLM-parallel. kind (model.attention.pattern): 'local' attends within
  model.attention.window with the local RoPE base (model.rope_local_theta, unscaled; 0 =
  rotated as the global layers, gpt-oss), 'global' attends everything with
  model.rope_theta and model.rope_scaling, 'chunked' attends its model.attention.chunk
  (rotated as global), 'nope' attends everything without a rotary embedding (Llama 4,
  with its temperature tuning), 'delta' mixes by a Gated DeltaNet layer in place of
  attention (Qwen3-Next: zoo/models/delta_net.py); '' = no pattern (the window and chunk,
  if any, everywhere)."""
  config: Any  # frozen model config
  train: bool = False
  moe: bool = False  # a mixture of experts in place of the MLP
  kind: str = ''
  adapters: lora.Spec = lora.Spec()  # train.lora's (zoo.families.build)

  @nn.compact
  def __call__(self, x_BLD, mask, positions_BL, bias=None, encoded_BSD=None,
               cross_mask=None):
    m = self.config
    norm = lambda name: layers.Norm(m.norm, m.norm_eps, use_bias=m.use_bias, name=name,
                                    **dtypes(m))
    decoding = isinstance(mask, mask_lib.Mask) and mask.kv_cache
    if isinstance(bias, bias_lib.PositionBias) and bias.params is None:  # umT5: a table here
      bias = kernels.prepare_bias(m.attention.kernel, attention.RelativePositionBias(
          m.num_heads, bias.bidirectional, m.relative_buckets, m.relative_max_distance,
          name='relative_bias')(bias.q_positions, bias.kv_positions), jnp.dtype(m.dtype),
                                  decoding)
    local = self.kind == 'local'
    adapters = self.adapters.for_training(self.train)
    if isinstance(mask, mask_lib.Mask) and mask.chunk and self.kind in ('chunked', ''):
      mask = mask.chunked()
    elif self.kind and isinstance(mask, mask_lib.Mask):
      mask = mask.replace(window=m.attention.window if local else 0)
    rotary = m.position == 'rope' and self.kind != 'nope'
    a = m.attention
    multi_head = lambda name, self_attention, cache_kv_input=False: attention.MultiHeadAttention(
        m.num_heads, dims.kv_heads(m), dims.head_dim(m),
        use_bias=m.use_bias or a.use_bias,
        rope_theta=((m.rope_local_theta or m.rope_theta) if local else m.rope_theta)
        if self_attention and rotary else None,
        rope_scaling=() if local and m.rope_local_theta else dims.rope_scaling(m),
        rope_fraction=m.rope_fraction, output_gate=a.output_gate and self_attention,
        cache_kv_input=cache_kv_input,
        fold_scale=m.position == 't5_bias', query_scale=a.query_scale,
        softcap=a.softcap, qk_norm=(m.norm, m.norm_eps) if m.qk_norm else (),
        qk_l2_norm=m.norm_eps if a.qk_l2_norm and self_attention and rotary else 0.0,
        temperature=(a.nope_floor, a.nope_scale) if self.kind == 'nope' and a.nope_scale
        else (),
        sinks=a.sinks and self_attention,
        init_std=m.kernel_init_std,
        out_init_scale=_out_init_scale(m), kernel=m.attention.kernel,
        block_sizes=(m.attention.block_q, m.attention.block_kv),
        log_max_logit=m.attention.log_max_logit, quant=m.quant,
        lora=adapters, name=name, **dtypes(m))
    if self.kind == 'delta':  # Qwen3-Next's linear attention
      attend = _gated_delta_net(m, adapters)
    elif m.mla.kv_lora_rank:  # DeepSeek's multi-head latent attention
      attend = mla.LatentAttention(m, out_init_scale=_out_init_scale(m),
                                   rope_scaling=dims.rope_scaling(m), lora=adapters,
                                   name='attention', **dtypes(m))
    else:
      attend = multi_head('attention', self_attention=True)
    if self.moe:
      mlp = moe_lib.MoE(m, out_init_scale=_out_init_scale(m), name='moe')
    else:
      mlp = layers.MLP(m.mlp_dim, m.activation, use_bias=m.use_bias,
                       clamp=(m.swiglu_limit, m.swiglu_alpha), init_std=m.kernel_init_std,
                       out_init_scale=_out_init_scale(m),
                       quant=m.quant, lora=adapters, name='mlp', **dtypes(m))
    drop = lambda y: nn.Dropout(m.dropout_rate)(y, deterministic=not self.train)
    self_attend = lambda h: attend(h, mask=mask, q_positions_BL=positions_BL,
                                   kv_positions_BS=positions_BL, bias=bias)
    # decoding: the encoder output's keys and values are projected once, into the cache
    cross_attend = lambda h: multi_head('cross_attention', self_attention=False,
                                        cache_kv_input=decoding)(
        h, encoded_BSD, mask=cross_mask)

    if m.block == 'parallel':
      h_BLD = norm('norm')(x_BLD)
      x_BLD = x_BLD + drop(self_attend(h_BLD)) + drop(mlp(h_BLD))
    elif m.norm_position == 'pre':
      after = norm if m.sandwich_norm else lambda name: lambda h: h
      x_BLD = x_BLD + drop(after('post_attention_norm')(
          self_attend(norm('attention_norm')(x_BLD))))
      if encoded_BSD is not None:
        x_BLD = x_BLD + drop(after('post_cross_attention_norm')(
            cross_attend(norm('cross_attention_norm')(x_BLD))))
      x_BLD = x_BLD + drop(after('post_mlp_norm')(mlp(norm('mlp_norm')(x_BLD))))
    else:
      x_BLD = norm('attention_norm')(x_BLD + drop(self_attend(x_BLD)))
      if encoded_BSD is not None:
        x_BLD = norm('cross_attention_norm')(x_BLD + drop(cross_attend(x_BLD)))
      x_BLD = norm('mlp_norm')(x_BLD + drop(mlp(x_BLD)))
    return nn.with_logical_constraint(x_BLD, ('batch', 'length', 'activation_embed')), None


def _gated_delta_net(m, adapters):
  """The Gated DeltaNet layer of model.delta (a pattern's 'D' letter)."""
  d = m.delta
  return delta_net.GatedDeltaNet(
      d.key_heads, d.value_heads, d.key_dim, d.value_dim, d.conv_width, d.chunk,
      norm_eps=m.norm_eps, init_std=m.kernel_init_std, out_init_scale=_out_init_scale(m),
      quant=m.quant, lora=adapters, name='delta', **dtypes(m))


class PatternGroup(nn.Module):
  """One repeat of model.attention.pattern: a Block per letter ('L' local, 'G' global, 'C'
  chunked, 'N' no RoPE, 'D' Gated DeltaNet; experts in every moe.every-th), the unit
  scanned in patterned stacks."""
  config: Any
  train: bool = False
  adapters: lora.Spec = lora.Spec()  # train.lora's (zoo.families.build)
  remat: bool = True  # each layer with model.remat's policy (False: the pipeline's)

  @nn.compact
  def __call__(self, x_BLD, *args):
    m = self.config
    for i, letter in enumerate(m.attention.pattern):
      x_BLD, _ = rematted(Block, m, self.remat, scan_body=len(m.attention.pattern) == 1)(
          m, self.train, moe=has_experts(m, i), kind=KINDS[letter],
          adapters=self.adapters, name=f'block_{i}')(x_BLD, *args)
    return x_BLD, None


KINDS = {'L': 'local', 'G': 'global', 'C': 'chunked', 'N': 'nope', 'D': 'delta'}


def has_experts(m, i):
  """Whether layer i of a patterned stack has a mixture of experts (every moe.every-th)."""
  return bool(m.moe.num_experts) and (i + 1) % m.moe.every == 0


def layer_kind(m, i):
  """Layer i's kind under model.attention.pattern ('' without one)."""
  pattern = m.attention.pattern
  return KINDS[pattern[i % len(pattern)]] if pattern else ''


class MoEGroup(nn.Module):
  """`moe.every` layers whose last has a mixture of experts (the unit scanned in MoE stacks)."""
  config: Any
  train: bool = False
  adapters: lora.Spec = lora.Spec()  # train.lora's (zoo.families.build)
  remat: bool = True  # each layer with model.remat's policy (False: the pipeline's)

  @nn.compact
  def __call__(self, x_BLD, *args):
    every = self.config.moe.every
    for i in range(every):
      x_BLD, _ = rematted(Block, self.config, self.remat, scan_body=every == 1)(
          self.config, self.train, moe=i == every - 1, adapters=self.adapters,
          name=f'block_{i}')(x_BLD, *args)
    return x_BLD, None


def stack(m, train, num_layers, name, owner, adapters=lora.Spec()):
  """`num_layers` Blocks, scanned (one compiled body) or unrolled, with the remat policy.
  With experts, the scanned unit is a MoEGroup of moe.every layers. On a mesh with a
  `stage` axis (mesh.stage > 1) a scanned stack runs as a pipeline (zoo/models/pipeline.py)
  on the same stacked parameters, read from `owner` (the module the stack is built in);
  initialising and decoding run the scan.

  With model.attention.pattern the unit is a PatternGroup of len(pattern) layers, and the
  layers after the last whole pattern (Gemma 3 1B: 26 = 4 x 6 + 2) run as `name`_tail_j.
  With model.moe.first_dense = k the first k layers (dense MLPs) run first as `name`_dense.

  -> fn(x, mask, positions, bias=None, encoded=None, cross_mask=None) -> (x, None).
  """
  unit, length = Block, num_layers
  dense = None
  if m.moe.num_experts and m.moe.first_dense:  # DeepSeek: the first layers' MLPs dense
    dense = _body(m, train, Block, m.moe.first_dense, f'{name}_dense', owner, adapters)
    num_layers -= m.moe.first_dense
  if m.moe.num_experts:
    unit, length = MoEGroup, num_layers // m.moe.every
  tail = []
  if m.attention.pattern:
    period = len(m.attention.pattern)
    unit, length = PatternGroup, num_layers // period
    block = rematted(Block, m)
    tail = [block(m, train, moe=has_experts(m, i), kind=layer_kind(m, i),
                  name=f'{name}_tail_{i - length * period}')
            for i in range(length * period, num_layers)]
  body = _body(m, train, unit, length, name, owner, adapters)

  def run(x_BLD, *args):
    if dense is not None:
      x_BLD, _ = dense(x_BLD, *args)
    x_BLD, _ = body(x_BLD, *args) if length else (x_BLD, None)
    for block in tail:
      x_BLD, _ = block(x_BLD, *args)
    return x_BLD, None
  return run


def rematted(block, m, remat=True, scan_body=False):
  """`block` (a module class) with model.remat's policy applied; as is with 'none' or
  remat=False. A group of layers (PatternGroup, MoEGroup) remats each of its layers, so a
  layer's backward recomputes that layer alone, not every layer of the group at once. Only
  a scan's own body (`scan_body`) may let XLA merge the recomputation with other work
  (prevent_cse=False); a group's layers or the unscanned tail may not, or XLA recomputes
  them all together."""
  if m.remat == 'none' or not remat:
    return block
  return nn.remat(block, policy=REMAT_POLICIES[m.remat],
                  prevent_cse=not (scan_body and m.scan_layers))


def _body(m, train, unit, length, name, owner, adapters):
  """`length` units, scanned or unrolled (stack's body)."""
  # the pipeline remats each unit itself (it picks the unit's parameters)
  plain = unit if unit is Block else functools.partial(unit, remat=False)
  if unit is Block:  # a group remats its layers itself
    unit = rematted(unit, m, scan_body=True)
  if m.scan_layers:
    axes = {k: 0 for k in ('params', 'moe', 'moe_bias', 'cache', 'logits', 'indexer')}
    scanned = nn.scan(unit, variable_axes=axes,
                      split_rngs={'params': True, 'dropout': True},
                      in_axes=(nn.broadcast,) * 5, length=length, unroll=m.scan_unroll,
                      metadata_params={nn.PARTITION_NAME: 'layers'})
    module = scanned(m, train, adapters=adapters, name=name)

    def run_scanned(x_BLD, *args):
      args = (*args, *(None,) * (5 - len(args)))
      stages = sharding.axis_size('stage')
      if stages == 1 or owner.is_initializing() or args[0].kv_cache:
        return module(x_BLD, *args)
      rng = owner.make_rng('dropout') if train and dims.dropout(m, adapters) else None
      variables = {k: nn.meta.unbox(owner.variables[k][name])
                   for k in ('params', 'moe_bias') if k in owner.variables}
      checkpoint = None if m.remat == 'none' else functools.partial(
          jax.checkpoint, policy=REMAT_POLICIES[m.remat], prevent_cse=False)
      x_BLD, sums = _pipelined(plain(m, train, adapters=adapters), variables, x_BLD, args, stages,
                               m.pipeline_microbatches or stages, m.pipeline_repeats, rng,
                               checkpoint)
      if sums:
        _sow_moe(owner, name, m.moe, variables.get('moe_bias'), sums)
      return x_BLD, None
    return run_scanned

  blocks = [unit(m, train, adapters=adapters, name=f'{name}_{i}') for i in range(length)]

  def run(x_BLD, *args):
    for block in blocks:
      x_BLD, _ = block(x_BLD, *args)
    return x_BLD, None
  return run


def unstack_layers(tree):
  """Variables of a scanned model -> the same model's with scan_layers=False: each stack
  (a `layers` subtree, leaves [layers, ...]) becomes `layers_0`, `layers_1`, ..., each
  holding its layer's slices."""
  if not isinstance(tree, dict):
    return tree
  out = {}
  for key, value in tree.items():
    if key == 'layers':
      length = jax.tree.leaves(value)[0].shape[0]
      out.update({f'layers_{i}': jax.tree.map(lambda a, i=i: a[i], value)
                  for i in range(length)})
    else:
      out[key] = unstack_layers(value)
  return out


def _pipelined(block, variables, x_BLD, args, stages, microbatches, repeats, rng,
               checkpoint):
  """The scanned stack's layers on the pipeline: each layer `block` applied with its slice
  of the stacked variables (parameters, MoE biases read) -> (x, its MoE layers' sums
  [layers, ...] over the whole batch, {} without experts); a position bias the flash_bias
  kernel computes (a bias.PositionBias) travels as its positions, its table whole, and is
  described again for each microbatch, as the kernel takes it."""
  mask, positions_BL, bias, encoded_BSD, cross_mask = args
  table = bias if isinstance(bias, bias_lib.PositionBias) else None
  if table is not None:
    bias = (bias.q_positions, bias.kv_positions)

  def layer(variables_one, x_bLD, rows, key):
    mask, positions, bias, encoded, cross = rows
    if table is not None:
      bias = table.replace(q_positions=bias[0], kv_positions=bias[1])
    rngs = None if key is None else {'dropout': key}
    (x_bLD, _), sown = block.apply(variables_one, x_bLD, mask, positions, bias, encoded,
                                   cross, rngs=rngs, mutable=['moe'])
    return x_bLD, sown.get('moe', {})
  return pipeline.run(layer, variables, x_BLD,
                      (mask, positions_BL, bias, encoded_BSD, cross_mask), stages,
                      microbatches, rng, repeats, checkpoint)


def _sow_moe(owner, name, moe_config, biases, sums):
  """A pipelined stack's MoE sums into `owner`'s 'moe' collection (as `name`_pipeline), and,
  where the biases move (training), each layer's bias moved once from the whole batch's
  load."""
  owner.sow('moe', f'{name}_pipeline', sums)
  if biases is None or not owner.is_mutable_collection('moe_bias'):
    return

  def moved(bias_tree, sums_tree):
    if 'bias' in bias_tree:  # a MoE module: its bias beside its sums
      load = moe_lib.statistics({k: v[0] for k, v in sums_tree.items()})['load']
      return {'bias': moe_lib.moved_bias(bias_tree['bias'], load, moe_config.top_k,
                                         moe_config.bias_update_rate)}
    return {k: moved(v, sums_tree[k]) for k, v in bias_tree.items()}
  owner.put_variable('moe_bias', name, moved(biases, sums))


def default_positions(batch, inputs_key='inputs', positions_key='positions',
                      segment_key='segment_ids'):
  """The batch's (segment_ids, positions), defaulting to one segment and arange."""
  ids_BL = batch[inputs_key]
  segment_ids_BL = batch.get(segment_key)
  if segment_ids_BL is None:
    segment_ids_BL = jnp.ones_like(ids_BL)
  positions_BL = batch.get(positions_key)
  if positions_BL is None:
    positions_BL = jnp.broadcast_to(jnp.arange(ids_BL.shape[1]), ids_BL.shape)
  return segment_ids_BL, positions_BL


class Embeddings(nn.Module):
  """Adds position (and token-type) embeddings to the token embeddings, then the optional
  embedding norm (BERT) and dropout."""
  config: Any

  @nn.compact
  def __call__(self, x_BLD, positions_BL, token_type_ids_BL, train):
    m = self.config
    if m.position == 'learned':
      x_BLD += layers.Embed(m.max_length, m.d_model, axes=(None, 'embed'),
                            init_std=m.kernel_init_std or 0.02,
                            name='position_embed', **dtypes(m))(positions_BL)
    elif m.position == 'sinusoidal':
      x_BLD += layers.sinusoidal(positions_BL, m.d_model).astype(x_BLD.dtype)
    if m.type_vocab_size:
      x_BLD += layers.Embed(m.type_vocab_size, m.d_model, axes=(None, 'embed'),
                            init_std=m.kernel_init_std or 0.02, name='type_embed',
                            **dtypes(m))(token_type_ids_BL)
    if m.embedding_norm:
      x_BLD = layers.Norm(m.norm, m.norm_eps, use_bias=m.use_bias, name='norm',
                          **dtypes(m))(x_BLD)
    x_BLD = nn.Dropout(m.dropout_rate)(x_BLD, deterministic=not train)
    return nn.with_logical_constraint(x_BLD, ('batch', 'length', 'activation_embed'))


def label_head(m, x_BD, use_bias):
  """Pooled states -> float32 logits [B, model.num_labels] (a regression's one value); a
  bias as the family's Hugging Face head has one (BERT's classifier; not a decoder's
  score)."""
  return layers.DenseGeneral(m.num_labels, ('embed', None), use_bias=use_bias,
                             init_std=m.kernel_init_std or 0.02, name='classifier',
                             **dtypes(m))(x_BD).astype(jnp.float32)


class Encoder(nn.Module):
  """Encoder-only (BERT): bidirectional attention inside each segment, padding excluded.

  batch {inputs, token_type_ids?, segment_ids?, positions?} -> {'logits': float32 MLM logits
  [B, L, V], 'nsp_logits': [B, 2] when model.nsp_head}; head=False: 'hidden' [B, L, D] (what
  the vocabulary projection reads, zoo/models/head.py) in place of 'logits'. With
  model.num_labels: {'label_logits': [B, num_labels]} from the pooled first token only.
  """
  config: Any
  adapters: lora.Spec = lora.Spec()  # train.lora's (zoo.families.build)

  @nn.compact
  def __call__(self, batch, train=False, head=True):
    m = self.config
    ids_BL = batch['inputs']
    segment_ids_BL, positions_BL = default_positions(batch)
    token_type_ids_BL = batch.get('token_type_ids')
    if token_type_ids_BL is None:
      token_type_ids_BL = jnp.zeros_like(ids_BL)
    embed = layers.Embed(m.vocab_size, m.d_model, init_std=m.embed_init_std, name='token_embed',
                         **dtypes(m))
    x_BLD = Embeddings(m, name='embeddings')(embed(ids_BL), positions_BL, token_type_ids_BL,
                                             train)
    mask = mask_lib.Mask(segment_ids_BL, segment_ids_BL)
    x_BLD, _ = stack(m, train, m.num_layers, 'layers', self, self.adapters)(x_BLD, mask,
                                                                             positions_BL)
    if m.norm_position == 'pre':
      x_BLD = layers.Norm(m.norm, m.norm_eps, use_bias=m.use_bias, name='final_norm',
                          **dtypes(m))(x_BLD)

    dense = lambda name, features, axes: layers.DenseGeneral(
        features, axes, use_bias=True, init_std=m.kernel_init_std, name=name, **dtypes(m))
    pool = lambda: jnp.tanh(dense('pooler', m.d_model, ('embed', 'mlp'))(x_BLD[:, 0]))
    if m.num_labels:  # fine-tuning: a label head on the pooled first token, no LM head
      pooled_BD = nn.Dropout(m.dropout_rate)(pool(), deterministic=not train)
      return {'label_logits': label_head(m, pooled_BD, use_bias=True)}
    # MLM head: transform, then logits against the (tied) word embeddings plus a bias.
    h_BLD = layers.ACTIVATION_FNS[m.activation](dense('mlm_transform', m.d_model,
                                                      ('embed', 'mlp'))(x_BLD))
    h_BLD = layers.Norm(m.norm, m.norm_eps, use_bias=m.use_bias, name='mlm_norm',
                        **dtypes(m))(h_BLD)
    if not head:  # the chunked loss projects it itself (zoo/models/head.py)
      outputs = {'hidden': h_BLD}
    else:
      if m.tie_embeddings:
        logits_BLV = head_lib.Head(m, name='logits')(h_BLD, embed.embedding, self.param(
            'mlm_bias', nn.with_logical_partitioning(nn.initializers.zeros, ('vocab',)),
            (m.vocab_size,), jnp.dtype(m.param_dtype)))
      else:
        logits_BLV = head_lib.Head(m, use_bias=True, name='logits')(h_BLD)
      outputs = {'logits': nn.with_logical_constraint(logits_BLV, ('batch', 'length', 'vocab'))}
    if m.nsp_head:  # pooler (dense + tanh on the first token) and the next-sentence head
      pooled_BD = pool()
      outputs['nsp_logits'] = dense('nsp', 2, ('embed', None))(pooled_BD).astype(jnp.float32)
    return outputs


class Decoder(nn.Module):
  """Decoder-only LM: batch {inputs, segment_ids?, positions?} -> float32 logits [B, L, V].

  Decoding (zoo/infer) adds kv_segment_ids and kv_positions [B, S] for the S slots of the
  'cache' collection: the inputs are appended to the cache and attend to it. Serving
  (zoo/serve) adds `pages` too (a zoo.kernels.mask.Pages): the cache is a pool of pages
  and S each row's pages' slots. head=False:
  the hidden states [B, L, D] the vocabulary projection reads (zoo/models/head.py). With
  model.num_labels: {'label_logits': [B, num_labels]} from each row's last real token
  (rows right-padded, one example each).

  On a context mesh (mesh.context = n > 1) the tokens are laid out balanced for ring
  attention (2n chunks, device i holding chunks i and 2n-1-i, each token's slot kept for
  the causal mask, its position for RoPE) and the hidden states put back in order after
  the last layer, so outputs and the loss are those of the unsplit sequence."""
  config: Any  # frozen model config
  adapters: lora.Spec = lora.Spec()  # train.lora's (zoo.families.build)

  @nn.compact
  def __call__(self, batch, train=False, head=True):
    m = self.config
    ids_BL = batch['inputs']
    segment_ids_BL, positions_BL = default_positions(batch)
    kv_cache = 'kv_segment_ids' in batch
    n = 1 if kv_cache else sharding.axis_size('context')
    balanced = n > 1 and ids_BL.shape[1] % (2 * n) == 0
    slots_BL = None
    if balanced:
      slots_BL = jnp.broadcast_to(jnp.arange(ids_BL.shape[1], dtype=jnp.int32), ids_BL.shape)
      ids_BL, segment_ids_BL, positions_BL, slots_BL = (
          ring.balance(x, n) for x in (ids_BL, segment_ids_BL, positions_BL, slots_BL))
    embed = layers.Embed(m.vocab_size, m.d_model, init_std=m.embed_init_std, name='token_embed',
                         **dtypes(m))
    x_BLD = embed(ids_BL)
    if m.embed_scale:  # Gemma: x sqrt(d_model), rounded to the compute dtype as Gemma does
      x_BLD = x_BLD * jnp.asarray(m.d_model ** 0.5, x_BLD.dtype)
    x_BLD = Embeddings(m, name='embeddings')(x_BLD, positions_BL, None, train)
    x_BLD, blocks_BL = self.images(x_BLD, batch)

    kv_segment_ids_BS = batch['kv_segment_ids'] if kv_cache else segment_ids_BL
    kv_positions_BS = batch['kv_positions'] if kv_cache else positions_BL
    chunk = m.attention.chunk
    mask = mask_lib.Mask(segment_ids_BL, kv_segment_ids_BS, causal=True,
                          window=m.attention.window, kv_cache=kv_cache, slots=slots_BL,
                          lookahead=batch.get('lookahead', 0), chunk=chunk,
                          pages=batch.get('pages'), q_block_ids=blocks_BL,
                          kv_block_ids=blocks_BL)
    if chunk:  # Llama 4: each document's chunks, for the chunked layers (Block)
      mask = mask.replace(
          q_chunk_ids=mask_lib.chunk_segments(segment_ids_BL, positions_BL, chunk),
          kv_chunk_ids=mask_lib.chunk_segments(kv_segment_ids_BS, kv_positions_BS, chunk))
    bias = None
    if m.position == 'alibi':
      bias = kernels.prepare_bias(m.attention.kernel, attention.alibi_bias(
          positions_BL, kv_positions_BS, m.num_heads), jnp.dtype(m.dtype), kv_cache)
    x_BLD, _ = stack(m, train, m.num_layers, 'layers', self, self.adapters)(
        x_BLD, mask, positions_BL, bias)
    if balanced:
      x_BLD = nn.with_logical_constraint(ring.unbalance(x_BLD, n),
                                         ('batch', 'length', 'activation_embed'))

    if m.norm_position == 'pre':
      x_BLD = layers.Norm(m.norm, m.norm_eps, use_bias=m.use_bias, name='final_norm',
                          **dtypes(m))(x_BLD)
    if m.mtp.depth and kv_cache:  # what speculative decoding's prediction module reads
      self.sow('mtp', 'hidden', x_BLD)
    if m.mtp.depth and not kv_cache:  # the loss reads the modules' hidden states
      hidden = mtp_lib.MTP(m, Block, train, self.adapters, name='mtp')(
          x_BLD, embed, batch['inputs'], *default_positions(batch))
      for k, h_BLD in enumerate(hidden, 1):
        self.sow('mtp', f'depth_{k}', h_BLD)
    if m.num_labels:  # fine-tuning: a label head on each row's last real token
      last_B = jnp.maximum(jnp.sum((segment_ids_BL > 0).astype(jnp.int32), axis=1) - 1, 0)
      last_BD = jnp.take_along_axis(x_BLD, last_B[:, None, None], axis=1)[:, 0]
      last_BD = nn.Dropout(m.dropout_rate)(last_BD, deterministic=not train)
      return {'label_logits': label_head(m, last_BD, use_bias=False)}
    if m.tie_embeddings and m.scale_tied_logits:
      x_BLD = x_BLD * m.d_model ** -0.5
    if not head:
      return x_BLD
    logits_BLV = head_lib.Head(m, use_bias=m.use_bias, name='logits')(
        x_BLD, embed.embedding if m.tie_embeddings else None)
    return nn.with_logical_constraint(logits_BLV, ('batch', 'length', 'vocab'))

  def images(self, x_BLD, batch):
    """-> (the token embeddings with a row's images in their place, the attention mask's
    image blocks [B, L] or None); a text decoder has none (zoo/models/multimodal.py)."""
    del batch
    return x_BLD, None
