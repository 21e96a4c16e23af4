"""The vocabulary projection as a function of the parameters, for the memory-lean loss.

Each family's model ends in hidden states [B, L, D] -> logits [B, L, V]; with head=False it
returns those hidden states, and `project` computes the same logits from the parameters on
any slice of them (zoo/families/loss.py runs it over chunks of the sequence). The
arithmetic is the model's: inputs and table cast to the compute dtype, one matmul, the
bias, float32 out.

Glossary: B batch, L length, D d_model, V vocab.
"""

import jax.numpy as jnp

from zoo.kernels import reference


def project(m, params, x_BLD):
  """Hidden states (the model's head=False output) -> float32 logits [B, L, V]."""
  dtype = jnp.dtype(m.dtype)
  x_BLD = x_BLD.astype(dtype)
  if m.tie_embeddings:
    table_VD = params['token_embed']['embedding'].astype(dtype)
    logits_BLV = jnp.einsum('BLD,VD->BLV', x_BLD, table_VD)
    if 'mlm_bias' in params:  # BERT's tied MLM head adds a bias per word
      logits_BLV = logits_BLV + params['mlm_bias'][None, None]
  else:
    head = params['logits']
    B, L, D = x_BLD.shape
    logits_BLV = (x_BLD.reshape(B * L, D) @ head['kernel'].astype(dtype)).reshape(B, L, -1)
    if 'bias' in head:
      logits_BLV = logits_BLV + head['bias'].astype(dtype)[None, None]
  return reference.soft_cap(logits_BLV.astype(jnp.float32), m.final_softcap)
