"""The LM head: hidden states [B, L, D] -> float32 logits [B, L, V], written once.

`logits` is the arithmetic (inputs and table cast to the compute dtype, one matmul, the
bias, float32 out, model.final_softcap); `Head` is the module every stack ends in (its own
kernel and bias, named as a DenseGeneral names them, or the token table it is handed when
the embeddings are tied); `project` computes the same logits from the parameters, on any
slice of the hidden states a model returns with head=False (zoo/families/loss.py runs it
over chunks of the sequence, speculative decoding on the MTP module's states).

Glossary: B batch, L length, D d_model, V vocab.
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from zoo.kernels import reference


def logits(m, x_BLD, table_VD=None, kernel_DV=None, bias_V=None):
  """Against the token table [V, D] (tied) or the head's kernel [D, V], + bias_V (added as
  given: the caller says its dtype) -> float32 logits [B, L, V], soft-capped."""
  dtype = jnp.dtype(m.dtype)
  x_BLD = x_BLD.astype(dtype)
  if table_VD is not None:
    logits_BLV = jnp.einsum('BLD,VD->BLV', x_BLD, table_VD.astype(dtype))
  else:  # one 2-D matmul, as DenseGeneral's (XLA:CPU runs it faster than the N-D dot)
    B, L, D = x_BLD.shape
    logits_BLV = (x_BLD.reshape(B * L, D) @ kernel_DV.astype(dtype)).reshape(B, L, -1)
  if bias_V is not None:
    logits_BLV = logits_BLV + bias_V[None, None]
  return reference.soft_cap(logits_BLV.astype(jnp.float32), m.final_softcap)


class Head(nn.Module):
  """The head a stack ends in: `table_VD` given (tied embeddings), logits against it (+
  `bias_V`: BERT's MLM bias); else against its own kernel ['embed', 'vocab'] (and bias,
  with use_bias), initialised as a DenseGeneral (model.kernel_init_std, or fan-in)."""
  config: Any
  use_bias: bool = False

  @nn.compact
  def __call__(self, x_BLD, table_VD=None, bias_V=None):
    m = self.config
    if table_VD is not None:
      return logits(m, x_BLD, table_VD=table_VD, bias_V=bias_V)
    if m.kernel_init_std:
      init = nn.initializers.normal(m.kernel_init_std)
    else:
      init = nn.initializers.variance_scaling(1.0, 'fan_in', 'truncated_normal', in_axis=(0,),
                                              out_axis=(1,))
    param_dtype = jnp.dtype(m.param_dtype)
    kernel_DV = self.param('kernel', nn.with_logical_partitioning(init, ('embed', 'vocab')),
                           (x_BLD.shape[-1], m.vocab_size), param_dtype)
    bias_V = None
    if self.use_bias:
      bias_V = self.param('bias', nn.with_logical_partitioning(nn.initializers.zeros,
                                                               ('vocab',)),
                          (m.vocab_size,), param_dtype).astype(jnp.dtype(m.dtype))
    return logits(m, x_BLD, kernel_DV=kernel_DV, bias_V=bias_V)


def project(m, params, x_BLD):
  """Hidden states (the model's head=False output) -> float32 logits [B, L, V], from the
  parameters `Head` reads."""
  if m.tie_embeddings:  # BERT's tied MLM head adds a bias per word
    return logits(m, x_BLD, table_VD=params['token_embed']['embedding'],
                  bias_V=params.get('mlm_bias'))
  head = params['logits']
  bias_V = head['bias'].astype(jnp.dtype(m.dtype)) if 'bias' in head else None
  return logits(m, x_BLD, kernel_DV=head['kernel'], bias_V=bias_V)
