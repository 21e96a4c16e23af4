"""Attention kernels behind one switch, `model.attention.kernel`:

- 'xla': the reference (zoo/kernels/reference.py), everywhere; what tests compare with.
- 'splash': JAX's Pallas TPU splash attention (zoo/kernels/splash.py); interpret mode on CPU.
  It takes no additive bias: T5's relative bias and ALiBi use 'xla' (validate() says so).
- 'gpu': cuDNN fused attention (zoo/kernels/gpu.py); bfloat16/float16 on a GPU.
- 'auto': splash on TPU, gpu on GPU, xla elsewhere, and xla where the chosen kernel cannot
  take the call (an additive bias; float32 on GPU). `resolve` says what ran and why.

The platform is the default backend, or the one set by `target(platform)` while tracing
for other devices (AOT compiles for a TPU slice on a CPU machine).
"""

import contextlib

import jax

from zoo.kernels import gpu
from zoo.kernels import mask as mask_lib
from zoo.kernels import reference
from zoo.kernels import splash

KERNELS = ('auto', 'xla', 'splash', 'gpu')
_target = []


@contextlib.contextmanager
def target(platform):
  """Trace kernels for `platform` ('tpu', 'gpu', 'cpu') instead of the default backend."""
  _target.append(platform)
  try:
    yield
  finally:
    _target.pop()


def platform():
  return _target[-1] if _target else jax.default_backend()


def resolve(kernel, has_bias=False, dtype=None, lengths=None, on=None):
  """-> (kernel that runs, why) for the requested kernel on platform `on` (default: now);
  `lengths` = (query length, key length) when known."""
  on = on or platform()
  if kernel == 'auto':
    chosen = {'tpu': 'splash', 'gpu': 'gpu'}.get(on, 'xla')
    if chosen != 'xla' and has_bias:
      return 'xla', f'auto on {on}: an additive position bias, which {chosen} does not take'
    if chosen == 'splash' and lengths and not splash.supports(*lengths):
      return 'xla', f'auto on tpu: lengths {lengths} are not multiples of {splash.LANES}'
    if chosen == 'gpu' and dtype is not None and dtype not in gpu.DTYPES:
      return 'xla', f'auto on gpu: cuDNN needs bfloat16/float16, compute dtype is {dtype}'
    return chosen, f'auto on {on}'
  if kernel == 'gpu' and on != 'gpu':
    raise ValueError(f"model.attention.kernel='gpu' needs a GPU, this is {on}; use 'auto' or "
                     "'xla'")
  if kernel in ('splash', 'gpu') and has_bias:
    raise ValueError(f"model.attention.kernel={kernel!r} takes no additive position bias "
                     "(t5_bias, alibi); use 'xla' or 'auto'")
  if kernel == 'splash' and lengths and not splash.supports(*lengths):
    raise ValueError(f"model.attention.kernel='splash' needs lengths that are multiples of "
                     f"{splash.LANES}, got {lengths}; set data.seq_len to one or use 'xla'")
  return kernel, 'configured'


def attention(query, key, value, mask=None, bias=None, scale=None, kernel='xla',
              block_sizes=(0, 0)):
  """query [B, L, H, K], key/value [B, S, G, K]; `mask` a mask.Mask (or, for 'xla', a boolean
  array or None). -> [B, L, H, K]."""
  scale = query.shape[-1] ** -0.5 if scale is None else scale
  if isinstance(mask, mask_lib.Mask) and mask.kv_cache:  # decoding: a few queries, the cache
    name = 'xla'
  else:
    name, _ = resolve(kernel, bias is not None, query.dtype, (query.shape[1], key.shape[1]))
  if name != 'xla' and not isinstance(mask, mask_lib.Mask):
    raise ValueError(f'kernel {name!r} needs a zoo.kernels.mask.Mask (segment ids, causal, '
                     "window), not a dense mask; use kernel 'xla' for arbitrary masks")
  if name == 'splash':
    return splash.attention(query, key, value, mask, scale, block_sizes,
                            interpret=jax.default_backend() == 'cpu' and platform() == 'cpu')
  if name == 'gpu':
    return gpu.attention(query, key, value, mask, bias, scale)
  dense = mask.dense() if isinstance(mask, mask_lib.Mask) else mask
  return reference.dot_product_attention(query, key, value, dense, bias, scale)
