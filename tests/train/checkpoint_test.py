"""A checkpoint that cannot be written ends with one line naming the step, the cause, the
path and the last good checkpoint, and the last good one still restores; train.init_params
restores what it holds (a params checkpoint or a run's newest) and names the rest."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo import storage
from zoo.train import checkpoint


class _Stream:  # a data iterator with a fixed position
  def get_state(self):
    return {'0-of-1': {'position': 3}}


def _state(value):
  return {'w': jnp.full((64, 64), value, jnp.float32), 'step': jnp.int32(value)}


def test_a_full_disk_fails_before_writing_and_keeps_the_last_good_checkpoint(tmp_path,
                                                                              monkeypatch):
  saved = checkpoint.Checkpointer(str(tmp_path / 'checkpoints'), keep=3)
  saved.save(10, _state(1.0), _Stream())
  saved.finish()
  monkeypatch.setattr(storage, 'free_bytes', lambda _: 5 << 20)
  with pytest.raises(checkpoint.WriteError, match=(
      r'^the checkpoint of step 20 cannot be written to .*/checkpoints \(5 MiB free, about 8 '
      r'MiB needed\); the last good checkpoint is step 10 \(.*/checkpoints/10\); free space')):
    saved.save(20, _state(2.0), _Stream())
  saved.close()  # the failure is reported once: closing does not raise it again
  monkeypatch.undo()
  abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype,
                                                         sharding=a.sharding), _state(0.0))
  step, state = checkpoint.Checkpointer(str(tmp_path / 'checkpoints'), 3).restore(abstract)
  assert step == 10 and np.all(np.asarray(state['w']) == 1.0)


def test_a_write_that_fails_mid_save_names_the_os_error(tmp_path, monkeypatch):
  saved = checkpoint.Checkpointer(str(tmp_path / 'checkpoints'), keep=3)

  def fail(*_, **__):
    raise ValueError('RESOURCE_EXHAUSTED: Error writing "w/0.0" ... Failed to write 2912256 '
                     "bytes to file 11: No space left on device [os_error_code='28']")
  monkeypatch.setattr(saved.manager, 'save', fail)
  with pytest.raises(checkpoint.WriteError, match=r'step 7 cannot be written .*\(No space '
                                                  r'left on device\); the last good '
                                                  r'checkpoint is none yet'):
    saved.save(7, _state(1.0), _Stream())
  saved.close()


def _abstract(tree):
  return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=jax.sharding.
                                                     SingleDeviceSharding(jax.devices()[0])),
                      tree)


def test_init_params_restores_what_it_holds_and_takes_the_rest_fresh(tmp_path):
  saved = {'embed': jnp.arange(6.0).reshape(2, 3), 'head': {'kernel': jnp.ones(4)}}
  checkpoint.save_params(str(tmp_path / 'params'), saved)
  model = {'embed': jnp.zeros((2, 3)), 'classifier': {'kernel': jnp.full(5, 7.0)}}
  _, key, held, new, dropped = checkpoint.init_plan(str(tmp_path / 'params'), _abstract(model))
  assert (key, held, new, dropped) == (None, ['embed'], ['classifier/kernel'], ['head/kernel'])
  got = checkpoint.restore_params(str(tmp_path / 'params'), _abstract(model), model)
  np.testing.assert_array_equal(got['embed'], saved['embed'])  # read
  np.testing.assert_array_equal(got['classifier']['kernel'], model['classifier']['kernel'])
  with pytest.raises(ValueError, match=r'lacks classifier/kernel; fine-tune first'):
    checkpoint.restore_params(str(tmp_path / 'params'), _abstract(model))
  wrong = {'embed': jnp.zeros((3, 2))}
  with pytest.raises(ValueError, match=r'parameter embed is \(2, 3\) there but \(3, 2\) in '
                     'this model'):
    checkpoint.init_plan(str(tmp_path / 'params'), _abstract(wrong))


def test_init_params_reads_a_runs_newest_checkpoint(tmp_path):
  saver = checkpoint.Checkpointer(str(tmp_path / 'run' / 'checkpoints'), keep=3)
  for step in (1, 2):
    state = {'params': {'w': jnp.full(3, float(step))}, 'step': jnp.int32(step)}
    saver.save(step, state, _Stream())
  saver.close()
  got = checkpoint.restore_params(str(tmp_path / 'run'), _abstract({'w': jnp.zeros(3)}))
  np.testing.assert_array_equal(got['w'], [2.0, 2.0, 2.0])
  (tmp_path / 'empty' / 'checkpoints').mkdir(parents=True)
  with pytest.raises(FileNotFoundError, match=r'is a run without checkpoints; train it first'):
    checkpoint.init_plan(str(tmp_path / 'empty'), _abstract({'w': jnp.zeros(3)}))
