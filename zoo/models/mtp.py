"""Multi-token prediction (DeepSeek-V3 report, section 2.2): `model.mtp.depth` modules after
a decoder's stack, module k predicting the token k + 1 ahead of each position.

Module k at position i joins the previous depth's hidden state h(k-1)_i (h(0): the stack's
output after its final norm, what transformers' MTP loader reads) with the embedding of token
i + k: [norm(embedding), norm(h)] concatenated, projected back to d_model, one transformer
block (an MoE block where the model has experts), a final norm; the model's output head
turns that into logits for token i + k + 1, and it is h(k). Module k reads the sequence
shifted by k within each document: a position whose token i + k lies in another document or
past the row is padding there (no keys, no loss).

Glossary: B batch, L length, D d_model, S key length.
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from zoo.kernels import mask as mask_lib
from zoo.models import layers
from zoo.models import lora


def shifted(a_BL, k, fill=0):
  """a_BL moved k positions left, the last k filled."""
  return jnp.concatenate([a_BL[:, k:], jnp.full_like(a_BL[:, :k], fill)], axis=1)


def segments_at(segment_ids_BL, k):
  """Segment ids of depth k's sequence: token i + k's where it shares position i's document
  (and is a real token), else 0 (padding)."""
  ahead_BL = shifted(segment_ids_BL, k)
  return jnp.where(ahead_BL == segment_ids_BL, ahead_BL, 0)


class MTP(nn.Module):
  """The prediction modules; -> [h(1), ..., h(depth)], each [B, L, D], the head's inputs
  (scaled as the stack's output is for a scaled tied head).

  Decoding (kv_segment_ids_BS given; depth 1, zoo/infer/speculative.py): slot j of module
  1's cache is position j; ids_BL are then each slot's next token (j + 1), segment_ids_BL
  and positions_BL that token's, and the block writes its keys and values at the cache
  index, as a decoder layer does."""
  config: Any  # frozen model config
  block: Any  # zoo.models.transformer.Block
  train: bool = False
  adapters: lora.Spec = lora.Spec()  # train.lora's, for the modules' blocks

  @nn.compact
  def __call__(self, h_BLD, embed, ids_BL, segment_ids_BL, positions_BL,
               kv_segment_ids_BS=None, lookahead=0):
    m = self.config
    dtypes = dict(dtype=jnp.dtype(m.dtype), param_dtype=jnp.dtype(m.param_dtype))
    norm = lambda name: layers.Norm(m.norm, m.norm_eps, use_bias=m.use_bias, name=name,
                                    **dtypes)
    decoding = kv_segment_ids_BS is not None
    tied = m.d_model ** -0.5 if m.tie_embeddings and m.scale_tied_logits else 1.0
    out = []
    for k in range(1, m.mtp.depth + 1):
      e_BLD = embed(ids_BL if decoding else shifted(ids_BL, k))
      if m.embed_scale:
        e_BLD = e_BLD * jnp.asarray(m.d_model ** 0.5, e_BLD.dtype)
      joined_BL2D = jnp.concatenate([norm(f'embed_norm_{k}')(e_BLD),
                                    norm(f'hidden_norm_{k}')(h_BLD)], axis=-1)
      h_BLD = layers.DenseGeneral(m.d_model, ('mlp', 'embed'), init_std=m.kernel_init_std,
                                  quant=m.quant, name=f'projection_{k}',
                                  **dtypes)(joined_BL2D)
      if decoding:
        mask = mask_lib.Mask(segment_ids_BL, kv_segment_ids_BS, causal=True,
                             window=m.attention.window, kv_cache=True, lookahead=lookahead)
        positions_k = positions_BL
      else:
        segments_BL = segments_at(segment_ids_BL, k)
        mask = mask_lib.Mask(segments_BL, segments_BL, causal=True, window=m.attention.window)
        positions_k = shifted(positions_BL, k)
      h_BLD, _ = self.block(m, self.train, moe=bool(m.moe.num_experts), adapters=self.adapters,
                              name=f'block_{k}')(
          h_BLD, mask, positions_k)
      h_BLD = norm(f'final_norm_{k}')(h_BLD)
      out.append(h_BLD * tied)
    return out
