"""Logit distillation (train.teacher, zoo/families/distill.py): the KL term against float64
numpy, chunked against whole, a distilled student against one trained from scratch, the
same step on a mesh and on one device, the plan's count, and the teacher refused in one
line where it cannot teach."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import config as config_lib
from zoo import run as run_lib
from zoo import sharding
from zoo.convert import hf
from zoo.data import corpus as corpus_lib
from zoo.families import distill
from zoo.families import loss as loss_lib
from zoo.plan import analytic
from zoo.plan import preflight
from zoo.train import loop
from zoo.train import metrics as metrics_lib
from zoo.train import run_config
from zoo.train import runtime
from zoo.train import teacher as teacher_lib


def _numpy_kl(student, teacher, weights, temperature, top_k):
  s, t = student.astype(np.float64) / temperature, teacher.astype(np.float64) / temperature
  log_q = s - np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True)) - s.max(
      -1, keepdims=True)
  if top_k:
    ids = np.argsort(-t, axis=-1)[..., :top_k]
    t, log_q = np.take_along_axis(t, ids, -1), np.take_along_axis(log_q, ids, -1)
  p = np.exp(t - t.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  kl = (p * (np.log(p) - log_q)).sum(-1)
  return temperature ** 2 * (kl * weights).sum()


@pytest.mark.parametrize('temperature, top_k', [(1.0, 0), (2.0, 0), (1.5, 5)])
def test_the_kl_term_matches_float64_numpy(temperature, top_k):
  rng = np.random.default_rng(0)
  student, teacher = (3 * rng.standard_normal((2, 6, 40)).astype(np.float32) for _ in 'st')
  weights = rng.uniform(0, 1, (2, 6)).astype(np.float32)
  got = distill.kl_sum(jnp.asarray(student), jnp.asarray(teacher), jnp.asarray(weights),
                       temperature, top_k)
  np.testing.assert_allclose(float(got), _numpy_kl(student, teacher, weights, temperature,
                                                   top_k), rtol=1e-5)


def test_the_chunked_kl_equals_the_whole_and_so_do_its_gradients():
  rng = np.random.default_rng(1)
  xs, xt = (jnp.asarray(rng.standard_normal((2, 8, 6)), jnp.float32) for _ in 'st')
  head_s, head_t = (jnp.asarray(rng.standard_normal((6, 30)), jnp.float32) for _ in 'st')
  weights = jnp.asarray(rng.uniform(0, 1, (2, 8)), jnp.float32)

  def whole(x):
    return distill.kl_sum(x @ head_s, xt @ head_t, weights, 2.0, 4)

  def chunked(x):
    term = lambda a, b, w: (distill.kl_sum(a @ head_s, b @ head_t, w, 2.0, 4),)
    return loss_lib.over_chunks(term, (x, xt, weights), 2, (jnp.zeros(()),))[0]

  np.testing.assert_allclose(chunked(xs), whole(xs), rtol=1e-6)
  np.testing.assert_allclose(jax.grad(chunked)(xs), jax.grad(whole)(xs), rtol=1e-5, atol=1e-7)


@pytest.fixture(scope='module')
def teacher_dir(tmp_path_factory):
  """A wider smoke of the default job, trained 30 steps (the student's teacher)."""
  workdir = str(tmp_path_factory.mktemp('teacher'))
  loop.train(run_lib.load(helpers.config_file('gpt_shakespeare'), [
      'model.d_model=128', 'train.steps=30', 'train.eval_every=30',
      'train.checkpoint_every=30']), workdir)
  return workdir


def _final_eval(workdir, overrides):
  loop.train(run_lib.load(helpers.config_file('gpt_shakespeare'),
                          ['train.steps=10', 'train.eval_every=10', *overrides]), workdir)
  return [r['eval_loss'] for r in metrics_lib.read(workdir) if 'eval_loss' in r][-1]


def test_a_distilled_student_beats_the_same_student_from_scratch(teacher_dir, tmp_path):
  """Ten steps each, the same data; the teacher's top 16 ids, its loss in chunks."""
  scratch = _final_eval(str(tmp_path / 'scratch'), [])
  taught = _final_eval(str(tmp_path / 'taught'), [
      f'train.teacher.workdir={teacher_dir}', 'train.teacher.top_k=16',
      'train.loss_chunk_len=16'])
  assert taught < scratch - 0.05
  start = next(r for r in metrics_lib.read(str(tmp_path / 'taught')) if r.get('event') == 'start')
  assert start['teacher'] == {'workdir': teacher_dir, 'step': 30, 'params': start['teacher'][
      'params'], 'weight': 0.5, 'temperature': 1.0, 'top_k': 16, 'quant': 'none'}
  assert start['teacher']['params'] > start['params']  # d_model 128 against the smoke's


def _distilled_steps(teacher_dir, sizes, *overrides):
  config = helpers.smoke('gpt_shakespeare', f'train.teacher.workdir={teacher_dir}',
                         'train.teacher.temperature=2.0', *overrides)
  config.mesh.update(sizes)
  run = run_lib.resolve(config_lib.check(config))
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:int(np.prod(list(sizes.values())))])
  place = runtime.Placement(mesh, sharding.rules(config), None)
  parts = runtime.model_state(run, mesh)
  state = jax.jit(parts.init_fn, out_shardings=parts.shardings)(jax.random.PRNGKey(0))
  step = parts.jit_train_step(place, config, teacher_lib.restore(parts.teacher))
  rows = []
  for seed in range(2):
    state, metrics = step(state, helpers.family_batch(config, config.train.batch_size, seed))
    rows.append((float(metrics['loss']), float(metrics['distill_kl'])))
  return rows


def test_distillation_on_a_mesh_gives_one_devices_losses(teacher_dir):
  one = _distilled_steps(teacher_dir, {'data': 1, 'fsdp': 1, 'tensor': 1})
  mesh = _distilled_steps(teacher_dir, {'data': 2, 'fsdp': 2, 'tensor': 2})
  assert np.all(np.array(one)[:, 1] > 0)
  np.testing.assert_allclose(mesh, one, rtol=2e-5)
  # the teacher's matmuls in int8: its distribution, so the KL, moves only a little
  int8 = _distilled_steps(teacher_dir, {'data': 1, 'fsdp': 1, 'tensor': 1},
                          'train.teacher.quant=int8')
  np.testing.assert_allclose(np.array(int8)[:, 1], np.array(one)[:, 1], rtol=0.05)
  assert not np.allclose(np.array(int8)[:, 1], np.array(one)[:, 1], rtol=1e-6)


def test_plan_counts_the_teacher_and_bad_teachers_get_one_line(teacher_dir):
  run = run_lib.load(helpers.config_file('gpt_shakespeare'),
                     [f'train.teacher.workdir={teacher_dir}'])
  plan = analytic.plan(run, num_devices=1)
  teacher_params = analytic.teacher_plan(run.config, plan['mesh'])['params']
  assert plan['per_device_bytes']['teacher'] == 4 * teacher_params
  assert teacher_params > plan['params_total']
  with pytest.raises(config_lib.ConfigError, match="model.vocab_size=512 is not the student"):
    teacher_lib.config_for(helpers.smoke('gpt_shakespeare', f'train.teacher.workdir={teacher_dir}',
                                         'model.vocab_size=256'))
  with pytest.raises(config_lib.ConfigError, match='no config.json .* or config.py'):
    teacher_lib.config_for(helpers.smoke('gpt_shakespeare',
                                         f'train.teacher.workdir={teacher_dir}/nothing'))


def test_the_preflight_refuses_a_teacher_that_does_not_fit_beside_the_student(tmp_path):
  """A 70B teacher (its config alone: the preflight reads no weights) beside the smoke."""
  big = helpers.load(helpers.config_file('llama3_70b', arg=None), ['model.vocab_size=512'])
  run_config.write(big, str(tmp_path))
  run = run_lib.load(helpers.config_file('gpt_shakespeare'),
                     [f'train.teacher.workdir={tmp_path}'])
  with pytest.raises(config_lib.ConfigError, match=r'needs ~\d+\.\d GiB per device \(.*teacher '):
    preflight.check(run, jax.devices()[:1])


def test_a_teacher_that_read_another_tokenizer_is_refused(teacher_dir, tmp_path):
  config = helpers.smoke('gpt_shakespeare', f'train.teacher.workdir={teacher_dir}')
  mine = corpus_lib.tokenizer_path(config.data, str(tmp_path))
  os.makedirs(os.path.dirname(mine))
  with open(mine, 'wb') as f:
    f.write(b'another tokenizer')
  with pytest.raises(config_lib.ConfigError, match="its tokenizer .* is not the student's"):
    teacher_lib.check_tokenizer(config, str(tmp_path), teacher_lib.config_for(config))


def test_a_teacher_imported_from_hugging_face_teaches(tmp_path):
  """zoo.convert.hf's workdir (config.py, the weights its train.init_params names) as the
  teacher: its parameters are read as imported, and the KL to it is finite and positive."""
  fixture = os.path.join(helpers.REPO, 'tests', 'fixtures', 'hf', 'llama')
  hf.write_workdir(fixture, str(tmp_path))
  teacher_config = teacher_lib.config_for(helpers.smoke(
      'gpt_shakespeare', f'train.teacher.workdir={tmp_path}', 'model.vocab_size=384'))
  assert teacher_config.train.init_params == os.path.join(str(tmp_path), 'imported')
  rows = _distilled_steps(str(tmp_path), {'data': 1, 'fsdp': 1, 'tensor': 1},
                          'model.vocab_size=384')
  assert all(np.isfinite(loss) and kl > 0 for loss, kl in rows)
