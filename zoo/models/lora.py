"""Low-rank adapters (train.lora; Hu et al. 2021): beside each targeted dense kernel W
[in..., out...] an adapter a [in..., r] (random) and b [r, out...] (zeros, so training
starts from the base model) adds dropout(x) a b x alpha / r to the layer's output. Only
the adapters (and a task's new head) train; `merge` folds them into the kernels for export.

Glossary: M rows, K the kernel's fan-in, N the kernel's fan-out, R the adapter's rank.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# an adapter's key under its dense layer (the layers a target can name: zoo/run/checks.py
# dense_layers)
NAME = 'lora'


@dataclasses.dataclass(frozen=True)
class Spec:
  """train.lora as a module attribute; rank 0 = no adapters."""
  rank: int = 0
  alpha: float = 16.0
  dropout: float = 0.0
  targets: tuple[str, ...] = ()

  def applies_to(self, layer_name):
    return self.rank > 0 and layer_name in self.targets

  @property
  def scale(self):
    return self.alpha / self.rank

  def for_training(self, train):
    """The spec a layer applies: no dropout outside training."""
    return self if train else dataclasses.replace(self, dropout=0.0)


def spec(lora_config):
  """train.lora (None: none) -> the Spec a model is built with (zoo.families.build)."""
  if lora_config is None or not lora_config.rank:
    return Spec()
  targets = tuple(t.strip() for t in lora_config.targets.split(',') if t.strip())
  return Spec(lora_config.rank, lora_config.alpha, lora_config.dropout, targets)


class Adapter(nn.Module):
  """The adapter of one DenseGeneral: x [M, K] -> [M, N], x a b x alpha / r."""
  spec: Spec
  kernel_axes: tuple[str, ...]
  num_in: int
  dtype: jnp.dtype = jnp.float32
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_MK, in_shape, features):
    s = self.spec
    in_axes, out_axes = self.kernel_axes[:self.num_in], self.kernel_axes[self.num_in:]
    # a: the uniform fan-in init PEFT gives it (kaiming-uniform, a = sqrt(5))
    a = self.param('a', nn.with_logical_partitioning(
        nn.initializers.variance_scaling(1 / 3, 'fan_in', 'uniform',
                                         in_axis=tuple(range(self.num_in)),
                                         out_axis=self.num_in), in_axes + (None,)),
                   tuple(in_shape) + (s.rank,), self.param_dtype)
    b = self.param('b', nn.with_logical_partitioning(nn.initializers.zeros,
                                                     (None,) + out_axes),
                   (s.rank,) + tuple(features), self.param_dtype)
    x_MK = nn.Dropout(s.dropout)(x_MK, deterministic=not s.dropout)
    fan_in, fan_out = int(np.prod(in_shape)), int(np.prod(features))
    h_MR = x_MK @ a.astype(self.dtype).reshape(fan_in, s.rank)
    return (h_MR @ b.astype(self.dtype).reshape(s.rank, fan_out)) * jnp.asarray(
        s.scale, self.dtype)


def is_adapter(path):
  """A parameter path (tuple of keys) inside an adapter."""
  return NAME in path


def merge(params, scale):
  """Parameters with adapters -> the same without them, each kernel W + a b x scale (alpha
  / rank): what the adapted layer computes, as one kernel. Stacked layers (leading axes on
  all three) merge slice by slice."""
  if not isinstance(params, dict):
    return params
  out = {k: merge(v, scale) for k, v in params.items() if k != NAME}
  if NAME in params:
    kernel, a, b = params['kernel'], params[NAME]['a'], params[NAME]['b']
    rank = a.shape[-1]
    features = kernel.ndim - a.ndim + 1  # kernel [lead, in, out], a [lead, in, R]
    lead = a.shape[:b.ndim - 1 - features]
    a_2 = jnp.asarray(a, jnp.float32).reshape(lead + (-1, rank))
    b_2 = jnp.asarray(b, jnp.float32).reshape(lead + (rank, -1))
    delta = jnp.matmul(a_2, b_2).reshape(kernel.shape) * scale
    out['kernel'] = (jnp.asarray(kernel, jnp.float32) + delta).astype(kernel.dtype)
  return out


def switched_off(params):
  """The parameters with every adapter's b at zero: the layers compute their frozen kernels
  alone (a preference objective's reference, without a second copy of the model)."""
  def one(path, x):
    keys = tuple(k.key for k in path if hasattr(k, 'key'))  # dict keys (a box's aside)
    return jnp.zeros_like(x) if is_adapter(keys) and keys[-1] == 'b' else x
  return jax.tree_util.tree_map_with_path(one, params)


def trainable(params):
  """A tree of bools like `params`: True on the adapters and on a task's label head
  (transformer.label_head's 'classifier', new in a fine-tuning run)."""
  def one(path, _):
    keys = tuple(getattr(k, 'key', k) for k in path)
    return is_adapter(keys) or 'classifier' in keys
  return jax.tree_util.tree_map_with_path(one, params)
