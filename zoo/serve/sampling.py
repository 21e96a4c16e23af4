"""Sampling with settings per row: each request of a step brings its own temperature, top-k,
top-p, min-p, penalties and seed, as arrays over the step's rows, so one compiled step
serves them all.

The filters are zoo/infer/generate.py's, per row: a row's tokens outside its top-k, its
top-p mass and under min-p x the likeliest token's probability are dropped (the likeliest
stays), after the temperature; temperature 0 takes the argmax. The penalties follow vLLM's
reading of OpenAI's: the repetition penalty (CTRL) on every token seen, prompt included;
frequency and presence penalties on the output's tokens. A row's draw is keyed by its seed
and the index of the token it draws, so recomputing a preempted sequence draws the same.

Glossary: R rows, V vocab, T seen tokens.
"""

import numpy as np
import jax
import jax.numpy as jnp

FIELDS = ('temperature', 'top_k', 'top_p', 'min_p', 'repetition_penalty', 'frequency_penalty',
          'presence_penalty', 'seed', 'index', 'banned')


def host_arrays(settings, rows):
  """[(Sampling, index of the token drawn, id it may not draw or -1)] -> {field: [rows]}
  numpy arrays; rows past the list are greedy."""
  dtypes = {'top_k': np.int32, 'seed': np.uint32, 'index': np.int32, 'banned': np.int32}
  out = {f: np.zeros(rows, dtypes.get(f, np.float32)) for f in FIELDS}
  out['top_p'][:] = 1.0
  out['repetition_penalty'][:] = 1.0
  out['banned'][:] = -1
  for r, (s, index, banned) in enumerate(settings):
    for f in FIELDS[:-3]:
      out[f][r] = getattr(s, f)
    out['seed'][r], out['index'][r], out['banned'][r] = s.seed, index, banned
  return out


def filter_rows(logits_RV, temperature_R, top_k_R, top_p_R, min_p_R):
  """Each row's logits / its temperature with its filters applied in generate's order
  (-inf outside); a row's top_k 0, top_p 1 and min_p 0 turn its filters off."""
  scaled_RV = logits_RV / jnp.maximum(temperature_R, 1e-6)[:, None]
  sorted_RV = jnp.sort(scaled_RV, axis=-1)[:, ::-1]
  V = logits_RV.shape[-1]
  kth_R = jnp.take_along_axis(sorted_RV, jnp.clip(top_k_R - 1, 0, V - 1)[:, None], 1)[:, 0]
  floor_R = jnp.where(top_k_R > 0, kth_R, -jnp.inf)
  in_top_k_RV = (jnp.arange(V)[None] < top_k_R[:, None]) | (top_k_R[:, None] <= 0)
  sorted_RV = jnp.where(in_top_k_RV, sorted_RV, -jnp.inf)  # top-p is of what top-k kept
  probs_RV = jax.nn.softmax(sorted_RV, axis=-1)
  before_RV = jnp.cumsum(probs_RV, axis=-1) - probs_RV  # mass of the likelier tokens
  nucleus_RV = jnp.where(before_RV < top_p_R[:, None], sorted_RV, jnp.inf)
  floor_R = jnp.maximum(floor_R, jnp.where(top_p_R < 1.0, jnp.min(nucleus_RV, -1), -jnp.inf))
  min_p_floor_R = sorted_RV[:, 0] + jnp.log(jnp.maximum(min_p_R, 1e-30))
  floor_R = jnp.maximum(floor_R, jnp.where(min_p_R > 0, min_p_floor_R, -jnp.inf))
  return jnp.where(scaled_RV < floor_R[:, None], -jnp.inf, scaled_RV)


def penalize_rows(logits_RV, seen_RT, outputs_from_R, arrays):
  """Logits with each row's penalties for the tokens it has seen (seen_RT: its prompt and
  output ids, -1 past them; outputs_from_R: where its output starts in seen_RT)."""
  R, T = seen_RT.shape
  rows_RT = jnp.broadcast_to(jnp.arange(R)[:, None], (R, T))
  ids_RT = jnp.maximum(seen_RT, 0)
  counts_RV = jnp.zeros(logits_RV.shape, jnp.float32).at[rows_RT, ids_RT].add(
      (seen_RT >= 0).astype(jnp.float32))
  is_output_RT = jnp.arange(T)[None] >= outputs_from_R[:, None]
  output_counts_RV = jnp.zeros(logits_RV.shape, jnp.float32).at[rows_RT, ids_RT].add(
      ((seen_RT >= 0) & is_output_RT).astype(jnp.float32))
  repetition_R1 = arrays['repetition_penalty'][:, None]
  repeated_RV = jnp.where(logits_RV > 0, logits_RV / repetition_R1, logits_RV * repetition_R1)
  logits_RV = jnp.where(counts_RV > 0, repeated_RV, logits_RV)
  return (logits_RV - arrays['frequency_penalty'][:, None] * output_counts_RV -
          arrays['presence_penalty'][:, None] * (output_counts_RV > 0))


def min_p_rows(logits_RV, temperature_R, min_p_R):
  """filter_rows without top-k and top-p: no sort."""
  scaled_RV = logits_RV / jnp.maximum(temperature_R, 1e-6)[:, None]
  floor_R = jnp.max(scaled_RV, axis=-1) + jnp.log(jnp.maximum(min_p_R, 1e-30))
  return jnp.where((min_p_R[:, None] > 0) & (scaled_RV < floor_R[:, None]), -jnp.inf,
                   scaled_RV)


def sample_rows(logits_RV, arrays):
  """-> int32 [R]: each row's token (argmax where its temperature is 0). A step whose rows
  are all greedy skips the draw, and one whose rows use no top-k or top-p skips the sort
  (XLA:CPU sorts [32, 4096] in ~20 ms, longer than a small model's step)."""
  logits_RV = logits_RV.astype(jnp.float32)
  V = logits_RV.shape[-1]
  banned_RV = jnp.arange(V)[None] == arrays['banned'][:, None]
  logits_RV = jnp.where(banned_RV, -jnp.inf, logits_RV)
  greedy_R = jnp.argmax(logits_RV, axis=-1).astype(jnp.int32)
  t_R, k_R, p_R, m_R = (arrays[f] for f in ('temperature', 'top_k', 'top_p', 'min_p'))

  def draw(logits_RV):
    filtered_RV = jax.lax.cond(jnp.any((k_R > 0) | (p_R < 1.0)),
                               lambda x: filter_rows(x, t_R, k_R, p_R, m_R),
                               lambda x: min_p_rows(x, t_R, m_R), logits_RV)
    keys_R = jax.vmap(lambda s, i: jax.random.fold_in(jax.random.PRNGKey(s), i))(
        arrays['seed'], arrays['index'])
    drawn_R = jax.vmap(jax.random.categorical)(keys_R, filtered_RV).astype(jnp.int32)
    return jnp.where(t_R > 0, drawn_R, greedy_R)
  return jax.lax.cond(jnp.any(t_R > 0), draw, lambda _: greedy_R, logits_RV)
