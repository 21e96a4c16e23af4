"""DeepSeek Sparse Attention (DSA; DeepSeek-AI 2025, "DeepSeek-V3.2"): a lightning indexer
scores each visible key for each query, sum over its heads i of w_i relu(q_i . k), and
multi-head latent attention attends to the `top` best keys alone.

Attention runs in MLA's absorbed form (the report's "MQA mode"): queries in the latent
[H, C] and rotary [H, R] against the kept tokens' latent [C] and rotary key [R], which one
gather per query fetches. Queries go a block at a time through a scan whose body is
rematerialised, so neither pass holds more than one block's indexer scores [Z, S] and kept
latents [Z, T, C + R]; what the whole length keeps is the kept keys' indices, L x T, where
dense attention's logits are L x S.

The indexer's loss (the report's L_I) comes out of the same blocks: per query, the KL
divergence from the main attention's distribution (summed over heads, normalised; no
gradient) to the softmax of the indexer's scores, over the kept keys (`dense=False`), or over
every visible key (`dense=True`, the warm-up: every visible key attended, so the output is
dense MLA's; a block holds its logits [H, Z, S] and gathers nothing).

Glossary: B batch, L query length, S key length, Z queries in a block, N blocks, H heads,
C latent, R rotary dim, I index heads, J index head dim, T keys kept per query, X a
gathered row's width.
"""

import jax
import jax.numpy as jnp

from zoo.kernels import reference


def index_scores(q_BLIJ, k_BSJ, weights_BLI):
  """The indexer's scores [B, L, S] in float32: sum_i weights_i relu(q_i . k) (the indexer's
  softmax scale folded into the weights by the caller)."""
  f32 = jnp.float32
  dots_BLIS = jnp.einsum('BLIJ,BSJ->BLIS', q_BLIJ.astype(f32), k_BSJ.astype(f32))
  return jnp.einsum('BLIS,BLI->BLS', jax.nn.relu(dots_BLIS), weights_BLI.astype(f32))


def select(scores_BLS, visible_BLS, top):
  """The `top` best visible keys of each query -> (their slots [B, L, T] int32, whether each
  is visible [B, L, T]: a query with fewer visible keys keeps some it may not attend).
  Ties go to the earlier key."""
  T = min(top, scores_BLS.shape[-1])
  _, keys_BLT = jax.lax.top_k(jnp.where(visible_BLS, scores_BLS, -jnp.inf), T)
  return keys_BLT, jnp.take_along_axis(visible_BLS, keys_BLT, axis=-1)


def _gather(table_BSX, keys_BLT):
  """table rows at each query's kept slots -> [B, L, T, X]."""
  return jax.vmap(lambda table_SX, keys_LT: table_SX[keys_LT])(table_BSX, keys_BLT)


def attend_kept(q_latent_BLHC, q_rope_BLHR, latent_BSC, rope_key_BSR, keys_BLT, kept_BLT,
                scale):
  """Absorbed MLA over each query's kept keys -> (output latent [B, L, H, C] float32, the
  heads' probabilities [B, H, L, T])."""
  f32 = jnp.float32
  latent_BLTC = _gather(latent_BSC.astype(f32), keys_BLT)
  rope_BLTR = _gather(rope_key_BSR.astype(f32), keys_BLT)
  logits_BHLT = (jnp.einsum('BLHC,BLTC->BHLT', q_latent_BLHC.astype(f32), latent_BLTC) +
                 jnp.einsum('BLHR,BLTR->BHLT', q_rope_BLHR.astype(f32), rope_BLTR)) * scale
  logits_BHLT = jnp.where(kept_BLT[:, None], logits_BHLT, reference.MASKED)
  probs_BHLT = jax.nn.softmax(logits_BHLT, axis=-1)
  return jnp.einsum('BHLT,BLTC->BLHC', probs_BHLT, latent_BLTC), probs_BHLT


def attend_visible(q_latent_BLHC, q_rope_BLHR, latent_BSC, rope_key_BSR, visible_BLS, scale):
  """Absorbed MLA over every visible key (the warm-up: dense attention, no gather) -> (output
  latent [B, L, H, C] float32, the heads' probabilities [B, H, L, S])."""
  f32 = jnp.float32
  logits_BHLS = (jnp.einsum('BLHC,BSC->BHLS', q_latent_BLHC.astype(f32), latent_BSC.astype(f32))
                 + jnp.einsum('BLHR,BSR->BHLS', q_rope_BLHR.astype(f32),
                              rope_key_BSR.astype(f32))) * scale
  logits_BHLS = jnp.where(visible_BLS[:, None], logits_BHLS, reference.MASKED)
  probs_BHLS = jax.nn.softmax(logits_BHLS, axis=-1)
  return jnp.einsum('BHLS,BSC->BLHC', probs_BHLS, latent_BSC.astype(f32)), probs_BHLS


def index_kl(probs_BHLT, scores_BLT, kept_BLT, real_BL):
  """The indexer's loss summed over real queries: KL(main || softmax(scores)) over the kept
  keys, the main distribution the heads' probabilities summed and normalised (a target: no
  gradient)."""
  target_BLT = jax.lax.stop_gradient(jnp.sum(probs_BHLT, axis=1))
  target_BLT = jnp.where(kept_BLT, target_BLT, 0.0)
  target_BLT = target_BLT / jnp.maximum(jnp.sum(target_BLT, -1, keepdims=True), 1e-30)
  log_q_BLT = jax.nn.log_softmax(jnp.where(kept_BLT, scores_BLT, reference.MASKED), axis=-1)
  log_p_BLT = jnp.log(jnp.where(target_BLT > 0, target_BLT, 1.0))
  kl_BL = jnp.sum(jnp.where(kept_BLT, target_BLT * (log_p_BLT - log_q_BLT), 0.0), -1)
  return jnp.sum(jnp.where(real_BL, kl_BL, 0.0))


def block_len(length, block):
  """Queries per block: the largest divisor of `length` at most `block`."""
  return max(z for z in range(1, min(length, block) + 1) if length % z == 0)


def attention(queries, keys, index, mask, top, block, scale, dense=False):
  """DSA over a whole length, a block of queries at a time.

  queries: (q_latent [B, L, H, C], q_rope [B, L, H, R]); keys: (latent [B, S, C], rotary
  key [B, S, R]); index: the indexer's (q [B, L, I, J], k [B, S, J], weights [B, L, I]);
  mask: zoo.kernels.mask.Mask of the queries against the keys (segments, causal).
  dense: attend every visible key (the warm-up) instead of the `top` best; a block then
  holds its logits [H, Z, S], no gather.
  -> (output latent [B, L, H, C] float32, kept slots [B, L, T] (None when dense), the
  indexer's KL summed over real queries)."""
  q_latent_BLHC, q_rope_BLHR = queries
  latent_BSC, rope_key_BSR = keys
  index_q_BLIJ, index_k_BSJ, weights_BLI = index
  B, L = q_latent_BLHC.shape[:2]
  Z = block_len(L, block)
  split = lambda x: x.reshape(B, L // Z, Z, *x.shape[2:]).swapaxes(0, 1)  # [N, B, Z, ...]

  @jax.checkpoint
  def body(kl, xs):
    start, q_latent_BZHC, q_rope_BZHR, index_q_BZIJ, weights_BZI, segments_BZ = xs
    visible_BZS = mask.replace(q_segment_ids=segments_BZ,
                               q_start=mask.q_start + start).dense()[:, 0]
    scores_BZS = index_scores(index_q_BZIJ, index_k_BSJ, weights_BZI)
    if dense:
      out_BZHC, probs_BHZS = attend_visible(q_latent_BZHC, q_rope_BZHR, latent_BSC,
                                            rope_key_BSR, visible_BZS, scale)
      kl = kl + index_kl(probs_BHZS, scores_BZS, visible_BZS, segments_BZ > 0)
      return kl, (out_BZHC,)
    keys_BZT, kept_BZT = select(jax.lax.stop_gradient(scores_BZS), visible_BZS, top)
    out_BZHC, probs_BHZT = attend_kept(q_latent_BZHC, q_rope_BZHR, latent_BSC, rope_key_BSR,
                                       keys_BZT, kept_BZT, scale)
    scores_BZT = jnp.take_along_axis(scores_BZS, keys_BZT, axis=-1)
    kl = kl + index_kl(probs_BHZT, scores_BZT, kept_BZT, segments_BZ > 0)
    return kl, (out_BZHC, keys_BZT)

  starts = jnp.arange(L // Z, dtype=jnp.int32) * Z
  kl, outs = jax.lax.scan(
      body, jnp.zeros((), jnp.float32),
      (starts, *map(split, (q_latent_BLHC, q_rope_BLHR, index_q_BLIJ, weights_BLI,
                            mask.q_segment_ids))))
  merge = lambda x: x.swapaxes(0, 1).reshape(B, L, *x.shape[3:])
  return merge(outs[0]), None if dense else merge(outs[1]), kl
