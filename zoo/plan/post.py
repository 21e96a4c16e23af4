"""Plan mode for post-training objectives (train.objective): what they add to a step beyond the
policy's own training.

- reference: the frozen reference's parameters per device (laid out by the policy's rules,
  no optimizer state or gradients) and its forward FLOPs; the policy's own shape (an SFT
  copy) unless train.reference names a run of another shape; none with LoRA (the adapters
  are switched off) or for SimPO.
- preference pairs: each pair is two rows, so a step trains 2 x batch x seq_len tokens and
  the reference reads them all once.
- grpo: a step samples batch_size completions (batch_size / G prompts, G each) into a KV
  cache of batch_size x seq_len slots, split over the batch axes (held while sampling, not
  during the update), runs two forwards over the rows (the sampling policy's and the
  reference's log-probabilities), then `updates` train steps.
FLOPs follow zoo/counting.py: training 3 x the forward; decoding's forward over every
position of the rows stands for the prefill and the decoded tokens.
"""

import math

from zoo import counting
from zoo import objectives
from zoo import sharding
from zoo.plan import analytic
from zoo.train import teacher as teacher_lib


def reference(config, sizes):
  """-> {'params', 'params_bytes_per_device', 'forward_flops_per_token', 'shape'} of the
  objective's frozen reference copy, or None."""
  if not objectives.needs_reference(config):
    return None
  if teacher_lib.source(config).field == 'train.reference':
    return {**analytic.teacher_plan(config, sizes), 'shape': 'train.reference'}
  own = config.copy_and_resolve_references()
  own.train.lora.rank = 0
  boxed = counting.abstract_params(own)
  total, held, _, _ = analytic.state_bytes(boxed, sharding.rules(own), sizes, own.optim)
  return {'params': total, 'params_bytes_per_device': held['params'],
          'forward_flops_per_token': counting.flops_per_token(own, boxed) / 3,
          'shape': "the policy's shape, from train.init_params"}


def plan(config, sizes, result):
  """-> the 'post_training' fields of the plan for `result` (analytic.plan's dict); adds the
  reference's bytes to result['per_device_bytes']."""
  t, objective = config.train, config.train.objective
  out = {'objective': objective}
  frozen = reference(config, sizes)
  train_flops = result['flops_per_token'] + result['remat_flops_per_token']
  forward = result['flops_per_token'] / 3
  tokens = t.batch_size * config.data.seq_len
  if frozen:
    out['reference'] = frozen
    per_device = result['per_device_bytes']
    per_device.pop('total')
    per_device['reference'] = frozen['params_bytes_per_device']
    per_device['total'] = sum(per_device.values())
  reference_forward = frozen['forward_flops_per_token'] if frozen else 0.0
  if objective in objectives.PREFERENCE:
    out['tokens_per_step'] = 2 * tokens  # chosen and rejected
    out['flops_per_step'] = 2 * tokens * (train_flops + reference_forward)
  elif objective == 'grpo':
    g = t.grpo
    cache_bytes = result.get('kv_cache_bytes_per_token', 0) * tokens
    out.update(prompts_per_step=t.batch_size // g.group_size, group_size=g.group_size,
               completions_per_step=t.batch_size, max_new_tokens=g.max_new_tokens,
               updates=g.updates,
               sampler_cache_bytes_per_device=int(cache_bytes / sharding_batch(sizes)),
               sampling_flops_per_step=tokens * forward,
               log_prob_flops_per_step=tokens * (forward + reference_forward * bool(g.kl_beta)),
               training_flops_per_step=g.updates * tokens * train_flops)
    out['flops_per_step'] = (out['sampling_flops_per_step'] + out['log_prob_flops_per_step']
                             + out['training_flops_per_step'])
  return out


def sharding_batch(sizes):
  """How many ways the batch axes split a batch on this mesh."""
  return math.prod(sizes.get(a, 1) for a in sharding.BATCH_AXES)


def lines(result):
  """The plan report's lines for result['post_training']."""
  post = result.get('post_training')
  if not post:
    return []
  gib = lambda b: f'{b / 2**30:.2f} GiB'
  out = [f"post-training ({post['objective']}): {post['flops_per_step']:.4g} FLOPs a step"]
  if 'topology' in result:  # at the slice's peak, every chip busy
    t = result['topology']
    seconds = post['flops_per_step'] / (t['chips'] * t['peak_flops_per_chip'])
    out[0] += f", {seconds:.3g} s at {t['name']}'s peak"
  if 'reference' in post:
    r = post['reference']
    out.append(f"reference ({r['shape']}): {r['params']:,} parameters, "
               f"{gib(r['params_bytes_per_device'])} per device, its forward "
               f"{r['forward_flops_per_token']:.4g} FLOPs/token")
  if 'tokens_per_step' in post:
    out.append(f"pairs: two rows each, {post['tokens_per_step']:,} tokens a step")
  if 'sampler_cache_bytes_per_device' in post:
    out.append(f"sampling: {post['prompts_per_step']} prompts x {post['group_size']} "
               f"completions of up to {post['max_new_tokens']} tokens a step, a KV cache of "
               f"{gib(post['sampler_cache_bytes_per_device'])} per device while sampling; "
               f"FLOPs: sampling {post['sampling_flops_per_step']:.4g}, log-probabilities "
               f"{post['log_prob_flops_per_step']:.4g}, {post['updates']} update(s) "
               f"{post['training_flops_per_step']:.4g}")
  return out
