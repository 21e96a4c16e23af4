"""Range checks: each field of a config against the values it may take, on its own or
beside the fields of its own section. What a field means for a family, a kernel or the
model's derived dimensions is checked when the run is resolved (zoo/run/checks.py).
Every failure is a ConfigError naming the field and the fix.
"""

from zoo import sharding
from zoo import storage
from zoo.config import schema
from zoo.config.schema import ACTIVATIONS, BLOCKS, DTYPES, NORM_POSITIONS, NORMS
from zoo.config.schema import text_length
from zoo.config.schema import OBJECTIVES, OPTIMIZERS, POSITIONS, SCHEDULES, TOKENIZERS
from zoo.config.schema import SPIKE_ACTIONS, SPIKE_SIGNALS, TASK_METRICS, TRAIN_OBJECTIVES
from zoo.errors import ConfigError


def check(config):
  """Raises ConfigError naming the first field out of its range; returns the config."""
  m = config.model
  _validate_model(m)
  _validate_sections(m)
  _validate_moe(m, config.mesh)
  _validate_data(config.data, m, config.train)
  _validate_task(config.data.task, m)
  _validate_train(config.train, config.optim, config.data)
  _validate_lora(config.train.lora)
  _validate_teacher(config.train.teacher, m)
  _validate_objective(config)
  _validate_generate(config.generate, m)
  _validate_serve(config.serve)
  _validate_mesh(config.mesh, config.sharding)
  _validate_pipeline(config.mesh, m)
  return config


def _validate_sections(m):
  """model.mtp, model.quant, model.mla and model.attention on their own."""
  t = m.mtp
  if t.depth < 0:
    raise ConfigError(f'model.mtp.depth={t.depth} must be >= 0 (0 = no multi-token prediction; '
                      'DeepSeek-V3: 1)')
  if t.depth and (t.loss_weight < 0 or t.late_loss_weight < 0 or not 0 <= t.late_from <= 1):
    raise ConfigError(f'model.mtp: loss_weight={t.loss_weight} and late_loss_weight='
                      f'{t.late_loss_weight} must be >= 0 and late_from={t.late_from} in [0, 1] '
                      '(a fraction of train.steps; 1 = loss_weight throughout)')
  q = m.quant
  _one_of('model.quant.mode', q.mode, ('none', 'int8', 'fp8'))
  if q.tile < 0:
    raise ConfigError(f'model.quant.tile={q.tile} must be >= 0 (0 = a scale per channel)')
  if q.mode != 'none' and m.dtype == 'float16':
    raise ConfigError(f"model.quant.mode={q.mode!r} rescales in model.dtype and float16's range "
                      "overflows int8 and fp8 products; use model.dtype='bfloat16' or 'float32'")
  _validate_mla(m)
  a = m.attention
  if a.window < 0:
    raise ConfigError(f'model.attention.window={a.window} must be >= 0 (0 = none)')
  if a.softcap < 0 or a.query_scale < 0 or m.final_softcap < 0:
    raise ConfigError(f'model.attention.softcap={a.softcap}, model.attention.query_scale='
                      f'{a.query_scale} and model.final_softcap={m.final_softcap} must be >= 0 '
                      '(0 = none)')


INDEX_STAGES = ('sparse', 'warmup')  # model.mla.index_stage


def _validate_mla(m):
  """model.mla: ranks within the width, rotary dims that pair up."""
  a = m.mla
  if not a.kv_lora_rank:
    if a.index_heads:
      raise ConfigError('model.mla.index_heads > 0 needs multi-head latent attention: set '
                        'model.mla.kv_lora_rank > 0 (the indexer selects keys for MLA) or '
                        'index_heads=0')
    return
  for name in ('kv_lora_rank', 'q_lora_rank'):
    if not 0 <= a[name] <= m.d_model:
      raise ConfigError(f'model.mla.{name}={a[name]} must be in [0, model.d_model={m.d_model}]: '
                        'a latent narrower than the model (DeepSeek-V3: 512 and 1536 of 7168)')
  if a.qk_rope_head_dim <= 0 or a.qk_rope_head_dim % 2:
    raise ConfigError(f'model.mla.qk_rope_head_dim={a.qk_rope_head_dim} must be a positive even '
                      'number (RoPE rotates pairs; DeepSeek-V3: 64)')
  for name in ('qk_nope_head_dim', 'v_head_dim'):
    _positive(f'model.mla.{name}', a[name])
  if a.v_head_dim > a.qk_nope_head_dim + a.qk_rope_head_dim:
    raise ConfigError(f'model.mla.v_head_dim={a.v_head_dim} must be at most qk_nope_head_dim + '
                      f'qk_rope_head_dim = {a.qk_nope_head_dim + a.qk_rope_head_dim} (the '
                      'kernels pad values to the query and key head dim)')
  _validate_indexer(a)


def _validate_indexer(a):
  """model.mla's DeepSeek Sparse Attention fields."""
  if not a.index_heads:
    return
  if not a.q_lora_rank:
    raise ConfigError('model.mla.index_heads > 0 needs model.mla.q_lora_rank > 0: the indexer '
                      'reads the query latent (DeepSeek-V3.2: 1536)')
  for name in ('index_head_dim', 'index_top_k', 'index_block'):
    _positive(f'model.mla.{name}', a[name])
  if a.index_head_dim < a.qk_rope_head_dim:
    raise ConfigError(f'model.mla.index_head_dim={a.index_head_dim} must be at least '
                      f'qk_rope_head_dim={a.qk_rope_head_dim}: the indexer rotates that many '
                      'of its dims (DeepSeek-V3.2: 128 and 64)')
  if a.index_stage not in INDEX_STAGES:
    raise ConfigError(f'model.mla.index_stage={a.index_stage!r} must be one of {INDEX_STAGES}')


def _validate_teacher(teacher, m):
  if not teacher.workdir:
    return
  if not 0 < teacher.weight <= 1 or teacher.temperature <= 0:
    raise ConfigError(f'train.teacher.weight={teacher.weight} must be in (0, 1] and '
                      f'train.teacher.temperature={teacher.temperature} > 0')
  if teacher.quant:
    _one_of('train.teacher.quant', teacher.quant, ('none', 'int8', 'fp8'))
  if not 0 <= teacher.top_k <= m.vocab_size:
    raise ConfigError(f'train.teacher.top_k={teacher.top_k} must be in [0, model.vocab_size='
                      f'{m.vocab_size}] (0 = the whole vocabulary)')


def _validate_objective(config):
  t, kind, family = config.train, config.data.task.kind, config.model.family
  _one_of('train.objective', t.objective, TRAIN_OBJECTIVES)
  pairs = t.objective in ('dpo', 'ipo', 'simpo')
  if pairs != (kind == 'preference'):
    raise ConfigError(f'train.objective={t.objective!r} and data.task.kind={kind!r}: '
                      "preference pairs train with train.objective='dpo', 'ipo' or 'simpo', "
                      'and those objectives read data.task.kind=\'preference\'; set both')
  if t.objective == 'lm':
    return
  if family != 'decoder':
    raise ConfigError(f'train.objective={t.objective!r} trains decoders (their completions\' '
                      f'log-probabilities), not model.family={family!r}')
  if t.teacher.workdir:
    raise ConfigError(f'train.objective={t.objective!r} with train.teacher.workdir: its frozen '
                      'model is a reference, not a teacher; clear train.teacher.workdir and '
                      'name it train.reference')
  p = t.preference
  if p.beta <= 0 or not 0 <= p.label_smoothing < 0.5 or p.nll_weight < 0:
    raise ConfigError(f'train.preference.beta={p.beta} must be > 0, label_smoothing='
                      f'{p.label_smoothing} in [0, 0.5) and nll_weight={p.nll_weight} >= 0')
  uses_reference = t.objective in ('dpo', 'ipo') or (t.objective == 'grpo' and t.grpo.kl_beta)
  if uses_reference and not (t.lora.rank or t.reference or t.init_params):
    raise ConfigError(f'train.objective={t.objective!r} compares with a frozen reference: set '
                      'train.init_params (the model to start from, also the reference), '
                      'train.reference, or train.lora.rank (the reference is the model '
                      'without its adapters)')
  if t.objective == 'grpo':
    _validate_grpo(t.grpo, kind)


def _validate_grpo(g, kind):
  if kind != 'prompts':
    raise ConfigError(f"train.objective='grpo' samples completions of data.task.kind="
                      f"'prompts' (JSON lines with a prompt), not {kind!r}; set it")
  if g.group_size < 2 or g.max_new_tokens < 1 or g.updates < 1:
    raise ConfigError(f'train.grpo.group_size={g.group_size} must be >= 2 (advantages are '
                      f'against the group), max_new_tokens={g.max_new_tokens} and updates='
                      f'{g.updates} >= 1')
  if ':' not in g.reward:
    raise ConfigError(f'train.grpo.reward={g.reward!r} must name a function as '
                      "'module:function', e.g. 'zoo.data.arithmetic:reward'")
  _one_of('train.grpo.advantages', g.advantages, ('group', 'dr_grpo'))
  _one_of('train.grpo.on_bad_reward', g.on_bad_reward, ('error', 'skip'))
  if not 0 < g.epsilon < 1 or g.kl_beta < 0:
    raise ConfigError(f'train.grpo.epsilon={g.epsilon} must be in (0, 1) and kl_beta='
                      f'{g.kl_beta} >= 0')


def _validate_lora(lora):
  if lora.rank < 0:
    raise ConfigError(f'train.lora.rank={lora.rank} must be >= 0 (0 = no adapters)')
  if lora.rank and (lora.alpha <= 0 or not 0 <= lora.dropout < 1):
    raise ConfigError(f'train.lora.alpha={lora.alpha} must be > 0 and train.lora.dropout='
                      f'{lora.dropout} in [0, 1)')


def _validate_pipeline(mesh, m):
  if m.pipeline_microbatches < 0:
    raise ConfigError(f'model.pipeline_microbatches={m.pipeline_microbatches} must be >= 0 '
                      '(0 = one per stage)')
  if m.pipeline_repeats < 1:
    raise ConfigError(f'model.pipeline_repeats={m.pipeline_repeats} must be >= 1 (1 = '
                      'fill-drain)')
  if mesh.stage == 1 and m.pipeline_repeats != 1:
    raise ConfigError(f'model.pipeline_repeats={m.pipeline_repeats} needs a pipeline; set '
                      'mesh.stage > 1 or model.pipeline_repeats=1')
  if m.mla.kv_lora_rank and m.mla.index_heads and (mesh.context != 1 or mesh.stage != 1):
    raise ConfigError(f'model.mla.index_heads > 0 with mesh.context={mesh.context}, mesh.stage='
                      f'{mesh.stage}: DeepSeek Sparse Attention is built for whole sequences '
                      'and unpipelined stacks; set mesh.context=1 and mesh.stage=1 (shard over '
                      'data, fsdp, tensor and expert)')


def _one_of(name, value, allowed):
  if value not in allowed:
    raise ConfigError(f'{name}={value!r} is not one of {", ".join(map(repr, allowed))}')


def _positive(name, value):
  if not value > 0:
    raise ConfigError(f'{name}={value} must be positive')


def _validate_model(m):
  for name in ('vocab_size', 'd_model', 'num_heads', 'mlp_dim', 'max_length'):
    _positive(f'model.{name}', m[name])
  if m.head_dim == 0 and m.d_model % m.num_heads:
    raise ConfigError(f'model.num_heads={m.num_heads} does not divide model.d_model={m.d_model}; '
                      'change num_heads or set model.head_dim')
  _one_of('model.activation', m.activation, ACTIVATIONS)
  _one_of('model.norm', m.norm, NORMS)
  _one_of('model.norm_position', m.norm_position, NORM_POSITIONS)
  _one_of('model.block', m.block, BLOCKS)
  _one_of('model.position', m.position, POSITIONS)
  _one_of('model.dtype', m.dtype, DTYPES)
  _one_of('model.param_dtype', m.param_dtype, DTYPES)
  if m.block == 'parallel' and m.norm_position != 'pre':
    raise ConfigError("model.block='parallel' needs model.norm_position='pre'")
  r = m.rope_scaling
  _one_of('model.rope_scaling.type', r.type, ('none', 'llama3', 'linear', 'dynamic', 'yarn'))
  if r.type != 'none' and r.factor < 1:
    raise ConfigError(f'model.rope_scaling.factor={r.factor} must be >= 1 for type {r.type!r}')
  if r.type in ('llama3', 'dynamic', 'yarn') and r.original_max_length <= 0:
    raise ConfigError(f'model.rope_scaling.type={r.type!r} needs original_max_length (the '
                      'trained context, config.json original_max_position_embeddings) > 0')
  if r.type == 'llama3' and not 0 < r.low_freq_factor <= r.high_freq_factor:
    raise ConfigError(f"model.rope_scaling.type='llama3' needs 0 < low_freq_factor="
                      f'{r.low_freq_factor} <= high_freq_factor={r.high_freq_factor} (equal: '
                      'no smoothing band, as Llama 4 Scout)')
  if r.type == 'yarn' and not 0 < r.beta_slow <= r.beta_fast:
    raise ConfigError(f"model.rope_scaling.type='yarn' needs 0 < beta_slow={r.beta_slow} <= "
                      f'beta_fast={r.beta_fast} (32 and 1 by default; Kimi K2: 1 and 1)')
  if not 0 <= m.dropout_rate < 1:
    raise ConfigError(f'model.dropout_rate={m.dropout_rate} must be in [0, 1)')
  _positive('model.scan_unroll', m.scan_unroll)


def _validate_moe(m, mesh):
  moe = m.moe
  if moe.num_experts < 0:
    raise ConfigError(f'model.moe.num_experts={moe.num_experts} must be >= 0 (0 = dense)')
  if not moe.num_experts:
    if mesh.expert not in (1, -1):
      raise ConfigError(f'mesh.expert={mesh.expert} needs experts; set model.moe.num_experts '
                        'or mesh.expert=1')
    return
  if not 1 <= moe.top_k <= moe.num_experts:
    raise ConfigError(f'model.moe.top_k={moe.top_k} must be in [1, model.moe.num_experts='
                      f'{moe.num_experts}]')
  if moe.capacity_factor < 0:
    raise ConfigError(f'model.moe.capacity_factor={moe.capacity_factor} must be >= 0 '
                      '(0 = dropless)')
  _one_of('model.moe.router', moe.router, ('softmax', 'sigmoid'))
  _one_of('model.moe.balance_scope', moe.balance_scope, ('batch', 'sequence'))
  if moe.num_groups:
    if moe.num_experts % moe.num_groups or moe.num_experts // moe.num_groups < 2:
      raise ConfigError(f'model.moe.num_experts={moe.num_experts} does not split into '
                        f'model.moe.num_groups={moe.num_groups} groups of 2 or more; use a '
                        'divisor (DeepSeek-V3: 8 groups of 32)')
    if not 1 <= moe.top_groups <= moe.num_groups:
      raise ConfigError(f'model.moe.top_groups={moe.top_groups} must be in [1, '
                        f'model.moe.num_groups={moe.num_groups}] (DeepSeek-V3: 4 of 8)')
    if moe.top_k > moe.top_groups * (moe.num_experts // moe.num_groups):
      raise ConfigError(f'model.moe.top_k={moe.top_k} exceeds the experts in '
                        f'model.moe.top_groups={moe.top_groups} groups; keep more groups')
  if moe.first_dense and mesh.stage > 1:
    raise ConfigError(f'model.moe.first_dense={moe.first_dense} with mesh.stage={mesh.stage}: '
                      'the dense layers are not pipelined; set mesh.stage=1')
  if moe.balance_scope == 'sequence' and mesh.context > 1:
    raise ConfigError("model.moe.balance_scope='sequence' with mesh.context > 1: each device "
                      "holds a chunk of a sequence; use 'batch' there")
  if mesh.expert > 1 and moe.num_experts % mesh.expert:
    raise ConfigError(f'model.moe.num_experts={moe.num_experts} does not split over '
                      f'mesh.expert={mesh.expert}; use a divisor of the expert count')
  for name in ('balance_loss', 'z_loss', 'bias_update_rate', 'expert_mlp_dim',
               'num_shared_experts', 'shared_mlp_dim', 'routed_scale'):
    if moe[name] < 0:
      raise ConfigError(f'model.moe.{name}={moe[name]} must be >= 0')
  if moe.shared_mlp_dim and not moe.num_shared_experts:
    raise ConfigError(f'model.moe.shared_mlp_dim={moe.shared_mlp_dim} sizes shared experts, '
                      'and model.moe.num_shared_experts=0; set num_shared_experts=1 or '
                      'shared_mlp_dim=0')
  if moe.collapse_ratio <= 1:
    raise ConfigError(f'model.moe.collapse_ratio={moe.collapse_ratio} must be > 1: it is a '
                      'multiple of the balanced share top_k / num_experts (default 2)')


def _validate_serve(s):
  for field in ('page_size', 'max_seqs', 'prefill_rows', 'prefill_chunk', 'max_queue'):
    _positive(f'serve.{field}', s[field])
  if s.num_pages < 2:
    raise ConfigError(f'serve.num_pages={s.num_pages} must be at least 2 (page 0 takes '
                      'padding)')
  if s.max_len < 0:
    raise ConfigError(f'serve.max_len={s.max_len} must be >= 0 (0 = data.seq_len)')
  _one_of('serve.batching', s.batching, ('continuous', 'static'))
  _one_of('serve.kernel', s.kernel, ('auto', 'xla', 'pallas'))


def _validate_generate(g, m):
  _positive('generate.max_new_tokens', g.max_new_tokens)
  if not 0 <= g.min_new_tokens <= g.max_new_tokens:
    raise ConfigError(f'generate.min_new_tokens={g.min_new_tokens} must be in [0, '
                      f'generate.max_new_tokens={g.max_new_tokens}] (0 = off)')
  if g.temperature < 0 or g.top_k < 0:
    raise ConfigError(f'generate.temperature={g.temperature} and generate.top_k={g.top_k} '
                      'must be >= 0 (0 = greedy, 0 = no top-k)')
  if not 0 < g.top_p <= 1:
    raise ConfigError(f'generate.top_p={g.top_p} must be in (0, 1]')
  if g.top_k > m.vocab_size:
    raise ConfigError(f'generate.top_k={g.top_k} exceeds model.vocab_size={m.vocab_size}')
  _positive('generate.num_beams', g.num_beams)
  if g.num_beams > 1 and g.temperature:
    raise ConfigError(f'generate.num_beams={g.num_beams} searches, it does not sample; set '
                      f'generate.temperature=0 (now {g.temperature}) or num_beams=1')
  if g.length_alpha < 0:
    raise ConfigError(f'generate.length_alpha={g.length_alpha} must be >= 0')
  _one_of('generate.beam_rules', g.beam_rules, ('zoo', 'transformers'))
  if not 0 <= g.min_p < 1:
    raise ConfigError(f'generate.min_p={g.min_p} must be in [0, 1) (0 = off; 0.05 to 0.1 '
                      'is usual)')
  if g.repetition_penalty < 1:
    raise ConfigError(f'generate.repetition_penalty={g.repetition_penalty} must be >= 1 (1 = '
                      'off; below 1 would favour repeats); CTRL used 1.2')
  if g.frequency_penalty < 0:
    raise ConfigError(f'generate.frequency_penalty={g.frequency_penalty} must be >= 0 (0 = '
                      'off)')
  if g.draft_mtp and (g.draft_workdir or m.mtp.depth != 1):
    raise ConfigError(f'generate.draft_mtp=True drafts with the model\'s one prediction '
                      f'module (model.mtp.depth=1, now {m.mtp.depth}) and no other draft '
                      f'(generate.draft_workdir={g.draft_workdir!r}); set draft_mtp=False or '
                      'fix the other field')
  if (g.draft_workdir or g.draft_mtp) and 'D' in m.attention.pattern:
    raise ConfigError('speculative decoding (generate.draft_workdir or draft_mtp) rewinds the '
                      "cache past rejected tokens, and Gated DeltaNet ('D') layers keep one "
                      'state that cannot rewind; turn the draft off')
  if g.draft_workdir or g.draft_mtp:
    _positive('generate.draft_tokens', g.draft_tokens)
    neutral = {'generate.num_beams': (g.num_beams, 1),
               'generate.min_new_tokens': (g.min_new_tokens, 0),
               'generate.repetition_penalty': (g.repetition_penalty, 1.0),
               'generate.frequency_penalty': (g.frequency_penalty, 0.0)}
    for name, (value, off) in neutral.items():
      if value != off:
        raise ConfigError(f'{name}={value} with speculative decoding (generate.draft_workdir '
                          'or draft_mtp), which samples or takes the argmax token by token; '
                          f'set {name}={off} or turn the draft off')
  if isinstance(g.stop, str) or not all(isinstance(x, str) and x for x in g.stop):
    raise ConfigError(f'generate.stop={g.stop!r} must be a tuple of non-empty strings, e.g. '
                      '--config.generate.stop="(\'THE END\',)"')


def _validate_task(task, m):
  if not task.kind:
    if task.path or task.metrics:
      raise ConfigError("data.task.path and data.task.metrics need a data.task.kind; set one "
                        f'of {", ".join(map(repr, TASK_METRICS))} or clear them')
    if m.num_labels:
      raise ConfigError(f'model.num_labels={m.num_labels} builds a classification head, '
                        'which pretraining does not train; set data.task.kind or '
                        'model.num_labels=0')
    return
  _one_of('data.task.kind', task.kind, tuple(TASK_METRICS))
  _one_of('data.task.too_long', task.too_long, ('error', 'skip'))
  # a published image shape loads and plans without its images; training opens them
  if not task.path and task.kind not in ('image_classification', 'image_text'):
    raise ConfigError(f'data.task.kind={task.kind!r} needs data.task.path: a directory '
                      'holding train.jsonl and eval.jsonl')
  storage.check(task.path, 'data.task.path')
  for metric in task.metrics:
    if metric not in TASK_METRICS[task.kind]:
      raise ConfigError(f'data.task.metrics: {metric!r} does not apply to data.task.kind='
                        f'{task.kind!r}; use some of {", ".join(TASK_METRICS[task.kind])}')
  headed = task.kind in ('classification', 'regression', 'image_classification')
  if not headed and m.num_labels:
    raise ConfigError(f'model.num_labels={m.num_labels} builds a classification head, which '
                      f'data.task.kind={task.kind!r} does not read; set model.num_labels=0')
  if task.kind == 'regression' and m.num_labels not in (0, 1):
    raise ConfigError(f'model.num_labels={m.num_labels}: a regression head predicts one '
                      'value; set model.num_labels=1 or 0')
  if m.label_names and m.num_labels and len(m.label_names) != m.num_labels:
    raise ConfigError(f'model.label_names has {len(m.label_names)} names for '
                      f'model.num_labels={m.num_labels}; give one per label, or ()')
  if task.kind in ('classification', 'image_classification') and m.num_labels == 1:
    raise ConfigError('model.num_labels=1 cannot classify; set 2 or more, or 0 for the '
                      "task's label count")


def _validate_data(d, m, t):
  _one_of('data.objective', d.objective, OBJECTIVES)
  if d.objective == 'span_corruption':
    _positive('data.target_seq_len', d.target_seq_len)
    if not 0 < d.noise_density < 1 or d.mean_noise_span_length < 1:
      raise ConfigError('data.noise_density must be in (0, 1) and data.mean_noise_span_length '
                        '>= 1')
    # a task (fine-tuning) writes its targets: no sentinels
    if d.tokenizer.vocab_size + d.num_sentinels > m.vocab_size and not d.task.kind:
      raise ConfigError(f'data.tokenizer.vocab_size={d.tokenizer.vocab_size} + '
                        f'data.num_sentinels={d.num_sentinels} exceed model.vocab_size='
                        f'{m.vocab_size}; sentinels need the top of the vocabulary')
  if not 0 < d.mask_rate < 1:
    raise ConfigError(f'data.mask_rate={d.mask_rate} must be in (0, 1)')
  if not 0 <= d.short_pair_rate <= 1:
    raise ConfigError(f'data.short_pair_rate={d.short_pair_rate} must be in [0, 1]')
  _one_of('data.tokenizer.type', d.tokenizer.type, TOKENIZERS)
  _positive('data.seq_len', d.seq_len)
  if m.mla.index_heads and m.mla.index_top_k > d.seq_len:
    raise ConfigError(f'model.mla.index_top_k={m.mla.index_top_k} exceeds data.seq_len='
                      f'{d.seq_len}: every key would be kept (dense MLA at the indexer\'s '
                      'cost); lower index_top_k, or set model.mla.index_heads=0')
  if m.position == 'learned' and text_length(d) > m.max_length:
    raise ConfigError(f'data.seq_len={d.seq_len} exceeds model.max_length={m.max_length} '
                      'of the learned position table; lower seq_len')
  if not 0 < d.eval_fraction < 1:
    raise ConfigError(f'data.eval_fraction={d.eval_fraction} must be in (0, 1)')
  if d.num_streams < 0:
    raise ConfigError(f'data.num_streams={d.num_streams} must be >= 0 (0 = one per process)')
  if d.num_streams and t.batch_size % d.num_streams:
    raise ConfigError(f'train.batch_size={t.batch_size} does not split into '
                      f'data.num_streams={d.num_streams} streams; use a multiple of it')
  if d.tokenizer.vocab_size > m.vocab_size:
    raise ConfigError(f'data.tokenizer.vocab_size={d.tokenizer.vocab_size} exceeds '
                      f'model.vocab_size={m.vocab_size}')
  storage.check(d.path, 'data.path')
  storage.check(d.tokenizer.path, 'data.tokenizer.path')
  for source in filter(None, d.mixture.split(',')):
    storage.check(source.strip(), 'data.mixture')
  _one_of('data.mixture_by', d.mixture_by, ('tokens', 'documents'))


def _validate_train(t, o, d):
  storage.check(t.init_params, 'train.init_params')
  for name in ('steps', 'batch_size', 'log_every', 'eval_every', 'checkpoint_every',
               'keep_checkpoints', 'max_nonfinite_steps', 'microbatches'):
    _positive(f'train.{name}', t[name])
  if t.eval_batches < 0 or t.z_loss < 0:
    raise ConfigError('train.eval_batches and train.z_loss must be >= 0')
  stream_rows = t.batch_size // (d.num_streams or 1)
  if stream_rows % t.microbatches:
    raise ConfigError(f'train.microbatches={t.microbatches} does not divide the rows of each '
                      f'input stream (train.batch_size={t.batch_size} / '
                      f'{d.num_streams or 1} streams = {stream_rows}); use a divisor of it')
  if t.hang.factor < 0 or t.hang.min_seconds <= 0:
    raise ConfigError(f'train.hang.factor={t.hang.factor} must be >= 0 (0 = no watchdog) and '
                      f'train.hang.min_seconds={t.hang.min_seconds} positive')
  _validate_spike(t)
  _one_of('train.canary', t.canary, ('fix', 'refuse', 'off'))
  if t.local_tier.path and storage.is_remote(t.local_tier.path):
    raise ConfigError(f'train.local_tier.path={t.local_tier.path!r} is a bucket; the local '
                      "tier is each process's own disk (or /dev/shm): pass a local path")
  if t.local_tier.every <= 0 or t.local_tier.keep <= 0:
    raise ConfigError(f'train.local_tier.every={t.local_tier.every} and '
                      f'train.local_tier.keep={t.local_tier.keep} must be positive')
  if t.loss_chunk_len < -1:
    raise ConfigError(f'train.loss_chunk_len={t.loss_chunk_len} must be >= 0, or -1 (auto)')
  _validate_profile_steps(t)
  storage.check(t.compile_cache_dir, 'train.compile_cache_dir')
  _validate_optim(o, t)


def _validate_spike(t):
  """train.spike and train.data_skips (zoo/train/spikes.py)."""
  s = t.spike
  if s.action not in SPIKE_ACTIONS:
    raise ConfigError(f'train.spike.action={s.action!r}; use one of {", ".join(SPIKE_ACTIONS)}')
  signals = [name for name in s.signals.split(',') if name]
  if not signals or any(name not in SPIKE_SIGNALS for name in signals):
    raise ConfigError(f'train.spike.signals={s.signals!r}; use a comma-separated list of '
                      f'{", ".join(SPIKE_SIGNALS)}')
  if s.window < 2:
    raise ConfigError(f'train.spike.window={s.window} cannot hold a mean and a standard '
                      'deviation; use 2 or more steps (50 is the default)')
  if s.sigmas <= 0 or s.min_rise < 0:
    raise ConfigError(f'train.spike.sigmas={s.sigmas} must be positive and '
                      f'train.spike.min_rise={s.min_rise} >= 0')
  for name in ('rollback_steps', 'max_rollbacks', 'rollback_window'):
    if s[name] <= 0:
      raise ConfigError(f'train.spike.{name}={s[name]} must be positive')
  if s.skip_batches < 0:
    raise ConfigError(f'train.spike.skip_batches={s.skip_batches} must be >= 0')
  kept = (t.keep_checkpoints - 1) * t.checkpoint_every
  if s.action == 'rollback' and kept < s.rollback_steps - 1:
    need = -(-(s.rollback_steps - 1) // t.checkpoint_every) + 1
    raise ConfigError(
        f'train.spike.rollback_steps={s.rollback_steps} needs a checkpoint that old, but '
        f'train.keep_checkpoints={t.keep_checkpoints} x train.checkpoint_every='
        f'{t.checkpoint_every} keeps {kept} steps back; set train.keep_checkpoints={need} '
        'or lower train.spike.rollback_steps')
  data_skips(t.data_skips)


def data_skips(text, field='train.data_skips'):
  """'STEP:COUNT,...' -> [(STEP, COUNT), ...]; a ConfigError naming `field` otherwise."""
  skips = []
  for part in filter(None, (p.strip() for p in text.split(','))):
    try:
      step, count = (int(v) for v in part.split(':'))
    except ValueError:
      step = count = -1
    if step < 0 or count <= 0:
      raise ConfigError(f"{field}={text!r}: {part!r} is not 'STEP:COUNT' (after train step "
                        'STEP >= 0, skip COUNT > 0 batches)')
    skips.append((step, count))
  return skips


def _validate_profile_steps(t):
  steps = tuple(t.profile_steps)
  if len(steps) != 2 or not all(isinstance(v, int) for v in steps):
    raise ConfigError(f'train.profile_steps={t.profile_steps!r} must be (FIRST, COUNT): two '
                      'integers, e.g. (10, 5); (0, 0) = no trace')
  first, count = steps
  if count < 0 or (count and not 1 <= first <= first + count - 1 <= t.steps):
    raise ConfigError(f'train.profile_steps={steps} traces steps outside the run (1..'
                      f'train.steps={t.steps}); use FIRST >= 1 and FIRST + COUNT - 1 <= '
                      f'{t.steps}, or (0, 0) for no trace')


def _validate_optim(o, t):
  _one_of('optim.name', o.name, OPTIMIZERS)
  _positive('optim.learning_rate', o.learning_rate)
  _one_of('optim.schedule', o.schedule, SCHEDULES)
  if o.warmup_steps < 0 or o.warmup_steps >= t.steps:
    raise ConfigError(f'optim.warmup_steps={o.warmup_steps} must be in [0, train.steps='
                      f'{t.steps}): a shorter run needs a shorter warmup; add '
                      f'--config.optim.warmup_steps={t.steps // 10} (a tenth of the run) or '
                      'raise train.steps')
  if o.warmup_tokens < 0 or o.decay_tokens < 0 or (
      o.decay_tokens and o.warmup_tokens >= o.decay_tokens):
    raise ConfigError(f'optim.warmup_tokens={o.warmup_tokens:g} and optim.decay_tokens='
                      f'{o.decay_tokens:g} must be >= 0, warmup below the decay horizon')
  if o.warmup_tokens and o.warmup_steps:
    raise ConfigError(f'optim.warmup_tokens={o.warmup_tokens:g} and optim.warmup_steps='
                      f'{o.warmup_steps} are both set; a schedule in tokens warms up in '
                      'tokens: set optim.warmup_steps=0')
  if o.weight_decay_power not in (1, 2):
    raise ConfigError(f'optim.weight_decay_power={o.weight_decay_power} must be 1 (weight_decay '
                      'x lr, decoupled) or 2 (weight_decay x lr^2, PaLM)')
  for name in ('weight_decay', 'clip_norm', 'eps', 'min_learning_rate_ratio'):
    if o[name] < 0:
      raise ConfigError(f'optim.{name}={o[name]} must be >= 0')
  for name in ('b1', 'b2'):
    if not 0 <= o[name] < 1:
      raise ConfigError(f'optim.{name}={o[name]} must be in [0, 1)')
  if o.schedule == 'wsd':
    if not 0 < o.decay_fraction < 1:
      raise ConfigError(f'optim.decay_fraction={o.decay_fraction} must be in (0, 1): the share '
                        "of train.steps the 'wsd' schedule spends decaying")
    if o.warmup_steps + o.decay_fraction * t.steps > t.steps:
      raise ConfigError(f'optim.warmup_steps={o.warmup_steps} + the wsd decay '
                        f'(optim.decay_fraction={o.decay_fraction} x {t.steps} steps) exceed '
                        'train.steps; add --config.optim.warmup_steps='
                        f'{int(t.steps * (1 - o.decay_fraction))} or a '
                        'smaller --config.optim.decay_fraction')
  _validate_adafactor(o)
  _validate_muon(o)


def _validate_muon(o):
  m, defaults = o.muon, schema.optim().muon
  if o.name != 'muon':
    changed = [k for k in m if m[k] != defaults[k]]
    if changed:
      raise ConfigError(f'optim.muon.{changed[0]}={m[changed[0]]!r} is read only by Muon; '
                        f"set optim.name='muon' or leave it at {defaults[changed[0]]!r}")
    return
  if not 0 <= m.momentum < 1:
    raise ConfigError(f'optim.muon.momentum={m.momentum} must be in [0, 1)')
  _positive('optim.muon.ns_steps', m.ns_steps)
  _positive('optim.muon.update_rms', m.update_rms)
  _positive('optim.muon.adamw_rate', m.adamw_rate)
  if m.qk_clip < 0:
    raise ConfigError(f'optim.muon.qk_clip={m.qk_clip} must be >= 0 (0 = off; Kimi K2: 100)')


def _validate_adafactor(o):
  a, defaults = o.adafactor, schema.optim()
  if o.name != 'adafactor':
    changed = [k for k in a if a[k] != defaults.adafactor[k]]
    if changed:
      raise ConfigError(f'optim.adafactor.{changed[0]}={a[changed[0]]!r} is read only by '
                        "Adafactor; set optim.name='adafactor' or leave it at "
                        f'{defaults.adafactor[changed[0]]!r}')
    return
  for name, own in (('b1', 'momentum'), ('b2', 'decay_rate'), ('eps', 'eps')):
    if o[name] != defaults[name]:
      raise ConfigError(f"optim.{name}={o[name]} is AdamW's; optim.name='adafactor' reads "
                        f'optim.adafactor.{own} instead (leave optim.{name} at '
                        f'{defaults[name]})')
  if not 0 < a.decay_rate <= 1:
    raise ConfigError(f'optim.adafactor.decay_rate={a.decay_rate} must be in (0, 1] '
                      '(beta2 = 1 - step^-decay_rate)')
  if not 0 <= a.momentum < 1:
    raise ConfigError(f'optim.adafactor.momentum={a.momentum} must be in [0, 1) (0 = none)')
  if a.clipping_threshold < 0 or a.eps <= 0:
    raise ConfigError(f'optim.adafactor.clipping_threshold={a.clipping_threshold} must be >= 0 '
                      f'(0 = off) and optim.adafactor.eps={a.eps} > 0')
  if not a.factored and a.min_dim_size_to_factor != defaults.adafactor.min_dim_size_to_factor:
    raise ConfigError(f'optim.adafactor.min_dim_size_to_factor={a.min_dim_size_to_factor} '
                      'says which moments to factor, but optim.adafactor.factored=False '
                      'factors none; drop one of them')
  _positive('optim.adafactor.min_dim_size_to_factor', a.min_dim_size_to_factor)


def _validate_mesh(mesh, sharding_config):
  for axis in sharding.MESH_AXES:
    if mesh[axis] == 0 or mesh[axis] < -1:
      raise ConfigError(f'mesh.{axis}={mesh[axis]} must be positive or -1 (the rest)')
  if mesh.slices < 1:
    raise ConfigError(f'mesh.slices={mesh.slices} must be >= 1 (slices joined over DCN)')
  if mesh.dcn_axis not in sharding.DCN_AXES:
    raise ConfigError(f'mesh.dcn_axis={mesh.dcn_axis!r}: the slices can split '
                      f'{", ".join(sharding.DCN_AXES)}; use one of those')
  rest = [axis for axis in sharding.MESH_AXES if mesh[axis] == -1]
  if len(rest) > 1:
    keep = next(axis for axis in rest if axis != 'data')  # the one set on purpose
    fix = ' '.join(f'--config.mesh.{axis}=1' for axis in rest if axis != keep)
    raise ConfigError(f'mesh: {" and ".join(f"mesh.{a}=-1" for a in rest)}, but at most one '
                      'axis may take the remaining devices' +
                      (' (mesh.data is -1 by default)' if 'data' in rest else '') +
                      f'; give the others a size, e.g. {fix} to keep mesh.{keep}=-1')
  for rule in sharding_config.rules:
    if len(rule) != 2:
      raise ConfigError(f'sharding.rules entry {rule!r}: write (logical_axis, mesh_axes)')
    targets = rule[1] if isinstance(rule[1], (tuple, list)) else (rule[1],)
    for target in targets:
      if target is not None and target not in sharding.MESH_AXES:
        raise ConfigError(f'sharding.rules: {rule[0]!r} -> unknown mesh axis {target!r}; '
                          f'use {sharding.MESH_AXES}')
