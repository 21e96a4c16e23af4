"""Building blocks: dense layers with logical axes, embeddings, norms, MLPs, sinusoidal
positions (rotary ones: zoo/models/rope.py).

Glossary: B batch, L length, D d_model, H heads, F mlp width, V vocab, M rows of a matmul,
K a matmul's contracted width.
"""

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from zoo.models import lora as lora_lib
from zoo.models import quant as quant_lib


def _as_tuple(x):
  return tuple(x) if isinstance(x, Sequence) else (x,)


class DenseGeneral(nn.Module):
  """x @ kernel over the trailing `num_in` dims; the kernel carries logical axis names.
  quant: the matmul's precision (model.quant); lora: a low-rank adapter beside the kernel
  when its targets name this layer (train.lora)."""
  features: int | tuple[int, ...]
  kernel_axes: tuple[str, ...]
  num_in: int = 1
  use_bias: bool = False
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32
  init_std: float = 0.0  # 0 = truncated normal with variance init_scale / fan_in
  init_scale: float = 1.0  # multiplies the init variance (e.g. 1 / (2 layers) for residuals)
  quant: quant_lib.Recipe = quant_lib.Recipe()
  lora: lora_lib.Spec = lora_lib.Spec()

  @nn.compact
  def __call__(self, x):
    features = _as_tuple(self.features)
    in_shape = x.shape[-self.num_in:]
    in_axes = tuple(range(self.num_in))
    out_axes = tuple(range(self.num_in, self.num_in + len(features)))
    if self.init_std:
      init = nn.initializers.normal(self.init_std * self.init_scale ** 0.5)
    else:
      init = nn.initializers.variance_scaling(
          self.init_scale, 'fan_in', 'truncated_normal', in_axis=in_axes, out_axis=out_axes)
    kernel = self.param('kernel', nn.with_logical_partitioning(init, self.kernel_axes),
                        in_shape + features, self.param_dtype)
    # One 2-D matmul: XLA:CPU runs it about twice as fast as the N-D dot_general.
    fan_in, fan_out = int(np.prod(in_shape)), int(np.prod(features))
    x_MK = x.astype(self.dtype).reshape(-1, fan_in)
    y = quant_lib.matmul(x_MK, kernel.astype(self.dtype).reshape(fan_in, fan_out), self.quant)
    if self.lora.applies_to(self.name):
      y = y + lora_lib.Adapter(self.lora, self.kernel_axes, self.num_in, self.dtype,
                               self.param_dtype, name='lora')(x_MK, in_shape, features)
    y = y.reshape(x.shape[:-self.num_in] + features)
    if self.use_bias:
      bias = self.param('bias', nn.with_logical_partitioning(
          nn.initializers.zeros, self.kernel_axes[self.num_in:]), features, self.param_dtype)
      y = y + bias.astype(self.dtype).reshape((1,) * (y.ndim - len(features)) + features)
    return y


class Embed(nn.Module):
  """Token (or position) table [V, D]; a tied head reads `embedding` (zoo/models/head.py)."""
  num_embeddings: int
  features: int
  axes: tuple[str, str] = ('vocab', 'embed')
  init_std: float = 1.0
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  def setup(self):
    self.embedding = self.param(
        'embedding',
        nn.with_logical_partitioning(nn.initializers.normal(self.init_std), self.axes),
        (self.num_embeddings, self.features), self.param_dtype)

  def __call__(self, ids_BL):
    return jnp.take(self.embedding, ids_BL, axis=0).astype(self.dtype)


class Norm(nn.Module):
  """LayerNorm or RMSNorm over the last axis, computed in float32."""
  kind: str  # 'layernorm' | 'rmsnorm'
  eps: float = 1e-6
  use_bias: bool = True  # LayerNorm only; RMSNorm never has one
  axis: str = 'embed'  # the logical axis of the scale (and bias): 'head_dim' for QK-norm
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD):
    x = x_BLD.astype(jnp.float32)
    if self.kind == 'layernorm':
      x = x - jnp.mean(x, axis=-1, keepdims=True)
    x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.eps)
    features = (x.shape[-1],)
    as_x = lambda p: p.astype(jnp.float32).reshape((1,) * (x.ndim - 1) + features)
    scale = self.param('scale', nn.with_logical_partitioning(nn.initializers.ones, (self.axis,)),
                       features, self.param_dtype)
    x = x * as_x(scale)
    if self.kind == 'layernorm' and self.use_bias:
      bias = self.param('bias', nn.with_logical_partitioning(nn.initializers.zeros, (self.axis,)),
                        features, self.param_dtype)
      x = x + as_x(bias)
    return x.astype(self.dtype)


ACTIVATION_FNS = {
    'relu': jax.nn.relu,
    'gelu': lambda x: jax.nn.gelu(x, approximate=False),
    'gelu_tanh': lambda x: jax.nn.gelu(x, approximate=True),
    'swiglu': jax.nn.silu,  # gated: act(x W0) * (x W1)
    'geglu': lambda x: jax.nn.gelu(x, approximate=True),
    'clamped_swiglu': jax.nn.silu,  # gpt-oss: gated, and clamped by `gated`
}
GATED = ('swiglu', 'geglu', 'clamped_swiglu')


def gated(activation, gate, up, clamp=(7.0, 1.702)):
  """A gated activation: act(gate) * up, or gpt-oss's clamped form with clamp = (limit,
  alpha) (model.swiglu_limit, model.swiglu_alpha)."""
  if activation == 'clamped_swiglu':
    limit, alpha = clamp
    gate = jnp.minimum(gate, limit)
    return gate * jax.nn.sigmoid(alpha * gate) * (jnp.clip(up, -limit, limit) + 1)
  return ACTIVATION_FNS[activation](gate) * up


class MLP(nn.Module):
  """Feed-forward: wo(act(x wi)), or wo(act(x wi_0) * (x wi_1)) for the gated kinds."""
  mlp_dim: int
  activation: str
  use_bias: bool = False
  clamp: tuple = (7.0, 1.702)  # clamped_swiglu's (limit, alpha)
  init_std: float = 0.0
  out_init_scale: float = 1.0
  quant: quant_lib.Recipe = quant_lib.Recipe()
  lora: lora_lib.Spec = lora_lib.Spec()
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD):
    dense = lambda name, f, axes, scale=1.0: DenseGeneral(
        f, axes, use_bias=self.use_bias, dtype=self.dtype, param_dtype=self.param_dtype,
        init_std=self.init_std, init_scale=scale, quant=self.quant, lora=self.lora, name=name)
    if self.activation in GATED:
      h_BLF = gated(self.activation, dense('wi_0', self.mlp_dim, ('embed', 'mlp'))(x_BLD),
                    dense('wi_1', self.mlp_dim, ('embed', 'mlp'))(x_BLD), self.clamp)
    else:
      h_BLF = ACTIVATION_FNS[self.activation](dense('wi', self.mlp_dim, ('embed', 'mlp'))(x_BLD))
    h_BLF = nn.with_logical_constraint(h_BLF, ('batch', 'length', 'mlp'))
    return dense('wo', x_BLD.shape[-1], ('mlp', 'embed'), self.out_init_scale)(h_BLF)


# ------------------------------------------------------------------------- positions

def sinusoidal(positions_BL, features, max_timescale=10_000.0):
  """Transformer (Vaswani et al.) sin/cos position encodings [B, L, D], float32."""
  half = features // 2
  inv_freq = max_timescale ** (-np.arange(half, dtype=np.float32) / max(half - 1, 1))
  angles_BLk = positions_BL[..., None].astype(jnp.float32) * inv_freq[None, None]
  return jnp.concatenate([jnp.sin(angles_BLk), jnp.cos(angles_BLk)], axis=-1)
