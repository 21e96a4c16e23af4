"""AdamW with linear warmup then cosine/linear/constant decay, clipping and a decay mask."""

import jax
import optax

NO_DECAY_LEAVES = ('scale', 'bias')  # norm gains and biases; Flax names them so


def schedule(optim_config, total_steps):
  """Learning rate per step: 0 -> peak over warmup_steps, then decay to the floor."""
  o = optim_config
  peak, floor = o.learning_rate, o.learning_rate * o.min_learning_rate_ratio
  decay_steps = max(total_steps - o.warmup_steps, 1)
  decay = {
      'cosine': optax.cosine_decay_schedule(peak, decay_steps, alpha=o.min_learning_rate_ratio),
      'linear': optax.linear_schedule(peak, floor, decay_steps),
      'constant': optax.constant_schedule(peak),
  }[o.schedule]
  warmup = optax.linear_schedule(0.0, peak, o.warmup_steps)
  return optax.join_schedules([warmup, decay], [o.warmup_steps])


def decay_mask(params):
  """True where weight decay applies: every leaf but norm scales and biases."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: getattr(path[-1], 'key', None) not in NO_DECAY_LEAVES, params)


def make(optim_config, total_steps):
  o = optim_config
  adamw = optax.adamw(schedule(o, total_steps), b1=o.b1, b2=o.b2, eps=o.eps,
                      weight_decay=o.weight_decay, mask=decay_mask)
  if not o.clip_norm:
    return adamw
  return optax.chain(optax.clip_by_global_norm(o.clip_norm), adamw)
