"""The reference attention (kernel 'xla'): plain einsums and a float32 softmax.

Glossary: B batch, L query length, S key length, H heads, G kv heads, Q = H // G query
heads per kv head, K head dim. Masks are boolean, True = may attend, broadcastable to
[B, H, L, S].
"""

import jax
import jax.numpy as jnp

from zoo import platform

MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite, so fully masked rows stay finite


def soft_cap(logits, cap):
  """cap * tanh(logits / cap) (Gemma 2's logit soft-capping); cap 0 = none."""
  return cap * jnp.tanh(logits / cap) if cap else logits


def dot_product_attention(query, key, value, mask=None, bias=None, scale=None, softcap=0.0,
                          sinks=None):
  """softmax(soft_cap(q k^T * scale) + bias, masked) v with query [B,L,H,K], key/value
  [B,S,G,K].

  G must divide H (GQA; G = 1 is MQA). scale defaults to K^-0.5. Logits and softmax run in
  float32; the result has the query's dtype. sinks [H] (gpt-oss): a learned logit per head
  that joins every row's softmax normalizer and takes its share of probability to no value,
  so a row may attend to nothing (a padding query's output is 0).
  """
  q_BLHK, k_BSGK, v_BSGK = query, key, value
  B, L, H, K = q_BLHK.shape
  G = k_BSGK.shape[2]
  if H % G:
    raise ValueError(f'kv heads {G} do not divide query heads {H}')
  scale = K ** -0.5 if scale is None else scale
  q_BLGQK = q_BLHK.reshape(B, L, G, H // G, K)
  from zoo import kernels  # pylint: disable=g-import-not-at-top (the package imports this)
  operands = platform.cpu_dot_operands(kernels.platform(), q_BLGQK, k_BSGK)
  logits_BGQLS = jnp.einsum('BLGQK,BSGK->BGQLS', *operands,
                            preferred_element_type=jnp.float32) * scale
  logits_BHLS = soft_cap(logits_BGQLS.reshape(B, H, L, -1), softcap)
  if bias is not None:
    logits_BHLS = logits_BHLS + bias.astype(jnp.float32)
  if mask is not None:
    logits_BHLS = jnp.where(mask, logits_BHLS, MASKED)
  probs_BGQLS = softmax(logits_BHLS, sinks).reshape(logits_BGQLS.shape)
  out_BLGQK = jnp.einsum('BGQLS,BSGK->BLGQK', probs_BGQLS.astype(v_BSGK.dtype), v_BSGK)
  return out_BLGQK.reshape(B, L, H, K).astype(q_BLHK.dtype)


def softmax(logits_BHLS, sinks=None):
  """Softmax over the keys; with sinks [H], exp(sink) joins each row's normalizer."""
  if sinks is None:
    return jax.nn.softmax(logits_BHLS, axis=-1)
  sinks_1H11 = sinks.astype(jnp.float32).reshape(1, -1, 1, 1)
  top_BHL1 = jnp.maximum(jnp.max(logits_BHLS, axis=-1, keepdims=True), sinks_1H11)
  top_BHL1 = jax.lax.stop_gradient(top_BHL1)
  exp_BHLS = jnp.exp(logits_BHLS - top_BHL1)
  return exp_BHLS / (jnp.sum(exp_BHLS, axis=-1, keepdims=True) + jnp.exp(sinks_1H11 - top_BHL1))


def max_logits(query, key, mask=None, scale=None):
  """Each query head's largest logit q k^T * scale over the positions it may attend
  (before any cap or bias), float32 [H], not differentiated: what MuonClip's QK-clip reads
  (zoo/muon.py). query [B,L,H,K], key [B,S,G,K]; one more logits pass, as this kernel's."""
  q_BLHK, k_BSGK = jax.lax.stop_gradient(query), jax.lax.stop_gradient(key)
  B, L, H, K = q_BLHK.shape
  G = k_BSGK.shape[2]
  scale = K ** -0.5 if scale is None else scale
  logits_BGQLS = jnp.einsum('BLGQK,BSGK->BGQLS', q_BLHK.reshape(B, L, G, H // G, K), k_BSGK,
                            preferred_element_type=jnp.float32) * scale
  logits_BHLS = logits_BGQLS.reshape(B, H, L, -1)
  if mask is not None:
    logits_BHLS = jnp.where(mask, logits_BHLS, -jnp.inf)
  return jnp.max(logits_BHLS, axis=(0, 2, 3))

