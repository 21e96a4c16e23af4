"""Multi-head latent attention (zoo/models/mla.py) against a float64 numpy reference written
from DeepSeek-V2's equations (forward) and a plain float32 jnp one (gradients), with and
without the query latent; its cache holds the latent and the rotary key only; bad shapes are
one line."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo.kernels import mask as mask_lib
from zoo.models import mla

MLA = dict(kv_lora_rank=16, q_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
           v_head_dim=6)


def _config(**mla_overrides):
  config = helpers.tiny_config(position='rope')
  config.model.mla.update({**MLA, **mla_overrides})
  config.model.kernel_init_std = 0.3  # logits far from uniform
  return helpers.validate(config).model


def _init(m, L=10):
  module = mla.LatentAttention(m)
  x = jax.random.normal(jax.random.PRNGKey(1), (2, L, m.d_model))
  positions = jnp.broadcast_to(jnp.arange(L), (2, L))
  ids = jnp.ones((2, L), jnp.int32)
  mask = mask_lib.Mask(ids, ids, causal=True)
  params = nn.meta.unbox(module.init(jax.random.PRNGKey(0), x, mask=mask,
                                     q_positions_BL=positions)['params'])
  return module, params, x, mask, positions


def _numpy(x, params, m, positions, xp=np):
  """MLA by its equations: float64 numpy, or (xp=jnp) float32 jax for gradients."""
  a = m.mla
  H, C, N, R = m.num_heads, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim
  f = (lambda t: np.asarray(t, np.float64)) if xp is np else (lambda t: t)
  rms = lambda t, w: t / xp.sqrt(xp.mean(t * t, -1, keepdims=True) + m.norm_eps) * f(w)[
      None, None]
  if a.q_lora_rank:
    q = rms(f(x) @ f(params['query_down']['kernel']), params['query_norm']['scale'])
    q = xp.einsum('blq,qhk->blhk', q, f(params['query_up']['kernel']))
  else:
    q = xp.einsum('bld,dhk->blhk', f(x), f(params['query']['kernel']))
  down = f(x) @ f(params['kv_down']['kernel'])
  c = rms(down[..., :C], params['kv_norm']['scale'])
  angles = f(positions)[..., None] * (1.0 / m.rope_theta ** (np.arange(0, R, 2) / R))[None, None]
  cos, sin = xp.cos(angles)[:, :, None], xp.sin(angles)[:, :, None]

  def rotate(t):  # the two halves of t [B, L, H, R] rotated by each position's angles
    t1, t2 = t[..., :R // 2], t[..., R // 2:]
    return xp.concatenate([t1 * cos - t2 * sin, t2 * cos + t1 * sin], -1)
  k_rope = rotate(down[..., None, C:])
  k = xp.concatenate([xp.einsum('blc,chn->blhn', c, f(params['key_up'])),
                      xp.broadcast_to(k_rope, (*k_rope.shape[:2], H, R))], -1)
  q = xp.concatenate([q[..., :N], rotate(q[..., N:])], -1)
  v = xp.einsum('blc,chv->blhv', c, f(params['value_up']))
  logits = xp.einsum('blhk,bshk->bhls', q, k) * (N + R) ** -0.5
  L = x.shape[1]
  logits = xp.where(np.tril(np.ones((L, L), bool))[None, None], logits, -np.inf)
  probs = xp.exp(logits - logits.max(-1, keepdims=True))
  probs = probs / probs.sum(-1, keepdims=True)
  out = xp.einsum('bhls,bshv->blhv', probs, v)
  return xp.einsum('blhv,hvd->bld', out, f(params['out']['kernel']))


@pytest.mark.parametrize('q_lora_rank', [12, 0], ids=['query_latent', 'plain_query'])
def test_latent_attention_equals_its_equations_forward_and_backward(q_lora_rank):
  m = _config(q_lora_rank=q_lora_rank)
  module, params, x, mask, positions = _init(m)
  run = lambda p: module.apply({'params': p}, x, mask=mask, q_positions_BL=positions)
  np.testing.assert_allclose(run(params), _numpy(x, params, m, positions), atol=2e-5)
  weights = jax.random.normal(jax.random.PRNGKey(2), x.shape)
  got = jax.jit(jax.grad(lambda p: jnp.sum(run(p) * weights)))(params)
  want = jax.jit(jax.grad(lambda p: jnp.sum(_numpy(x, p, m, positions, xp=jnp) * weights)))(
      params)
  jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, atol=2e-5), got, want)
  assert ('query_down' in params) == bool(q_lora_rank)


def test_decoding_keeps_the_latent_and_the_rotary_key_and_equals_the_full_pass():
  m = _config()
  module, params, x, _, positions = _init(m)
  full = module.apply({'params': params}, x, mask=mask_lib.Mask(
      jnp.ones((2, 10), jnp.int32), jnp.ones((2, 10), jnp.int32), causal=True),
                      q_positions_BL=positions)
  slots = jnp.ones((2, 12), jnp.int32)  # a cache of 12 slots, 10 written
  cache = {}
  outs = []
  for start, stop in ((0, 4), (4, 5), (5, 6), (6, 10)):  # a prefill, then tokens and a chunk
    ids = jnp.ones((2, stop - start), jnp.int32)
    mask = mask_lib.Mask(ids, slots.at[:, 10:].set(0), causal=True, kv_cache=True)
    out, variables = module.apply({'params': params, **cache}, x[:, start:stop], mask=mask,
                                  q_positions_BL=positions[:, start:stop], mutable=['cache'])
    cache = {'cache': variables['cache']}
    outs.append(out)
  np.testing.assert_allclose(jnp.concatenate(outs, 1), full, atol=2e-5)
  shapes = jax.tree.map(jnp.shape, cache['cache'])
  assert shapes == {'cached_latent': (2, 12, 16), 'cached_rope_key': (2, 12, 4),
                    'cache_index': ()}  # C + R = 20 values a token, not 2 x H x K


@pytest.mark.parametrize('overrides, message', [
    ({'kv_lora_rank': 64}, r'model.mla.kv_lora_rank=64 must be in \[0, model.d_model=32\]'),
    ({'qk_rope_head_dim': 3}, r'model.mla.qk_rope_head_dim=3 must be a positive even number'),
])
def test_bad_latent_shapes_are_one_line(overrides, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    _config(**overrides)
  with pytest.raises(config_lib.ConfigError, match=r'latent attention is built for decoders '
                                                   r"with model.position='rope' and no window"):
    config = helpers.tiny_config(position='rope')
    config.model.mla.update(MLA)
    config.model.attention.window = 4
    helpers.validate(config)


def test_yarn_scales_the_softmax_by_mscale_squared_as_deepseek_v3():
  m = _config(qk_nope_head_dim=128, qk_rope_head_dim=64)
  assert mla.softmax_scale(m) == pytest.approx(192 ** -0.5)
  with m.unlocked():
    m.rope_scaling.update(type='yarn', factor=40.0, mscale=1.0, mscale_all_dim=1.0)
  # DeepSeek-V3's config: factor 40, mscale_all_dim 1: (0.1 ln 40 + 1)^2 = 1.8739
  assert mla.softmax_scale(m) == pytest.approx(192 ** -0.5 * 1.3688879454113936 ** 2)
