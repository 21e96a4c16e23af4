"""Muon (zoo/muon.py): the iteration against optax's and float64 numpy, the matrices the
logical axes pick, one step against a hand-written float64 reference, the placement on a
mesh, and a sharded run equal to one device."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from tests import helpers
from zoo import config as config_lib
from zoo import counting
from zoo import families
from zoo import muon
from zoo import optim
from zoo import run as run_lib
from zoo import sharding as sharding_lib
from zoo.plan import analytic
from zoo.train import loop
from zoo.train import metrics as metrics_lib


def _numpy_newton_schulz(x, steps):
  """Jordan's quintic in float64 on one matrix, on its wide side."""
  tall = x.shape[0] > x.shape[1]
  x = x.T if tall else x
  x = x / (np.linalg.norm(x) + 1e-7)
  a, b, c = muon.NS_COEFFS
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if tall else x


def test_newton_schulz_matches_float64_numpy_and_optax_and_flattens_the_spectrum():
  rng = np.random.default_rng(0)
  stack = rng.standard_normal((3, 24, 40)).astype(np.float32)
  got = np.asarray(muon.orthogonalize(jnp.asarray(stack), 5))
  for x, y in zip(stack, got):
    np.testing.assert_allclose(y, _numpy_newton_schulz(x.astype(np.float64), 5), atol=2e-5)
  # a tall matrix runs on its transpose
  tall = rng.standard_normal((1, 40, 24)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(muon.orthogonalize(jnp.asarray(tall), 5))[0],
                             _numpy_newton_schulz(tall[0].astype(np.float64), 5), atol=2e-5)
  # optax's Muon with no momentum is its iteration alone
  plain = optax.contrib.scale_by_muon(beta=0.0, nesterov=False, eps=1e-7)
  by_optax, _ = plain.update(jnp.asarray(stack[0]), plain.init(jnp.asarray(stack[0])))
  np.testing.assert_allclose(got[0], np.asarray(by_optax), atol=2e-5)
  singular = np.linalg.svd(got[0], compute_uv=False)
  assert 0.5 < singular.min() and singular.max() < 1.3  # near 1, as the quintic aims


def test_the_logical_axes_pick_the_matrices_and_their_rows():
  config = helpers.smoke('deepseek_v3')
  model = families.build(config.model)
  batch = families.example_batch(config.model, 1, config.data.seq_len)
  specs = nn.get_partition_spec(jax.eval_shape(model.init, jax.random.PRNGKey(0),
                                               batch)['params'])
  flat = jax.tree_util.tree_flatten_with_path(specs, is_leaf=lambda x: isinstance(x, P))[0]
  keys = ['/'.join(str(k.key) for k in path) for path, _ in flat]
  got = dict(zip(keys, muon.matrices(specs)))
  # [layers, embed, heads, head_dim]: each layer's embed x heads*head_dim
  assert got['layers_dense/attention/query_up/kernel'] == muon.Matrix((0,), (1,), (2, 3))
  assert got['layers/block_0/attention/out/kernel'] == muon.Matrix((0,), (1, 2), (3,))
  # an expert stack: one matrix per layer and expert
  assert got['layers/block_0/moe/wo'] == muon.Matrix((0, 1), (2,), (3,))
  assert got['layers/block_0/moe/wi_0'] == muon.Matrix((0, 1), (2,), (3,))
  assert got['layers/block_0/moe/router'] == muon.Matrix((0,), (1,), (2,))
  for key in ('token_embed/embedding', 'logits/kernel', 'final_norm/scale',
              'layers/block_0/attention/kv_norm/scale'):
    assert got[key] is None, key  # AdamW's: tables, the vocabulary head, norms


def _adamw_numpy(g, p, m, v, t, o, rate, decays):
  m = o.b1 * m + (1 - o.b1) * g
  v = o.b2 * v + (1 - o.b2) * g * g
  step = (m / (1 - o.b1 ** t)) / (np.sqrt(v / (1 - o.b2 ** t)) + o.eps)
  return p - rate * (step + (o.weight_decay * p if decays else 0)), m, v


def test_two_steps_match_a_float64_reference_with_adamw_on_the_rest():
  o = config_lib.base().optim
  o.name, o.schedule, o.warmup_steps, o.learning_rate, o.clip_norm = (
      'muon', 'constant', 0, 0.02, 0.0)
  rng = np.random.default_rng(1)
  shapes = {'layers': {'wi': (2, 6, 10), 'norm_scale': (2, 6)}, 'embed': (12, 6)}
  params = {'layers': {'mlp': {'kernel': rng.standard_normal(shapes['layers']['wi'])},
                       'norm': {'scale': rng.standard_normal(shapes['layers']['norm_scale'])}},
            'token_embed': {'embedding': rng.standard_normal(shapes['embed'])}}
  specs = {'layers': {'mlp': {'kernel': P('layers', 'embed', 'mlp')},
                      'norm': {'scale': P('layers', 'embed')}},
           'token_embed': {'embedding': P('vocab', 'embed')}}
  params = jax.tree.map(lambda x: x.astype(np.float32), params)
  tx = optim.make(o, optim.schedule(o, 10), specs)
  state, current = tx.init(params), params
  ref = jax.tree.map(lambda x: x.astype(np.float64), params)
  buf = np.zeros(shapes['layers']['wi'])
  adam = {k: [np.zeros(s), np.zeros(s)] for k, s in (('norm', (2, 6)), ('embed', (12, 6)))}
  m = o.muon
  for t in (1, 2):
    grads = jax.tree.map(lambda x: rng.standard_normal(x.shape).astype(np.float32), params)
    updates, state = tx.update(grads, state, current)
    current = optax.apply_updates(current, updates)
    g = grads['layers']['mlp']['kernel'].astype(np.float64)
    buf = m.momentum * buf + g
    step = g + m.momentum * buf
    kernel = ref['layers']['mlp']['kernel']
    for layer in range(2):
      orth = _numpy_newton_schulz(step[layer], m.ns_steps) * m.update_rms * np.sqrt(10)
      kernel[layer] = kernel[layer] - o.learning_rate * (orth + o.weight_decay * kernel[layer])
    for key, path, decays in (('norm', ('layers', 'norm', 'scale'), False),
                              ('embed', ('token_embed', 'embedding'), True)):
      leaf = lambda tree: tree[path[0]][path[1]] if len(path) == 2 else tree[path[0]][
          path[1]][path[2]]
      new, adam[key][0], adam[key][1] = _adamw_numpy(
          leaf(grads).astype(np.float64), leaf(ref), *adam[key], t, o, o.learning_rate, decays)
      leaf(ref)[...] = new
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               current, ref)
  # Muon keeps one moment, on its matrices only; AdamW two on the rest
  assert optim.state_floats(o, (2, 6, 10), True, muon.Matrix((0,), (1,), (2,))) == 120
  assert optim.state_floats(o, (12, 6), False, None) == 144


def test_the_iteration_moves_a_matrix_s_shards_to_its_batch_dim_where_that_divides():
  sizes = {'fsdp': 4, 'tensor': 2}
  stack, spec = muon.Matrix((0,), (1,), (2,)), P(None, 'fsdp', 'tensor')
  # 8 layers take both axes: every device orthogonalizes one whole layer
  assert muon.placement((8, 16, 32), stack, spec, sizes) == P(('fsdp', 'tensor'), None, None)
  # 4 layers take fsdp; tensor stays on the columns (the iteration runs sharded there)
  assert muon.placement((4, 16, 32), stack, spec, sizes) == P(('fsdp',), None, ('tensor',))
  assert muon.placement((4, 16, 32), stack, spec, sizes, gather=False) == P(
      None, ('fsdp',), ('tensor',))
  experts = P(None, 'tensor', 'fsdp', None)  # [layers, expert, ...]
  assert muon.placement((2, 4, 16, 32), muon.Matrix((0, 1), (2,), (3,)), experts,
                        sizes) == P(('tensor', 'fsdp'), None, None)


def test_muon_refuses_a_tree_with_no_matrix_before_compiling():
  o = config_lib.base().optim
  o.name = 'muon'
  specs = {'embed': {'embedding': P('vocab', 'embed')}, 'norm': {'scale': P('embed')}}
  with pytest.raises(config_lib.ConfigError, match="no weight matrix.*optim.name='adamw'"):
    optim.make(o, optim.schedule(o, 10), specs)
  with pytest.raises(config_lib.ConfigError, match=r"optim.muon.ns_steps=3 is read only by Muon"):
    helpers.smoke('gpt_shakespeare', 'optim.muon.ns_steps=3')


def test_muon_on_fsdp_tensor_expert_gives_one_devices_parameters():
  """Three steps of an MoE smoke (expert stacks, attention, dense MLPs) on fsdp 2 x tensor
  2 x expert 2 against one device, float32, with the shards moved for the iteration and
  without; the momentum sharded like its parameter."""
  config = helpers.smoke('mixtral_8x7b', 'optim.name=muon', 'optim.warmup_steps=1')
  sizes = lambda **s: {'data': 1, 'fsdp': 1, 'tensor': 1, 'expert': 1, **s}
  want_rows, want, _ = helpers.train_steps(config, sizes(), steps=3)
  scale = jax.tree.map(lambda a: np.abs(a).max(), want)
  for gather in (True, False):
    config.optim.muon.gather = gather
    got_rows, got, initial = helpers.train_steps(config, sizes(fsdp=2, tensor=2, expert=2),
                                                 steps=3)
    assert [float(r['loss']) for r in got_rows] == pytest.approx(
        [float(r['loss']) for r in want_rows], rel=1e-5)
    moved = jax.tree.map(lambda a, b: np.abs(a - b).max(), got, want)
    # float32 rounding of the split sums, through three steps' Newton-Schulz iterations
    assert max(jax.tree.leaves(jax.tree.map(lambda d, s: d / s, moved, scale))) < 3e-5, gather
  momentum = initial['opt_state'][1].inner_states['muon'].inner_state[0].momentum
  wi = momentum['layers']['block_0']['moe']['wi_0']
  assert wi.sharding.spec == initial['params']['layers']['block_0']['moe']['wi_0'].sharding.spec
  assert tuple(wi.sharding.spec)[1:] == ('expert', 'fsdp', 'tensor')


def _first_layer_max_logits(sow, variables, params, batch, stack):
  _, sown = sow({**variables, 'params': params}, batch)
  return sown['logits'], np.asarray(sown['logits'][stack]['attention']['max_logit'][0])[0]


@pytest.mark.parametrize('name, overrides, stack', [
    ('gpt_shakespeare', ['model.num_kv_heads=2'], 'layers'),  # 4 query heads, 2 key heads
    # latent attention (its rotary query part, the shared rotary key); the dense layer first
    ('deepseek_v3', [], 'layers_dense'),
])
def test_qk_clip_brings_each_heads_max_logit_down_to_the_threshold(name, overrides, stack):
  """K2's clip is exact where nothing before the layer moved: the first layer's heads
  over the threshold land on it, the others keep theirs."""
  config = helpers.smoke(name, *overrides, 'model.attention.log_max_logit=True')
  model = families.build(config.model)
  batch = helpers.family_batch(config, 8, 0)  # some rows padding: masked
  variables = nn.unbox(jax.jit(model.init)(jax.random.PRNGKey(0), batch))
  variables.pop('logits', None)
  params = variables['params']
  sow = jax.jit(lambda v, b: model.apply(v, b, mutable=['logits']))  # compiled once
  sown, before = _first_layer_max_logits(sow, variables, params, batch, stack)
  threshold = float(np.median(before))
  assert (before > threshold * 1.01).any() and (before < threshold).any()
  clipped = muon.qk_clip(params, sown, threshold)
  _, after = _first_layer_max_logits(sow, variables, clipped, batch, stack)
  np.testing.assert_allclose(after, np.minimum(before, threshold), rtol=2e-5)
  # the latent attention's shared rotary key and the values are left alone
  moved = jax.tree.map(lambda a, b: bool(np.any(a != b)), params, clipped)
  flat = dict(jax.tree_util.tree_flatten_with_path(moved)[0])
  changed = {jax.tree_util.keystr(k) for k, v in flat.items() if v}
  assert changed and all(('query' in k or 'key' in k) and 'down' not in k for k in changed)


def _muon_run(tmp_path, clip):
  overrides = ['optim.name=muon', 'model.attention.log_max_logit=True', 'train.steps=40',
               'optim.learning_rate=0.1', 'optim.weight_decay=0', 'optim.warmup_steps=1',
               'optim.schedule=constant', 'train.eval_every=100', 'train.checkpoint_every=40',
               f'optim.muon.qk_clip={clip}']
  workdir = str(tmp_path / f'clip{clip}')
  loop.train(run_lib.load(helpers.config_file('gpt_shakespeare'), overrides), workdir)
  return [r['max_logit'] for r in metrics_lib.read(workdir) if 'max_logit' in r]


def test_muon_clip_holds_the_max_logit_where_plain_muon_lets_it_grow(tmp_path, capsys):
  """The default job's smoke at learning rate 0.1 (constant, no weight decay): plain Muon's
  logits grow tenfold past the threshold; MuonClip's stay near it (each logged max is the
  step's batch after the previous update, before this step's clip)."""
  threshold = 8.0
  plain, clipped = _muon_run(tmp_path, 0), _muon_run(tmp_path, threshold)
  assert ('optim   muon at peak 0.1 on the hidden matrices, AdamW at 0.1 on the rest '
          '(optim.muon.adamw_rate=1 x optim.learning_rate)') in capsys.readouterr().out
  assert plain[-1] > 10 * threshold
  assert max(clipped) < 2 * threshold and np.mean(clipped[-10:]) < 1.6 * threshold


def test_qk_clip_refuses_what_it_cannot_clip():
  with pytest.raises(config_lib.ConfigError, match='set model.attention.log_max_logit=True'):
    helpers.smoke('gpt_shakespeare', 'optim.name=muon', 'optim.muon.qk_clip=100')
  with pytest.raises(config_lib.ConfigError, match='model.qk_norm normalises away'):
    helpers.smoke('qwen3_8b', 'optim.name=muon', 'optim.muon.qk_clip=100',
                  'model.attention.log_max_logit=True')


def test_plan_counts_the_iteration_per_device_by_hand():
  # one [6, 10] matrix, 5 iterations on its wide side: 4 x 6^2 x 10 + 2 x 6^3 FLOPs each
  assert muon.ns_flops((2, 6, 10), muon.Matrix((0,), (1,), (2,)), 5) == 2 * 5 * (
      4 * 36 * 10 + 2 * 216)
  config = helpers.smoke('gpt_shakespeare', 'optim.name=muon')
  boxed = counting.abstract_params(config)
  rules = sharding_lib.rules(config)
  one = analytic.muon_plan(boxed, rules, {'fsdp': 1}, config.optim.muon)
  two = analytic.muon_plan(boxed, rules, {'fsdp': 2}, config.optim.muon)
  # 2 layers x 7 projections; fsdp 2 moves to the layer dim: each device does half
  assert one['matrices_whole_on_a_device'] == two['matrices_whole_on_a_device'] == 14
  assert two['flops_per_step_per_device'] == pytest.approx(one['flops_per_step_per_device'] / 2)
  four = analytic.muon_plan(boxed, rules, {'fsdp': 4}, config.optim.muon)
  assert four['matrices_sharded'] == 14  # 2 layers cannot take 4 shards: fsdp stays on them


def test_microbatches_log_the_batchs_max_logit_not_a_sum():
  config = helpers.smoke('gpt_shakespeare', 'model.attention.log_max_logit=True')
  sizes = {'data': 1, 'fsdp': 1, 'tensor': 1}
  whole = helpers.train_steps(config, sizes, steps=1)[0][0]
  config.train.microbatches = 2
  split = helpers.train_steps(config, sizes, steps=1)[0][0]
  np.testing.assert_allclose(split['max_logit_per_layer'], whole['max_logit_per_layer'],
                             rtol=1e-6)
  assert float(whole['max_logit']) == pytest.approx(max(whole['max_logit_per_layer']))


def test_the_start_line_prints_the_adamw_leaves_rate_as_a_share_of_the_learning_rate():
  config = helpers.smoke('gpt_shakespeare', 'optim.name=muon', 'optim.learning_rate=0.01',
                         'optim.muon.adamw_rate=0.3')
  assert 'AdamW at 0.003 on the rest' in loop._muon_rates(config.optim)
