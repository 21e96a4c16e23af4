"""The pipeline (mesh.stage) on 8 simulated devices against one device: a decoder on 4
stages (fill-drain) and T5 (both stacks) circular on 2 stages x 2 rounds x data 2 x
tensor 2, outputs and gradients, the stages really passing activations (collective
permutes); the stage's parameters pinned to the stage axis; the bubble, and the configs it
refuses."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo import families
from zoo import sharding
from zoo.models import pipeline

B, L = 8, 16


def _model(family, repeats=1, remat='none', kernel='auto'):
  c = config_lib.base()
  c.model.update(family=family, vocab_size=64, d_model=32, num_layers=4, num_heads=4,
                 num_kv_heads=2, mlp_dim=64, max_length=64, pipeline_microbatches=4,
                 pipeline_repeats=repeats, remat=remat)
  c.model.attention.kernel = kernel
  if family == 'encoder_decoder':
    c.model.update(num_encoder_layers=4, num_decoder_layers=4, position='t5_bias')
  return c, families.build(c.model)


def _batch(family):
  ids = jnp.asarray(helpers.random_ids((B, L)))
  segments = jnp.asarray([[1] * 9 + [2] * 7] * 4 + [[1] * 12 + [0] * 4] * 4, jnp.int32)
  if family == 'encoder_decoder':
    return {'encoder_inputs': ids, 'decoder_inputs': ids[:, ::-1],
            'encoder_segment_ids': segments, 'decoder_segment_ids': segments}
  return {'inputs': ids, 'segment_ids': segments}


# (stage 2 x data 2 x tensor 2 for every family: the 5-step losses in tests/sharding_test.py)
@pytest.mark.parametrize('family,mesh,repeats,remat,kernel', [
    ('decoder', dict(stage=4, fsdp=2), 1, 'none', 'auto'),
    # 4 layer groups of 1: stage 0 runs layers 0 and 2, stage 1 layers 1 and 3; 4
    # microbatches on 2 stages, so each waits in the buffer before its second round; each
    # layer rematerialised, its parameters taken inside the checkpoint
    ('encoder_decoder', dict(stage=2, data=2, tensor=2), 2, 'full', 'auto'),
    # T5's bias computed in the kernel's blocks (flash_bias, interpreted on CPU) in each stage
    ('encoder_decoder', dict(stage=2, data=2, tensor=2), 1, 'none', 'flash_bias')])
def test_a_pipelined_model_gives_the_one_device_outputs_and_gradients(family, mesh, repeats,
                                                                      remat, kernel):
  config, model = _model(family, repeats, remat, kernel)
  batch = _batch(family)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), batch)
  loss = lambda p: jnp.sum(jax.tree.leaves(model.apply(p, batch))[0] ** 2)
  want, want_grads = jax.jit(model.apply)(params, batch), jax.jit(jax.grad(loss))(params)
  # the axes not given are 1
  with jax.set_mesh(sharding.make_mesh(mesh)), nn.logical_axis_rules(sharding.rules(config)):
    apply = jax.jit(model.apply).lower(params, batch).compile()
    assert 'collective-permute' in apply.as_text()  # activations handed from stage to stage
    got, got_grads = apply(params, batch), jax.jit(jax.grad(loss))(params)
  for g, w in zip(jax.tree.leaves(got) + jax.tree.leaves(got_grads),
                  jax.tree.leaves(want) + jax.tree.leaves(want_grads)):
    np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * float(np.abs(w).max()))


def test_the_bubble_is_the_idle_share_of_the_fill_and_drain():
  assert pipeline.bubble(4, 4) == pytest.approx(3 / 7)
  assert pipeline.bubble(4, 16) == pytest.approx(3 / 19)
  assert pipeline.bubble(1, 8) == 0
  assert pipeline.bubble(4, 4, repeats=2) == pytest.approx(3 / 11)  # circular: fills once


@pytest.mark.parametrize('overrides,message', [
    ({'mesh.stage': 3}, 'model.num_layers=2 does not split into mesh.stage=3 stages x '
                        'model.pipeline_repeats=1 layer groups'),
    ({'mesh.stage': 2, 'model.pipeline_repeats': 2},
     'model.num_layers=2 does not split into mesh.stage=2 stages x model.pipeline_repeats=2'),
    ({'model.pipeline_repeats': 2}, 'model.pipeline_repeats=2 needs a pipeline; set '
                                    'mesh.stage > 1'),
    ({'mesh.stage': 2, 'model.pipeline_repeats': 0}, 'model.pipeline_repeats=0 must be >= 1'),
    ({'mesh.stage': 2, 'model.pipeline_microbatches': 1},
     'model.pipeline_microbatches=1 is fewer than mesh.stage=2'),
    ({'mesh.stage': 2, 'model.pipeline_microbatches': 3},
     'model.pipeline_microbatches=3 does not divide train.batch_size=4'),
    ({'mesh.stage': 2, 'model.scan_layers': False},
     'mesh.stage=2 pipelines the scanned layer stack; set model.scan_layers=True'),
    ({'mesh.stage': 2, 'model.moe.num_experts': 4, 'model.moe.every': 2},
     'model.num_layers=2 does not split into mesh.stage=2 stages x model.pipeline_repeats=1 '
     'layer groups of whole model.moe.every=2 layer groups; use stages and repeats whose '
     'product x 2 divides it'),
])
def test_a_pipeline_the_config_cannot_run_names_the_field(overrides, message):
  c = helpers.tiny_config()
  for key, value in overrides.items():
    config_lib.apply_override(c, f'{key}={value!r}')
  with pytest.raises(config_lib.ConfigError, match=message):
    helpers.validate(c)


def test_a_stage_axis_from_minus_one_is_checked_against_the_layers_and_the_rows():
  config = helpers.tiny_config()
  with pytest.raises(config_lib.ConfigError, match='model.num_layers=2 does not split into '
                                                   'mesh stage=4 stages'):
    sharding.check_divisible(config, dict(data=1, fsdp=1, tensor=1, expert=1, context=1,
                                          stage=4), families.get(config.model))
  with pytest.raises(config_lib.ConfigError, match=r'train.batch_size=4 does not split into 2 '
                                                   r'pipeline microbatches'):
    sharding.check_divisible(config, dict(data=4, fsdp=1, tensor=1, expert=1, context=1,
                                          stage=2), families.get(config.model))


def test_t5_trains_on_a_stage_mesh_with_flash_bias_as_on_one_device():
  # flash_bias interpreted on CPU, both stacks pipelined on 2 stages x data 4
  config = helpers.smoke('t5_small', 'model.attention.kernel=flash_bias', 'train.batch_size=8')
  want, _, _ = helpers.train_steps(config, {'data': 1}, 3)
  got, _, _ = helpers.train_steps(config, {'stage': 2, 'data': 4}, 3)
  np.testing.assert_allclose([r['loss'] for r in got], [r['loss'] for r in want], rtol=2e-5)


def test_a_pipelined_stack_with_dropout_trains():
  config = helpers.smoke('t5_small', 'model.dropout_rate=0.1', 'train.batch_size=8')
  rows, _, _ = helpers.train_steps(config, {'stage': 2, 'data': 4}, 2)
  assert all(np.isfinite(r['loss']) for r in rows)


def test_a_circular_pipeline_pins_each_stages_parameters_to_the_stage_axis():
  """4 stages x 2 rounds of 1 layer: the stage axis's blocks of 2 layers fall across rounds
  and stages, and each stacked parameter regrouped to [S, R, G, ...] is pinned with S on
  `stage` (left to the partitioner, every pick held two stages' weights on TPU)."""
  config, _ = _model('decoder', repeats=2)
  config.model.num_layers = 8
  model = families.build(config.model)
  batch = _batch('decoder')
  params = jax.jit(model.init)(jax.random.PRNGKey(0), batch)
  with jax.set_mesh(sharding.make_mesh(dict(stage=4, fsdp=2))), nn.logical_axis_rules(
      sharding.rules(config)):
    text = jax.jit(model.apply).lower(params, batch).as_text()
  pinned = [line for line in text.splitlines() if 'sharding_constraint' in line
            and '[{"stage"}, {}, {}' in line and 'tensor<4x2x1x' in line]
  stacked = jax.tree.leaves(params['params']['layers'])
  assert len(stacked) > 1 and len(pinned) == len(stacked)
