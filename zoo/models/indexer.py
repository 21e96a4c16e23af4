"""The lightning indexer of DeepSeek Sparse Attention (DeepSeek-V3.2; model.mla.index_*):
per MLA layer, a few index heads whose scores pick the keys the layer attends
(zoo/kernels/sparse.py).

- queries: the layer's query latent (after its norm) -> [I, J];
- one key per token, shared by the heads: x -> [J], LayerNormed;
- both rotated by RoPE over their first R dims (halves, as the zoo rotates; the release
  rotates the indexer's dims so, unlike MLA's interleaved pairs), the rest unrotated;
- per-head weights x -> [I], times I^-0.5, and the softmax scale J^-0.5 folded in
  (relu(s x) = s relu(x) for s > 0).

The release rotates q and k by one Hadamard matrix before its FP8 scoring kernel; an
orthogonal rotation of both leaves every q . k unchanged, so at full precision it is left
out (as transformers does). The indexer reads its inputs without gradient: only its own loss
(the KL the kernel returns) trains it, and nothing else trains through it.

Glossary: B batch, L length, D d_model, Q q_lora_rank, I index heads, J index head dim,
R rotary dims.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from zoo.models import layers
from zoo.models import rope


class Indexer(nn.Module):
  """x and the query latent -> (queries [B, L, I, J], keys [B, L, J], weights [B, L, I])."""
  config: object  # the model config (model.mla.index_*, rope)
  rope_scaling: tuple = ()
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD, latent_q_BLQ, positions_BL):
    m, a = self.config, self.config.mla
    I, J, R = a.index_heads, a.index_head_dim, a.qk_rope_head_dim
    x_BLD, latent_q_BLQ = jax.lax.stop_gradient((x_BLD, latent_q_BLQ))
    dense = lambda name, f, axes: layers.DenseGeneral(
        f, axes, dtype=self.dtype, param_dtype=self.param_dtype, init_std=m.kernel_init_std,
        quant=m.quant, name=name)
    q_BLIJ = dense('query', (I, J), ('q_lora', 'heads', None))(latent_q_BLQ)  # heads: tensor
    k_BLJ = layers.Norm('layernorm', 1e-6, axis=None, dtype=self.dtype,
                        param_dtype=self.param_dtype, name='key_norm')(
                            dense('key', J, ('embed', None))(x_BLD))
    fraction = R / J
    rotate = lambda x: rope.apply(x, positions_BL, m.rope_theta, self.rope_scaling, fraction)
    q_BLIJ, k_BLJ = rotate(q_BLIJ), rotate(k_BLJ[:, :, None])[:, :, 0]
    weights_BLI = dense('weights', I, ('embed', 'heads'))(x_BLD)
    return q_BLIJ, k_BLJ, weights_BLI.astype(jnp.float32) * (I ** -0.5 * J ** -0.5)
