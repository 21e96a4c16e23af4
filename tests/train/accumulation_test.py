"""train.microbatches: k microbatches give the whole batch's losses, metrics and updates."""

import jax
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo import run as run_lib
from zoo.train import runtime

STEPS = 5


def _train(config, mesh_sizes, microbatches, state=None):
  config = config.copy_and_resolve_references()
  config.train.microbatches = microbatches
  return helpers.train_steps(config, mesh_sizes, STEPS, state)


def _assert_same(config, mesh):
  rows_1, params_1, initial = _train(config, mesh, 1)
  rows_4, params_4, _ = _train(config, mesh, 4, initial)
  for name in rows_1[0]:
    if name in ('learning_rate', 'nonfinite_streak', 'nonfinite_total'):
      continue
    np.testing.assert_allclose([r[name] for r in rows_4], [r[name] for r in rows_1],
                               rtol=1e-5, atol=1e-7, err_msg=name)
  # parameters: relative 1e-5 per tensor. Adam's first steps are ~sign(g): an element whose
  # gradient is ~0 may round either way, and a leaf whose gradient is 0 in exact arithmetic
  # (a key bias: softmax ignores it) moves by rounding noise alone (~1e-7), hence the floor
  for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(params_4)[0],
                          jax.tree.leaves(params_1)):
    assert np.linalg.norm(a - b) <= 1e-5 * np.linalg.norm(b) + 1e-6 * np.sqrt(b.size), (
        jax.tree_util.keystr(path))


ONE_DEVICE = {'data': 1, 'fsdp': 1, 'tensor': 1, 'expert': 1}


# the decoder's share is shown on the mesh below; here BERT (next-sentence rows) and T5
@pytest.mark.parametrize('name', ['bert_base', 't5_base'])
def test_four_microbatches_train_like_one_batch_on_one_device(name):
  config = helpers.smoke(name, 'train.batch_size=16', 'optim.clip_norm=0.5', 'data.seq_len=32')
  _assert_same(config, ONE_DEVICE)


def test_four_microbatches_train_like_one_batch_on_data_fsdp_tensor():
  # seq_len 64: at 32 and below, with data and fsdp both > 1, tensor > 1 and one row per
  # device, XLA:CPU's partitioner computes the model itself wrong, microbatches or not
  # (docs/contracts.md, known problems)
  config = helpers.smoke('llama3_8b', 'train.batch_size=16')
  mesh = {'data': 2, 'fsdp': 2, 'tensor': 2, 'expert': 1}
  _assert_same(config, mesh)


def test_microbatches_that_do_not_divide_a_devices_rows_fail_before_compiling():
  config = helpers.smoke('llama3_8b', 'train.batch_size=16', 'train.microbatches=4',
                         'mesh.data=8')
  with pytest.raises(config_lib.ConfigError, match=r'train.microbatches=4 does not divide the '
                                                   r'rows each device holds .* = 2\)'):
    runtime.placement(run_lib.resolve(config))
  with pytest.raises(config_lib.ConfigError, match='train.microbatches=3 does not divide'):
    helpers.smoke('llama3_8b', 'train.batch_size=16', 'train.microbatches=3')
