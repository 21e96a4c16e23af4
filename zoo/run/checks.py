"""What a config's fields mean together: against the family that builds the model, the
attention kernels, the model's derived dimensions, the mesh and each training phase.
Range checks come first (zoo/config/checks.py); each failure is one ConfigError naming the
field and the fix, before anything is written or compiled.
"""

from zoo import families
from zoo import kernels
from zoo import sharding
from zoo.errors import ConfigError
from zoo.kernels import flash_bias
from zoo.kernels import splash
from zoo.models import dims
from zoo.models import layers
from zoo.models import transformer

REMAT_POLICIES = ('none', *transformer.REMAT_POLICIES)


def check(config):
  """Raises ConfigError naming the first combination that cannot work; -> the family."""
  family = families.get(config.model)
  m, d = config.model, config.data
  _validate_dims(m)
  _validate_family(m, family)
  _validate_attention(m, d, family)
  if d.objective not in family.OBJECTIVES:
    raise ConfigError(f'data.objective={d.objective!r} does not train model.family='
                      f'{family.NAME!r}; use one of {family.OBJECTIVES}')
  if d.task.kind and d.task.kind not in family.TASKS:
    raise ConfigError(f'data.task.kind={d.task.kind!r} is not built for model.family='
                      f'{family.NAME!r}; use one of {", ".join(map(repr, family.TASKS))}')
  _validate_quant(m)
  _validate_lora(config.train.lora, m)
  _validate_context(config.mesh.context, m, d, family)
  _validate_stage(config.mesh, m, family, config.train.batch_size)
  _validate_qk_clip(config)
  if hasattr(family, 'check'):
    family.check(config)
  return family


def _validate_qk_clip(config):
  """MuonClip reads each head's max logit and scales its query and key weights."""
  m, clip = config.model, config.optim.muon.qk_clip
  if m.attention.log_max_logit and config.mesh.stage > 1:
    raise ConfigError('model.attention.log_max_logit is not carried through a pipeline '
                      f'(mesh.stage={config.mesh.stage}): set mesh.stage=1 or drop it')
  if not clip:
    return
  if not m.attention.log_max_logit:
    raise ConfigError(f'optim.muon.qk_clip={clip:g} reads each head\'s max logit: set '
                      'model.attention.log_max_logit=True')
  if m.qk_norm:
    raise ConfigError(f'optim.muon.qk_clip={clip:g} scales query and key weights, which '
                      'model.qk_norm normalises away: set optim.muon.qk_clip=0 (QK-norm '
                      'bounds the logits itself)')
  if config.train.lora.rank:
    raise ConfigError(f'optim.muon.qk_clip={clip:g} rescales query and key weights that '
                      f'train.lora.rank={config.train.lora.rank} freezes: set one of them to 0')


def _validate_dims(m):
  """What the model's derived dimensions must hold (zoo/models/dims.py)."""
  if m.num_kv_heads < 0 or m.num_heads % dims.kv_heads(m):
    raise ConfigError(f'model.num_kv_heads={m.num_kv_heads} does not divide '
                      f'model.num_heads={m.num_heads}; use a divisor (1 = MQA)')
  if m.position == 'rope' and dims.head_dim(m) % 2:
    raise ConfigError(f'model.position=rope needs an even head_dim, got {dims.head_dim(m)}')
  if m.remat not in REMAT_POLICIES:
    raise ConfigError(f'model.remat={m.remat!r} is not one of '
                      f'{", ".join(map(repr, REMAT_POLICIES))}')


def _validate_moe_layers(m, family):
  """model.moe.first_dense and every against each stack's layer count."""
  moe = m.moe
  if not moe.num_experts:
    return
  for n in (m[field] for field in family.LAYER_FIELDS):
    if not 0 <= moe.first_dense < n:
      raise ConfigError(f'model.moe.first_dense={moe.first_dense} must leave MoE layers: '
                        f'in [0, {n})')
    n -= moe.first_dense
    if not 1 <= moe.every <= n or (n % moe.every and not m.attention.pattern):
      raise ConfigError(f'model.moe.every={moe.every} must divide the layer count {n} '
                        '(a MoE in every k-th layer, after model.moe.first_dense; a '
                        "pattern's tail may end between them)")


def _validate_mla(m, family):
  if m.mla.kv_lora_rank and (not family.LATENT_ATTENTION or m.position != 'rope' or
                             m.attention.window):
    raise ConfigError(f'model.mla.kv_lora_rank={m.mla.kv_lora_rank}: latent attention is built '
                      "for decoders with model.position='rope' and no window; set "
                      'kv_lora_rank=0 for this model')


def _validate_mtp(m, family):
  depth = m.mtp.depth
  if depth and (not family.PREDICTION_MODULES or m.position not in ('rope', 'none') or
                m.num_labels):
    raise ConfigError(f'model.mtp.depth={depth}: multi-token prediction is built for '
                      "language-model decoders with model.position='rope' (or 'none'); "
                      f'model.family={family.NAME!r}, position={m.position!r}; set '
                      'model.mtp.depth=0')


def _validate_quant(m):
  """model.quant.tile divides what each quantized matmul contracts."""
  q = m.quant
  if not q.tile or q.mode == 'none':
    return
  widths = {n: k for n, (k, _) in dense_layers(m).items()}
  if m.moe.num_experts and m.moe.num_shared_experts:
    widths['shared wo'] = dims.shared_mlp_dim(m)
  bad = {n: k for n, k in widths.items() if k % q.tile}
  if bad:
    raise ConfigError(f'model.quant.tile={q.tile} does not divide what '
                      f'{", ".join(f"{n} contracts ({k})" for n, k in bad.items())}; use a '
                      'common divisor (e.g. 128) or tile=0 (a scale per channel)')


def _validate_lora(lora, m):
  """train.lora: targets the model has, a rank each can hold."""
  if not lora.rank:
    return
  widths = dense_layers(m)
  targets = [t.strip() for t in lora.targets.split(',') if t.strip()]
  missing = [t for t in targets if t not in widths]
  if missing or not targets:
    raise ConfigError(f'train.lora.targets={lora.targets!r}: {", ".join(missing) or "none"} '
                      f'names no dense layer of this model; choose from {", ".join(widths)}')
  for t in targets:
    if lora.rank > min(widths[t]):
      raise ConfigError(f'train.lora.rank={lora.rank} exceeds {t}\'s smaller dimension '
                        f'{min(widths[t])} (in {widths[t][0]}, out {widths[t][1]}); use a rank '
                        f'<= {min(widths[t])}')


def dense_layers(m):
  """The dense layers a model builds -> (contracted width, output width) by layer name."""
  h, q = m.num_heads, m.num_heads * dims.head_dim(m)
  if m.mla.kv_lora_rank:
    a = m.mla
    rope = a.qk_nope_head_dim + a.qk_rope_head_dim
    out = {'kv_down': (m.d_model, a.kv_lora_rank + a.qk_rope_head_dim),
           'out': (h * a.v_head_dim, m.d_model)}
    if a.q_lora_rank:
      out.update(query_down=(m.d_model, a.q_lora_rank), query_up=(a.q_lora_rank, h * rope))
    else:
      out['query'] = (m.d_model, h * rope)
  else:
    kv = dims.kv_heads(m) * dims.head_dim(m)
    out = {'query': (m.d_model, q), 'key': (m.d_model, kv), 'value': (m.d_model, kv),
           'out': (q, m.d_model)}
  moe = m.moe
  if not moe.num_experts or moe.first_dense or moe.every > 1:
    inner = ('wi_0', 'wi_1') if m.activation in layers.GATED else ('wi',)
    out.update({name: (m.d_model, m.mlp_dim) for name in inner}, wo=(m.mlp_dim, m.d_model))
  return out


def _validate_family(m, family):
  """What the family's model builds: its block counts, positions, blocks, windows."""
  for field in family.LAYER_FIELDS:
    if m[field] <= 0:
      raise ConfigError(f'model.{field}={m[field]} must be positive: model.family='
                        f'{family.NAME!r} counts its blocks in model.'
                        f'{" and model.".join(family.LAYER_FIELDS)}')
  for name, allowed in (('position', family.POSITIONS), ('block', family.BLOCKS)):
    if m[name] not in allowed:
      raise ConfigError(f'model.{name}={m[name]!r} is not built for model.family='
                        f'{family.NAME!r}; use one of {", ".join(map(repr, allowed))}')
  if m.relative_bias_per_layer and m.position != 't5_bias':
    raise ConfigError(f'model.relative_bias_per_layer=True gives each layer a T5 bias table, '
                      f"and model.position={m.position!r} has none; set position='t5_bias' "
                      'or the flag False')
  if m.separate_encoder_embed and not family.SEPARATE_ENCODER_EMBED:
    raise ConfigError(f'model.separate_encoder_embed=True: model.family={family.NAME!r} has '
                      'no encoder beside a decoder; set it False')
  if (m.attention.window and family.TWO_SIDED_WINDOW and m.position == 't5_bias' and
      m.attention.kernel in ('auto', 'flash_bias')):
    raise ConfigError(f"model.attention.window={m.attention.window} with model.position="
                      "'t5_bias': the encoder's window is two-sided and flash_bias takes "
                      "causal windows only; set model.attention.kernel='xla' (or position "
                      "'rope', as T5Gemma)")
  _validate_mla(m, family)
  _validate_mtp(m, family)
  _validate_moe_layers(m, family)
  if m.attention.window and not family.SLIDING_WINDOW:
    raise ConfigError(f'model.attention.window={m.attention.window}: a sliding window is not '
                      f'built for model.family={family.NAME!r}; set it to 0')


def _validate_attention(m, d, family):
  a = m.attention
  if a.kernel not in kernels.KERNELS:
    raise ConfigError(f'model.attention.kernel={a.kernel!r} is not one of '
                      f'{", ".join(map(repr, kernels.KERNELS))}')
  if a.kernel == 'splash' and dims.has_position_bias(m):
    raise ConfigError(f"model.attention.kernel='splash' takes no additive bias, which "
                      f"model.position={m.position!r} adds; use 'flash_bias' (TPU), 'auto' or "
                      "'xla'")
  if a.sinks and a.kernel in kernels.SINKS_REFUSED:
    raise ConfigError(f'model.attention.kernel={a.kernel!r} takes no attention sinks '
                      "(model.attention.sinks); use 'auto', 'splash' or 'xla'")
  if a.kernel == 'flash_bias':
    if not dims.has_position_bias(m):
      raise ConfigError(f"model.attention.kernel='flash_bias' computes a position bias, and "
                        f"model.position={m.position!r} adds none; use 'splash' or 'auto'")
    lengths = {shape[1] for shape, _ in family.batch_spec(d, 1).values() if len(shape) == 2}
    for length in sorted(lengths):
      try:
        flash_bias.block_sizes(length, length, a.block_q, a.block_kv)
      except ValueError as e:
        raise ConfigError(str(e)) from None
  if a.kernel == 'splash':
    if d.seq_len % 128:
      raise ConfigError(f"model.attention.kernel='splash' needs data.seq_len={d.seq_len} to be a "
                        "multiple of 128 (its block width); change seq_len or use 'xla'")
    for name in ('block_q', 'block_kv'):
      block = a[name]
      if block < 0 or block % 128 or (block and d.seq_len % block):
        raise ConfigError(f'model.attention.{name}={block} must be a multiple of 128 dividing '
                          f'data.seq_len={d.seq_len}; or 0 for min(512, seq_len)')
  if a.softcap and a.kernel in kernels.SOFTCAP_REFUSED:
    raise ConfigError(f'model.attention.kernel={a.kernel!r} cannot soft-cap the logits '
                      f"(model.attention.softcap={a.softcap}); use 'auto', 'splash' or 'xla'")
  if a.sinks and m.mla.kv_lora_rank:
    raise ConfigError('model.attention.sinks is for multi-head attention; latent attention '
                      '(model.mla.kv_lora_rank > 0) has none: set sinks=False')
  if a.chunk and d.seq_len % a.chunk and a.chunk % d.seq_len:
    raise ConfigError(f'model.attention.chunk={a.chunk} does not divide data.seq_len='
                      f'{d.seq_len} (nor is it a multiple of it); chunks would be cut by the '
                      'row\'s end: make one divide the other (Llama 4: 8192)')
  _validate_pattern(m, family)
  _validate_delta(m, d, family)


def _validate_delta(m, d, family):
  """The Gated DeltaNet layers ('D' in the pattern), the gated attention and partial
  rotary beside them, and the gated shared expert: one line each before compiling."""
  delta, pattern = m.delta, m.attention.pattern
  if not 0 < m.rope_fraction <= 1 or int(dims.head_dim(m) * m.rope_fraction) % 2:
    raise ConfigError(f'model.rope_fraction={m.rope_fraction} must be in (0, 1] and rotate an '
                      f'even number of the {dims.head_dim(m)} head channels (Qwen3-Next: 0.25)')
  if m.moe.shared_gate and not m.moe.num_shared_experts:
    raise ConfigError('model.moe.shared_gate gates the shared experts, and '
                      'num_shared_experts=0; set num_shared_experts=1 or shared_gate=False')
  if 'D' not in pattern:
    return
  if family.ATTENTION != 'causal':
    raise ConfigError(f"model.attention.pattern={pattern!r}: Gated DeltaNet ('D') layers run "
                      f'left to right, for decoders; model.family={m.family!r}')
  if min(delta.key_heads, delta.value_heads, delta.key_dim, delta.value_dim,
         delta.conv_width, delta.chunk) < 1 or delta.value_heads % delta.key_heads:
    raise ConfigError(f'model.delta.key_heads={delta.key_heads} must divide value_heads='
                      f'{delta.value_heads}, and the dims, conv_width and chunk be >= 1 '
                      '(Qwen3-Next: 16, 32, 128, 128, 4, 64)')
  if d.seq_len % delta.chunk:
    raise ConfigError(f'model.delta.chunk={delta.chunk} does not divide data.seq_len='
                      f'{d.seq_len}; use a divisor (Qwen3-Next: 64)')
  if m.mla.kv_lora_rank or m.mtp.depth:
    raise ConfigError("Gated DeltaNet ('D') layers beside latent attention or MTP modules "
                      'are not built; set model.mla.kv_lora_rank=0 and model.mtp.depth=0')


def _validate_pattern(m, family):
  """model.attention.pattern: its letters, its window and chunk, the layers it repeats
  over; and the layer kinds' fields (chunk, NoPE temperature, QK L2 norm) without one."""
  a, pattern = m.attention, m.attention.pattern
  _validate_layer_kinds(m, family)
  if not pattern:
    return
  if set(pattern) - set('LGCND'):
    raise ConfigError(f'model.attention.pattern={pattern!r}: use L (local), G (global), C '
                      "(chunked), N (global, no RoPE) and D (Gated DeltaNet), e.g. 'LG' "
                      "(Gemma 2), 'LLLLLG' (Gemma 3), 'CCCN' (Llama 4), 'DDDG' (Qwen3-Next)")
  if 'L' in pattern and not a.window:
    raise ConfigError(f'model.attention.pattern={pattern!r} has local layers but '
                      'model.attention.window=0; set the local window (Gemma 2: 4096)')
  if 'C' in pattern and not a.chunk:
    raise ConfigError(f'model.attention.pattern={pattern!r} has chunked layers but '
                      'model.attention.chunk=0; set the chunk (Llama 4: 8192)')
  for field in family.LAYER_FIELDS:
    if len(pattern) > m[field]:
      raise ConfigError(f'model.attention.pattern={pattern!r} is longer than model.{field}='
                        f'{m[field]}; shorten it or add layers')
  if m.moe.num_experts and m.moe.first_dense:
    raise ConfigError(f'model.attention.pattern={pattern!r} with model.moe.first_dense='
                      f'{m.moe.first_dense}: a pattern takes experts in every layer or every '
                      'moe.every-th; set first_dense=0')
  if m.moe.num_experts and len(pattern) % m.moe.every:
    raise ConfigError(f'model.attention.pattern={pattern!r} with model.moe.every='
                      f'{m.moe.every}: every must divide the pattern\'s {len(pattern)} layers '
                      "(Llama 4 Maverick: 'CCCN' with every=2)")


def _validate_layer_kinds(m, family):
  """Chunks, NoPE layers and the QK L2 norm, one line each before compiling."""
  a, pattern = m.attention, m.attention.pattern
  if a.chunk < 0 or a.nope_scale < 0 or a.nope_floor <= 0:
    raise ConfigError(f'model.attention.chunk={a.chunk} and nope_scale={a.nope_scale} must be '
                      f'>= 0 and nope_floor={a.nope_floor} > 0 (Llama 4: 8192, 0.1, 8192)')
  if a.chunk and family.ATTENTION != 'causal':
    raise ConfigError(f'model.attention.chunk={a.chunk} is causal attention within chunks, '
                      f'for decoders; model.family={m.family!r}: set chunk=0')
  if a.chunk and m.mtp.depth:
    raise ConfigError(f'model.attention.chunk={a.chunk} with model.mtp.depth={m.mtp.depth}: the '
                      'prediction modules attend without chunks; set one of them to 0')
  if a.chunk and not pattern and a.window:
    raise ConfigError(f'model.attention.chunk={a.chunk} and window={a.window} on every layer: '
                      "one or the other; or give each its layers (pattern 'L' and 'C' letters)")
  if a.chunk and 'C' not in (pattern or 'C'):
    raise ConfigError(f'model.attention.chunk={a.chunk} with pattern={pattern!r}: no C '
                      '(chunked) layer reads it; add C layers or set chunk=0')
  if a.nope_scale and 'N' not in pattern:
    raise ConfigError(f'model.attention.nope_scale={a.nope_scale} tunes the N (no RoPE) '
                      f'layers and pattern={pattern!r} has none; set nope_scale=0')
  rotary = m.position == 'rope' and set(pattern or 'G') - {'N'}
  if m.rope_scaling.type != 'none' and not rotary:
    raise ConfigError(f'model.rope_scaling.type={m.rope_scaling.type!r} scales RoPE, and no '
                      f'layer rotates (model.position={m.position!r}, pattern={pattern!r}); '
                      "set rope_scaling.type='none' or give the layers RoPE")
  if a.qk_l2_norm and m.qk_norm:
    raise ConfigError('model.attention.qk_l2_norm (no gain, Llama 4) and model.qk_norm (a '
                      'learned gain, Qwen 3) both normalise q and k; set one')
  if m.moe.gate_input and m.moe.capacity_factor:
    raise ConfigError('model.moe.gate_input (Llama 4) scales the tokens going into dropless '
                      f'experts; capacity_factor={m.moe.capacity_factor}: set it to 0')


def context_unsupported(m, family):
  """Why mesh.context > 1 (the sequence split, ring attention) is not built for model
  config `m`, or None when it is."""
  if not family.CONTEXT_CHUNKS:
    return (f"ring attention is not built for model.family={m.family!r} (cross-attention "
            "over a split sequence)")
  if m.position in ('t5_bias', 'alibi'):
    return (f"ring attention takes no position bias, and model.position={m.position!r} adds "
            "one; use 'rope' or 'learned'")
  if m.attention.kernel not in ('auto', 'xla', 'splash'):
    return ("ring attention runs its local blocks in splash or XLA; set "
            f"model.attention.kernel='auto', 'splash' or 'xla', not {m.attention.kernel!r}")
  if m.moe.num_experts and m.moe.capacity_factor:
    return (f'model.moe.capacity_factor={m.moe.capacity_factor} gives each expert slots per '
            'whole sequence, which a split sequence does not hold; route dropless '
            '(model.moe.capacity_factor=0)')
  if m.mtp.depth:
    return (f'model.mtp.depth={m.mtp.depth}: the prediction modules read the sequence in order, '
            'not split; set model.mtp.depth=0')
  if 'D' in m.attention.pattern:
    return ("Gated DeltaNet ('D') layers carry their state along the whole sequence, which a "
            'split sequence does not pass between devices')
  return None


def _validate_context(context, m, d, family):
  """mesh.context != 1: a combination it is built for, and a sequence that splits into its
  chunks (a -1 is checked once the mesh is known, by sharding.check_divisible)."""
  if context == 1:
    return
  reason = context_unsupported(m, family)
  if reason:
    raise ConfigError(f'mesh.context={context}: {reason}; or use mesh.context=1')
  per_device = family.CONTEXT_CHUNKS
  chunks = context * per_device
  if context > 1 and d.seq_len % chunks:
    raise ConfigError(f'data.seq_len={d.seq_len} does not split into {chunks} chunks for '
                      f'mesh.context={context}' +
                      (' (a causal model holds two chunks per device, one early and one '
                       'late)' if per_device == 2 else '') +
                      f'; use a multiple of {chunks}')
  if context > 1 and m.attention.kernel == 'splash':
    chunk = d.seq_len // chunks
    if chunk % splash.LANES:
      raise ConfigError(f"model.attention.kernel='splash' with mesh.context={context}: each "
                        f'ring chunk (data.seq_len / {chunks} = {chunk} tokens) must be a '
                        f"multiple of {splash.LANES}; lengthen data.seq_len or use 'auto' or "
                        "'xla'")
    try:
      splash.block_sizes(chunk, chunk, m.attention.block_q, m.attention.block_kv)
    except ValueError as e:
      raise ConfigError(f'{e} (mesh.context={context}: {chunk}-token ring chunks)') from None


def _validate_stage(mesh, m, family, batch_size):
  """mesh.stage != 1: stacks the stages divide, enough microbatches, a combination built
  (the rows each microbatch holds are checked against the batch axes with the mesh)."""
  stages = mesh.stage
  if stages == 1:
    return
  field = f'mesh.stage={stages}'
  if m.attention.pattern:
    raise ConfigError(f'{field} with model.attention.pattern={m.attention.pattern!r}: a '
                      'pipeline of patterned layers is not built; set mesh.stage=1')
  if not m.scan_layers:
    raise ConfigError(f'{field} pipelines the scanned layer stack; set model.scan_layers=True')
  if stages < 1:
    return  # -1: checked with the mesh (sharding.check_divisible)
  microbatches = sharding.check_stage_split(m, family.LAYER_FIELDS, stages, field)
  if batch_size % microbatches:
    raise ConfigError(f'model.pipeline_microbatches={microbatches} does not divide '
                      f'train.batch_size={batch_size}; use a divisor of it')
