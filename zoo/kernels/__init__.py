"""Attention kernels behind one switch, `model.attention.kernel`:

- 'xla': the reference (zoo/kernels/reference.py), everywhere; what tests compare with.
  On CPUs, under a causal `Mask` of 128 tokens or more, it runs in query blocks that skip
  the keys the mask hides (zoo/kernels/causal.py; splash and cuDNN skip them themselves).
- 'splash': JAX's Pallas TPU splash attention (zoo/kernels/splash.py); interpret mode on CPU.
  It takes no additive bias.
- 'flash_bias': the zoo's Pallas TPU flash kernel that computes T5's relative position bias
  or ALiBi inside each block (zoo/kernels/flash_bias.py); interpret mode on CPU. Attention
  without a bias in the same model (T5's cross-attention) runs splash (xla at lengths
  splash cannot block).
- 'gpu': cuDNN fused attention (zoo/kernels/gpu.py); bfloat16/float16 on a GPU; a position
  bias goes to cuDNN as a dense [B, H, L, S] input.
- 'auto': on TPU flash_bias where there is a position bias and splash elsewhere, gpu on GPU,
  xla on CPU; xla where the chosen kernel cannot take the call (lengths it cannot block,
  float32 on GPU). `resolve` says what ran and why.

Attention sinks (gpt-oss: a learned logit per head in every row's softmax normalizer) run
in the reference, the CPU causal blocks, splash (its own `sinks` argument), both rings and
the decoding paths; flash_bias and cuDNN take none, so 'auto' passes over them to xla and
says why, as for soft-capping.

On a mesh with a `context` axis (mesh.context > 1) self-attention over a sequence that
splits evenly runs ring attention instead, with no position bias: its local blocks in
splash (zoo/kernels/ring_splash.py) where 'splash', or 'auto' on TPU, takes the chunk
lengths, else in XLA (zoo/kernels/ring.py); 'flash_bias' and 'gpu' are refused there by
the config.

A position bias reaches the kernels as a bias.PositionBias (positions and parameters);
`prepare_bias` turns it into the dense array once per stack where the kernel wants that.
The platform is the default backend, or the one set by `target(platform)` while tracing
for other devices (AOT compiles for a TPU slice on a CPU machine).
"""

import contextlib

import jax
import jax.numpy as jnp

from zoo import sharding
from zoo.kernels import bias as bias_lib
from zoo.kernels import causal
from zoo.kernels import flash_bias
from zoo.kernels import gpu
from zoo.kernels import mask as mask_lib
from zoo.kernels import reference
from zoo.kernels import ring
from zoo.kernels import ring_splash
from zoo.kernels import shard
from zoo.kernels import splash

KERNELS = ('auto', 'xla', 'splash', 'flash_bias', 'gpu')
SOFTCAP_REFUSED = ('flash_bias', 'gpu')  # kernels without logit soft-capping
SINKS_REFUSED = ('flash_bias', 'gpu')  # kernels without attention sinks
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


def resolve(kernel, has_bias=False, dtype=None, lengths=None, on=None, softcap=False,
            sinks=False):
  """-> (kernel that runs, why) for the requested kernel on platform `on` (default: now);
  `lengths` = (query length, key length) when known; softcap: the logits are soft-capped;
  sinks: the softmax has attention sinks."""
  on = on or platform()
  if kernel == 'auto':
    chosen, why = _auto(has_bias, dtype, lengths, on)
    if softcap and chosen in SOFTCAP_REFUSED:
      return 'xla', f'auto on {on}: {chosen} cannot soft-cap the logits'
    if sinks and chosen in SINKS_REFUSED:
      return 'xla', f'auto on {on}: {chosen} takes no attention sinks'
    return chosen, why
  if softcap and kernel in SOFTCAP_REFUSED:
    raise ValueError(f'model.attention.kernel={kernel!r} cannot soft-cap the logits '
                     "(model.attention.softcap); use 'auto', 'splash' or 'xla'")
  if sinks and kernel in SINKS_REFUSED:
    raise ValueError(f'model.attention.kernel={kernel!r} takes no attention sinks '
                     "(model.attention.sinks); use 'auto', 'splash' or 'xla'")
  if kernel == 'gpu' and on != 'gpu':
    raise ValueError(f"model.attention.kernel='gpu' needs a GPU, this is {on}; use 'auto' or "
                     "'xla'")
  if kernel == 'flash_bias' and on == 'gpu':
    raise ValueError("model.attention.kernel='flash_bias' is a TPU kernel (interpret mode on "
                     "CPU); on a GPU use 'gpu' or 'auto', which pass the bias to cuDNN")
  if kernel == 'splash' and has_bias:
    raise ValueError("model.attention.kernel='splash' takes no additive position bias "
                     "(t5_bias, alibi); use 'flash_bias', 'auto' or 'xla'")
  if kernel == 'flash_bias' and not has_bias:  # e.g. T5's cross-attention
    if lengths and not splash.supports(*lengths):
      return 'xla', f'flash_bias configured; no bias here, and splash cannot block {lengths}'
    return 'splash', 'flash_bias configured; no bias here'
  if kernel == 'splash' and lengths and not splash.supports(*lengths):
    raise ValueError(f"model.attention.kernel='splash' needs lengths that are multiples of "
                     f"{splash.LANES}, got {lengths}; set data.seq_len to one or use 'xla'")
  if kernel == 'flash_bias' and lengths:
    flash_bias.block_sizes(*lengths)  # says which field to change
  return kernel, 'configured'


def _auto(has_bias, dtype, lengths, on):
  chosen = {'tpu': 'flash_bias' if has_bias else 'splash', 'gpu': 'gpu'}.get(on, 'xla')
  if chosen == 'splash' and lengths and not splash.supports(*lengths):
    return 'xla', f'auto on tpu: lengths {lengths} are not multiples of {splash.LANES}'
  if chosen == 'flash_bias' and lengths and not flash_bias.supports(*lengths):
    return 'xla', (f'auto on tpu: lengths {lengths} are neither multiples of '
                   f'{flash_bias.LANES} nor one block')
  if chosen == 'gpu' and dtype is not None and dtype not in gpu.DTYPES:
    return 'xla', f'auto on gpu: cuDNN needs bfloat16/float16, compute dtype is {dtype}'
  if chosen == 'flash_bias':
    return chosen, 'auto on tpu: the position bias computed in the kernel\'s blocks'
  return chosen, f'auto on {on}'


def prepare_bias(kernel, bias, dtype, kv_cache=False):
  """A stack's bias.PositionBias as the kernel that will run takes it: kept for flash_bias,
  else the dense [B, H, L, S] array, built once for all the stack's layers."""
  if bias is None:
    return None
  lengths = (bias.q_positions.shape[1], bias.kv_positions.shape[1])
  if not kv_cache and resolve(kernel, True, dtype, lengths)[0] == 'flash_bias':
    return bias
  return bias.dense()


def attention(query, key, value, mask=None, bias=None, scale=None, kernel='xla',
              block_sizes=(0, 0), softcap=0.0, sinks=None):
  """query [B, L, H, K], key/value [B, S, G, K]; `mask` a mask.Mask (or, for 'xla', a boolean
  array or None); `bias` None, a bias.PositionBias (flash_bias) or an array broadcastable to
  [B, H, L, S]; softcap > 0: the scaled logits soft-capped (Gemma 2); sinks None or [H]
  (gpt-oss). -> [B, L, H, K]."""
  scale = query.shape[-1] ** -0.5 if scale is None else scale
  if _rings(query, key, mask):
    if bias is not None:
      raise ValueError('ring attention (mesh.context > 1) takes no position bias; use '
                       'mesh.context=1 for t5_bias or alibi')
    return _ring(query, key, value, mask, scale, kernel, block_sizes, softcap, sinks)
  if isinstance(mask, mask_lib.Mask) and mask.kv_cache:  # decoding: a few queries, the cache
    name = 'xla'
  else:
    name, _ = resolve(kernel, bias is not None, query.dtype, (query.shape[1], key.shape[1]),
                      softcap=bool(softcap), sinks=sinks is not None)
  if name != 'xla' and not isinstance(mask, mask_lib.Mask):
    raise ValueError(f'kernel {name!r} needs a zoo.kernels.mask.Mask (segment ids, causal, '
                     "window), not a dense mask; use kernel 'xla' for arbitrary masks")
  interpret = jax.default_backend() == 'cpu' and platform() == 'cpu'
  if name == 'flash_bias':
    if mask.window and not mask.causal:
      raise ValueError("kernel 'flash_bias' takes causal windows only, not a bidirectional "
                       "stack's two-sided one; use model.attention.kernel='xla' or 'splash'")
    if not isinstance(bias, bias_lib.PositionBias):
      raise ValueError("kernel 'flash_bias' computes a bias.PositionBias (t5, alibi) in its "
                       "blocks, not a dense bias array; use 'xla' or 'gpu' for those")
    return flash_bias.attention(query, key, value, mask, bias, scale, block_sizes, interpret)
  if isinstance(bias, bias_lib.PositionBias):
    bias = bias.dense()
  if name == 'splash':
    return splash.attention(query, key, value, mask, scale, block_sizes, interpret=interpret,
                            softcap=softcap, sinks=sinks)
  if name == 'gpu':
    return gpu.attention(query, key, value, mask, bias, scale)
  if (platform() == 'cpu' and isinstance(mask, mask_lib.Mask) and
      causal.supports(mask, query.shape[1], key.shape[1])):
    return causal.attention(query, key, value, mask, bias, scale, softcap, sinks)
  dense = mask.dense() if isinstance(mask, mask_lib.Mask) else mask
  return reference.dot_product_attention(query, key, value, dense, bias, scale, softcap, sinks)


def _rings(query, key, mask):
  """Ring attention runs: self-attention (not decoding) on a context mesh, the sequence
  splitting evenly over it."""
  n = sharding.axis_size('context')
  return (n > 1 and isinstance(mask, mask_lib.Mask) and not mask.kv_cache and
          query.shape[1] == key.shape[1] and query.shape[1] % n == 0)


def ring_blocks(kernel, causal, local_length, on=None):
  """The kernel ring attention's local blocks run in: 'splash' or 'xla' (`local_length` the
  queries each device holds)."""
  if not ring_splash.supports(local_length, causal):
    if kernel == 'splash':
      chunk = local_length // (2 if causal else 1)
      raise ValueError(f"model.attention.kernel='splash' with mesh.context: each ring chunk "
                       f"({chunk} tokens) must be a multiple of {splash.LANES}; lengthen "
                       "data.seq_len or use 'auto' or 'xla'")
    return 'xla'
  on_tpu = (on or platform()) == 'tpu'
  return 'splash' if kernel == 'splash' or (kernel == 'auto' and on_tpu) else 'xla'


def _ring(query, key, value, mask, scale, kernel, block_sizes, softcap=0.0, sinks=None):
  if mask.window and not mask.causal:
    raise ValueError('ring attention (mesh.context > 1) takes causal windows only, not a '
                     "bidirectional stack's two-sided one; use mesh.context=1")
  local_length = query.shape[1] // sharding.axis_size('context')
  heads = () if sinks is None else (sinks,)
  balanced = mask.slots is not None  # splash's causal blocks assume ring.balance's layout
  if (balanced or not mask.causal) and ring_blocks(kernel, mask.causal,
                                                    local_length) == 'splash':
    interpret = jax.default_backend() == 'cpu' and platform() == 'cpu'
    local = lambda q, k, v, q_segments, kv_segments, *sinks: ring_splash.ring_attention(
        q, k, v, q_segments, kv_segments, *sinks, axis='context', causal=mask.causal,
        window=mask.window, scale=scale, blocks=block_sizes, interpret=interpret,
        softcap=softcap)
    return shard.over_mesh(local, query, key, value,
                           rows=(mask.q_segment_ids, mask.kv_segment_ids), sequence=True,
                           head_params=heads)
  slots = mask.slots
  if slots is None:
    slots = jnp.broadcast_to(jnp.arange(query.shape[1], dtype=jnp.int32), query.shape[:2])
  local = lambda q, k, v, q_slots, kv_slots, q_segments, kv_segments, *sinks: (
      ring.ring_attention(q, k, v, q_slots, kv_slots, q_segments, kv_segments, *sinks,
                          axis='context', causal=mask.causal, window=mask.window, scale=scale,
                          softcap=softcap))
  return shard.over_mesh(local, query, key, value,
                         rows=(slots, slots, mask.q_segment_ids, mask.kv_segment_ids),
                         sequence=True, head_params=heads)
