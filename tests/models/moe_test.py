"""Mixture of experts against a plain numpy implementation: routing, gates, capacity and
dropping order, the auxiliary losses, and the layer's output on both dispatch paths."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo.models import moe


def _np_route(logits, k):
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  experts = np.argsort(-probs, axis=-1, kind='stable')[:, :k]
  gates = np.take_along_axis(probs, experts, -1)
  return probs, (gates / gates.sum(-1, keepdims=True) if k > 1 else gates), experts


def _np_slots(experts, num_experts):
  """Slots by priority: every first choice (in token order) before any second choice."""
  slots, used = np.zeros_like(experts), np.zeros(num_experts, int)
  for choice in range(experts.shape[1]):
    for token in range(experts.shape[0]):
      e = experts[token, choice]
      slots[token, choice], used[e] = used[e], used[e] + 1
  return slots


def _np_moe(x, router, w, k, capacity, activation):
  """The whole layer per sequence in float64: route, drop past capacity, gated sum."""
  silu = lambda a: a / (1 + np.exp(-a))
  out = np.zeros_like(x)
  for b in range(x.shape[0]):
    probs, gates, experts = _np_route(x[b] @ router, k)
    slots = _np_slots(experts, router.shape[1])
    for t in range(x.shape[1]):
      for c in range(k):
        e = experts[t, c]
        if capacity is not None and slots[t, c] >= capacity:
          continue
        h = x[b, t] @ w['wi_0'][e]
        h = silu(h) * (x[b, t] @ w['wi_1'][e]) if activation == 'swiglu' else np.maximum(h, 0)
        out[b, t] += gates[t, c] * (h @ w['wo'][e])
  return out


def test_routing_gates_and_slots_match_numpy():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(12, 6)).astype(np.float32)
  for k in (1, 2, 3):
    probs, gates, experts = moe.route(jnp.asarray(logits), k)
    want_probs, want_gates, want_experts = _np_route(logits.astype(np.float64), k)
    np.testing.assert_allclose(probs, want_probs, rtol=1e-6)
    np.testing.assert_array_equal(experts, want_experts)
    np.testing.assert_allclose(gates, want_gates, rtol=1e-6)
    np.testing.assert_array_equal(moe.slot_positions(experts, 6), _np_slots(want_experts, 6))
  # top-1 keeps the raw probability (Switch) so the router is trained through the gate
  assert float(moe.route(jnp.asarray(logits), 1)[1][0, 0]) < 1.0
  # a Qwen 3 MoE checkpoint with norm_topk_prob false: the top-k probabilities as they are
  probs, gates, experts = moe.route(jnp.asarray(logits), 3, normalize=False)
  np.testing.assert_allclose(gates, np.take_along_axis(np.asarray(probs), experts, -1))
  assert np.all(np.asarray(gates).sum(-1) < 1.0)


def _np_grouped_route(logits, bias, k, groups, top_groups, scale):
  """DeepSeek-V3's routing in float64 numpy, token by token."""
  scores = 1 / (1 + np.exp(-logits.astype(np.float64)))
  experts, gates = [], []
  for s in scores:
    choice = s + bias
    per_group = choice.reshape(groups, -1)
    group_score = np.sort(per_group, axis=-1)[:, -2:].sum(-1)
    kept = np.argsort(-group_score, kind='stable')[:top_groups]
    masked = np.where(np.isin(np.arange(len(s)) // per_group.shape[1], kept), choice, 0.0)
    top = np.argsort(-masked, kind='stable')[:k]
    experts.append(top)
    gates.append(s[top] / s[top].sum() * scale)
  return np.asarray(experts), np.asarray(gates), scores / scores.sum(-1, keepdims=True)


def test_grouped_sigmoid_routing_matches_numpy_where_the_group_limit_changes_the_choice():
  # affinities 0.9 | 0.1 (group sum 1.0), 0.6 | 0.6 (1.2), 0.55 | 0.55 (1.1), 0.2 | 0.2:
  # ungrouped, top-2 takes expert 0 (0.9) and one 0.6; the 2 best groups (1 and 2) leave
  # expert 0 out and take experts 2 and 3
  affinity = np.array([[0.9, 0.1, 0.6, 0.6, 0.55, 0.55, 0.2, 0.2]])
  logits = np.log(affinity / (1 - affinity)).astype(np.float32)
  none = np.zeros(8, np.float32)
  route = lambda logits, bias, groups, top_groups: moe.route(
      jnp.asarray(logits), 2, jnp.asarray(bias), router='sigmoid', groups=groups,
      top_groups=top_groups, scale=2.5)
  assert sorted(np.asarray(route(logits, none, 0, 0)[2])[0]) == [0, 2]
  _, gates, experts = route(logits, none, 4, 2)
  assert sorted(np.asarray(experts)[0]) == [2, 3]
  np.testing.assert_allclose(gates, [[1.25, 1.25]], rtol=1e-6)  # 0.6 / 1.2 x 2.5
  rng = np.random.default_rng(7)  # and on random scores with a bias, 8 groups of 4
  logits = rng.normal(size=(64, 32)).astype(np.float32)
  bias = (0.3 * rng.normal(size=32)).astype(np.float32)
  probs, gates, experts = moe.route(jnp.asarray(logits), 6, jnp.asarray(bias),
                                    router='sigmoid', groups=8, top_groups=3, scale=2.5)
  want_experts, want_gates, want_probs = _np_grouped_route(logits, bias, 6, 8, 3, 2.5)
  np.testing.assert_array_equal(experts, want_experts)
  np.testing.assert_allclose(gates, want_gates, rtol=1e-5)
  np.testing.assert_allclose(probs, want_probs, rtol=1e-5)
  assert len({tuple(sorted(set(e // 4))) for e in want_experts}) > 1  # groups vary by token
  assert all(len(set(e // 4)) <= 3 for e in want_experts)


def test_capacity_slots_follow_priority_and_count_by_hand():
  experts = jnp.array([[0, 1], [0, 2], [0, 1], [1, 0]])  # 4 tokens, top-2 of 3 experts
  # first choices in token order: e0 gets tokens 0,1,2 (slots 0,1,2), e1 token 3 (slot 0);
  # then second choices: e1 token 0 (slot 1), e2 token 1 (slot 0), e1 token 2 (slot 2),
  # e0 token 3 (slot 3)
  np.testing.assert_array_equal(moe.slot_positions(experts, 3),
                                [[0, 1], [1, 0], [2, 2], [0, 3]])
  assert moe.capacity(seq_len=4, num_experts=3, top_k=2, capacity_factor=1.0) == 3


def test_a_selection_bias_changes_the_chosen_experts_but_not_the_gate_values():
  logits = np.random.default_rng(4).normal(size=(12, 6)).astype(np.float32)
  bias = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 5.0], np.float32)  # expert 5 always chosen
  probs, gates, experts = moe.route(jnp.asarray(logits), 2, jnp.asarray(bias))
  want_probs, _, want_experts = _np_route(logits.astype(np.float64), 2)
  want_experts = np.argsort(-(want_probs + bias), axis=-1, kind='stable')[:, :2]
  assert np.all(want_experts[:, 0] == 5)
  np.testing.assert_array_equal(experts, want_experts)
  raw = np.take_along_axis(want_probs, want_experts, -1)  # the router's own probabilities
  np.testing.assert_allclose(gates, raw / raw.sum(-1, keepdims=True), rtol=1e-6)


def test_training_moves_the_bias_toward_underloaded_experts_and_eval_leaves_it():
  layer = _layer(num_experts=4, top_k=2, bias_update_rate=0.01)
  x = jnp.asarray(np.random.default_rng(5).normal(size=(2, 6, 16)), jnp.float32)
  variables = layer.init(jax.random.PRNGKey(6), x)
  assert 'bias' not in variables['params']  # not a parameter: no gradient, no optimizer
  np.testing.assert_array_equal(variables['moe_bias']['bias'], np.zeros(4))
  bias = np.array([0.02, -0.01, 0.0, 0.01], np.float32)
  start = {'params': variables['params'], 'moe_bias': {'bias': jnp.asarray(bias)}}
  _, state = layer.apply(start, x, mutable=['moe', 'moe_bias'])
  router = np.asarray(nn.unbox(variables['params'])['router'], np.float64)
  probs, _, _ = _np_route(np.asarray(x, np.float64).reshape(-1, 16) @ router, 2)
  experts = np.argsort(-(probs + bias), axis=-1, kind='stable')[:, :2]
  load = np.bincount(experts.ravel(), minlength=4) / 12  # share of tokens; balanced: 2/4
  assert np.any(load != 0.5)  # something to balance
  np.testing.assert_allclose(state['moe_bias']['bias'],
                             bias + 0.01 * np.sign(0.5 - load), atol=1e-7)
  _, state = layer.apply(start, x, mutable=['moe'])  # eval: the bias is read, not moved
  assert 'moe_bias' not in state


def _stats(state):
  """The layer's statistics from the sums it sowed."""
  return moe.statistics({k: v[0] for k, v in state['moe'].items()})


def _layer(num_experts=4, top_k=2, capacity_factor=0.0, activation='swiglu', shared=0,
           bias_update_rate=0.0, **moe_overrides):
  config = helpers.tiny_config(d_model=16, mlp_dim=8, num_heads=2, activation=activation)
  with config.unlocked():
    config.model.moe.update(num_experts=num_experts, top_k=top_k,
                            capacity_factor=capacity_factor, num_shared_experts=shared,
                            bias_update_rate=bias_update_rate, **moe_overrides)
  return moe.MoE(ml_collections.FrozenConfigDict(config.model))


@pytest.mark.parametrize('capacity_factor, activation', [(0.0, 'swiglu'), (0.5, 'swiglu'),
                                                         (1.0, 'relu'), (8.0, 'swiglu')])
def test_the_layer_equals_the_numpy_moe_on_both_paths(capacity_factor, activation):
  layer = _layer(capacity_factor=capacity_factor, activation=activation)
  x = jnp.asarray(np.random.default_rng(1).normal(size=(3, 10, 16)), jnp.float32)
  variables = layer.init(jax.random.PRNGKey(0), x)
  y, state = layer.apply(variables, x, mutable=['moe'])
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), nn.unbox(variables['params']))
  capacity = moe.capacity(10, 4, 2, capacity_factor) if capacity_factor else None
  want = _np_moe(np.asarray(x, np.float64), p['router'], p, 2, capacity, activation)
  np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-6)

  # dropped (token, choice) pairs: counted, and a token with both dropped outputs zero
  experts = np.stack([_np_route(np.asarray(x[b], np.float64) @ p['router'], 2)[2]
                      for b in range(3)])
  slots = np.stack([_np_slots(e, 4) for e in experts])
  dropped = np.mean(slots >= capacity) if capacity else 0.0
  np.testing.assert_allclose(_stats(state)['dropped_fraction'], dropped, rtol=1e-6)
  if capacity:
    all_dropped = np.all(slots >= capacity, axis=-1)
    np.testing.assert_array_equal(np.all(np.asarray(y) == 0, axis=-1), all_dropped)


def test_auxiliary_losses_match_numpy_and_balance_is_one_at_uniform_routing():
  layer = _layer(num_experts=4, top_k=2)
  x = jnp.asarray(np.random.default_rng(2).normal(size=(2, 6, 16)), jnp.float32)
  variables = layer.init(jax.random.PRNGKey(3), x)
  _, state = layer.apply(variables, x, mutable=['moe'])
  router = np.asarray(nn.unbox(variables['params'])['router'], np.float64)
  logits = np.asarray(x, np.float64).reshape(-1, 16) @ router
  probs, _, experts = _np_route(logits, 2)
  share = np.bincount(experts.ravel(), minlength=4) / experts.size  # f_i
  np.testing.assert_allclose(_stats(state)['load'], 2 * share, rtol=1e-6)  # of tokens
  np.testing.assert_allclose(_stats(state)['balance_loss'],
                             4 * np.sum(share * probs.mean(0)), rtol=1e-5)
  log_z = np.log(np.exp(logits).sum(-1))
  np.testing.assert_allclose(_stats(state)['z_loss'], np.mean(log_z ** 2), rtol=1e-5)

  # a zero router: P_i = 1/E, so the loss is E * sum_i f_i / E = 1 (times the coefficient),
  # its minimum; routing everything to one expert raises it
  params = nn.unbox(variables['params'])
  params['router'] = jnp.zeros_like(params['router'])
  _, state = layer.apply({'params': params}, x, mutable=['moe'])
  np.testing.assert_allclose(_stats(state)['balance_loss'], 1.0, rtol=1e-6)
  params['router'] = params['router'].at[:, 0].set(10.0 * jnp.sign(jnp.sum(x, (0, 1))))
  _, state = layer.apply({'params': params}, x, mutable=['moe'])
  assert float(_stats(state)['balance_loss']) > 1.5


def test_the_sequence_wise_balance_loss_is_the_mean_of_each_sequences():
  # DeepSeek-V3 (eqs. 17-20): per sequence E sum_i f_i P_i, f_i its share of the pairs,
  # P_i its mean normalised affinity; the loss is the mean over sequences
  layer = _layer(num_experts=8, top_k=2, router='sigmoid', num_groups=4, top_groups=2,
                 balance_scope='sequence')
  x = jnp.asarray(np.random.default_rng(8).normal(size=(3, 6, 16)), jnp.float32)
  variables = layer.init(jax.random.PRNGKey(3), x)
  _, state = layer.apply(variables, x, mutable=['moe'])
  router = np.asarray(nn.unbox(variables['params'])['router'], np.float64)
  logits = np.asarray(x, np.float64) @ router  # [B, L, E]
  losses = []
  for row in logits:
    experts, _, probs = _np_grouped_route(row, np.zeros(8), 2, 4, 2, 1.0)
    share = np.bincount(experts.ravel(), minlength=8) / experts.size
    losses.append(8 * np.sum(share * probs.mean(0)))
  np.testing.assert_allclose(_stats(state)['balance_loss'], np.mean(losses), rtol=1e-5)
  whole = 8 * np.sum(np.bincount(np.concatenate([_np_grouped_route(
      r, np.zeros(8), 2, 4, 2, 1.0)[0].ravel() for r in logits]), minlength=8) / 36 *
                     np.concatenate([_np_grouped_route(r, np.zeros(8), 2, 4, 2, 1.0)[2]
                                     for r in logits]).mean(0))
  assert abs(whole - np.mean(losses)) > 1e-3  # not the batch-wide loss


def test_shared_experts_add_a_dense_mlp():
  layer = _layer(shared=1)
  x = jnp.ones((1, 4, 16))
  params = nn.unbox(layer.init(jax.random.PRNGKey(0), x)['params'])
  assert params['shared']['wi_0']['kernel'].shape == (16, 8)


@pytest.mark.parametrize('capacity_factor, use_bias', [(0.0, True), (2.0, False)])
def test_the_tensor_shards_each_run_a_slice_of_every_experts_f_and_sum_to_one_device(
    capacity_factor, use_bias):
  """On fsdp 2 x tensor 2 the experts' shard_map takes each expert's F split over tensor,
  as the weights are stored (fsdp alone gathers them), and sums the shards' outputs: the
  layer and its gradients equal one device's, and no device gathers a whole expert."""
  layer = _layer(capacity_factor=capacity_factor, use_bias=use_bias)  # E 4, D 16, F 8
  x = jnp.asarray(np.random.default_rng(5).normal(size=(4, 8, 16)), jnp.float32)
  boxed = layer.init(jax.random.PRNGKey(0), x)['params']
  params = nn.unbox(boxed)

  def loss(params, x):
    y, _ = layer.apply({'params': params}, x, mutable=['moe'])
    return jnp.sum(jnp.sin(y))

  step = jax.jit(jax.value_and_grad(loss))
  want = step(params, x)
  mesh = jax.make_mesh((2, 2), ('fsdp', 'tensor'), devices=jax.devices()[:4],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  rules = (('expert', None), ('embed', 'fsdp'), ('mlp', 'tensor'))
  with jax.set_mesh(mesh):
    stored = jax.device_put(params, nn.logical_to_mesh_sharding(
        nn.get_partition_spec(boxed), mesh, rules))
    got = step(stored, x)
    compiled = step.lower(stored, x).compile().as_text()
  np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
  jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6), got[1],
               want[1])
  assert 'f32[4,16,4]' in compiled  # an expert stack's slice: F / 2
  assert 'f32[4,16,8]' not in compiled and 'f32[4,8,16]' not in compiled  # never whole


@pytest.mark.parametrize('overrides, message', [
    (['model.moe.num_experts=4', 'model.moe.top_k=5'], r'model.moe.top_k=5 must be in \[1'),
    (['model.moe.num_experts=6', 'model.moe.num_groups=4', 'model.moe.top_groups=2'],
     r'model.moe.num_experts=6 does not split into model.moe.num_groups=4 groups of 2'),
    (['model.moe.num_experts=8', 'model.moe.num_groups=4', 'model.moe.top_groups=5'],
     r'model.moe.top_groups=5 must be in \[1, model.moe.num_groups=4\]'),
    (['model.moe.num_experts=8', 'model.moe.first_dense=2'],
     r'model.moe.first_dense=2 must leave MoE layers: in \[0, 2\)'),
    (['model.moe.num_experts=6', 'mesh.expert=4', 'mesh.data=2'],
     r'model.moe.num_experts=6 does not split over mesh.expert=4'),
    (['model.moe.num_experts=4', 'model.moe.capacity_factor=-1'],
     r'model.moe.capacity_factor=-1.* must be >= 0'),
    (['model.moe.num_experts=4', 'model.moe.every=3'], r'model.moe.every=3 must divide'),
    (['mesh.expert=2', 'mesh.data=4'], r'mesh.expert=2 needs experts'),
    (['model.moe.num_experts=4', 'model.moe.bias_update_rate=-0.001'],
     r'model.moe.bias_update_rate=-0.001 must be >= 0'),
])
def test_bad_moe_settings_name_the_field(overrides, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    helpers.load('configs/gpt_shakespeare.py:smoke', overrides)
