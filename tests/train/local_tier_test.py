"""The local checkpoint tier: this process's shards back onto the devices that held them,
bit for bit (bfloat16 and scalars included); a step written for another layout is not
offered; paths that cannot work are one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tests import helpers
from zoo import config as config_lib
from zoo.errors import ConfigError
from zoo.train import local_tier
from zoo.train import runtime


class _Streams:
  def __init__(self, position):
    self.position = position

  def get_state(self):
    return {'0-of-1': {'rows': self.position}}

  def set_state(self, state):
    self.position = state['0-of-1']['rows']


def _state(mesh):
  rng = np.random.default_rng(0)
  place = lambda x, spec: jax.device_put(x, NamedSharding(mesh, P(*spec)))
  return {'step': place(jnp.int32(7), ()),
          'w': place(rng.standard_normal((8, 12)).astype(np.float32), ('data', 'fsdp')),
          'b': place(jnp.asarray(rng.standard_normal(12), jnp.bfloat16), ())}


def _abstract(state):
  return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
                      state)


def test_a_local_step_restores_bit_for_bit_and_only_onto_its_layout(tmp_path):
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(2, 4), ('data', 'fsdp'))
  state = _state(mesh)
  tier = local_tier.LocalTier(str(tmp_path), keep=2)
  for step in (2, 4, 6):
    tier.save(step, state, _Streams(step * 10))
  tier.finish()
  assert tier.steps() == [4, 6]  # the newest `keep`
  assert tier.common_step(_abstract(state)) == 6
  streams = _Streams(0)
  restored = tier.restore(6, _abstract(state), streams)
  assert streams.position == 60
  for name, leaf in state.items():
    assert restored[name].dtype == leaf.dtype and restored[name].sharding == leaf.sharding
    np.testing.assert_array_equal(np.asarray(restored[name]), np.asarray(leaf))
  other = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(4, 2), ('data', 'fsdp'))
  assert tier.common_step(_abstract(_state(other))) is None  # another mesh: not offered


@pytest.mark.parametrize('path,message', [
    ('gs://bucket/local', "train.local_tier.path='gs://bucket/local' is a bucket"),
    ('/proc/zoo/local', r'train.local_tier.path=/proc/zoo/local cannot be written'),
])
def test_a_local_tier_path_that_cannot_work_is_one_line(path, message):
  config = config_lib.base()
  config.train.local_tier.path = path
  with pytest.raises(ConfigError, match=message):
    helpers.validate(config)
    runtime.check_workdir(config, '/tmp/zoo-run')


def test_a_local_write_that_fails_is_a_warning_and_leaves_no_step(tmp_path, monkeypatch,
                                                                 capsys):
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ('data', 'fsdp'))
  tier = local_tier.LocalTier(str(tmp_path), keep=2)
  def full_disk(*_, **__):
    raise OSError(28, 'No space left on device', 'arrays.npz')
  monkeypatch.setattr(np, 'savez', full_disk)
  tier.save(2, _state(mesh), _Streams(20))
  tier.finish()
  assert tier.steps() == [] and not list(tmp_path.rglob('*.tmp'))  # nothing half-written
  assert ('warning: the local checkpoint tier cannot be written (No space left on device: '
          'arrays.npz); the persistent tier goes on') in capsys.readouterr().out
