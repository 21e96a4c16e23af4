"""The memory preflight: pod-sized jobs are refused on a small machine before anything is
written; the default job and every config's :smoke variant pass."""

import glob
import os

import jax
import pytest

from tests import helpers
from tests.helpers import REPO
from zoo import run as run_lib
from zoo import sharding
from zoo.errors import ConfigError
from zoo.plan import preflight

SMALL_MACHINE = 16 * preflight.GIB  # a laptop's free memory


@pytest.fixture
def small_machine(monkeypatch):
  monkeypatch.setattr(preflight, 'host_available', lambda: SMALL_MACHINE)


def _mesh(config):
  return sharding.make_mesh(config.mesh, jax.devices()[:1])


def _one_device(spec, *overrides):
  return helpers.load(spec, ['mesh.data=1', *overrides])


def test_t5_base_is_refused_on_a_small_machine_naming_needed_available_and_fixes(
    small_machine):
  config = _one_device(helpers.config_file('t5_base', arg=None))
  with pytest.raises(ConfigError) as error:
    preflight.check(run_lib.resolve(config), jax.devices()[:1])
  message = str(error.value)
  needed = preflight.estimate(run_lib.resolve(config), dict(_mesh(config).shape), 'cpu')['total']
  assert needed > 100 * preflight.GIB  # batch 128 x 512 with XLA attention's scores
  assert f'needs ~{needed / preflight.GIB:.1f} GiB per device' in message
  assert 'has 16.0 GiB available' in message and '\n' not in message
  for fix in (':smoke', '--mode=plan --plan_topology=', 'train.batch_size', 'model.remat=full',
              'train.preflight=False'):
    assert fix in message


def test_a_phase_larger_than_the_final_shape_is_the_one_estimated(small_machine):
  # the default job's step fits; an earlier phase of 64 x its batch does not
  spec = helpers.config_file('gpt_shakespeare', arg=None)
  preflight.check(run_lib.resolve(_one_device(spec)), jax.devices()[:1])
  with pytest.raises(ConfigError, match='the train step needs'):
    preflight.check(run_lib.resolve(_one_device(spec, 'train.phases=10:2048:128')),
                    jax.devices()[:1])


def test_train_preflight_false_skips_the_estimate(small_machine):
  config = _one_device(helpers.config_file('t5_base', arg=None), 'train.preflight=False')
  preflight.check(run_lib.resolve(config), jax.devices()[:1])


@pytest.mark.parametrize('spec', [helpers.config_file('gpt_shakespeare', arg=None)] + [
    path + ':smoke' for path in sorted(glob.glob(os.path.join(REPO, 'configs', '*.py')))])
def test_the_default_job_and_every_smoke_config_pass(small_machine, spec):
  config = _one_device(spec)
  preflight.check(run_lib.resolve(config), jax.devices()[:1])


def test_the_estimate_adds_its_parts_and_shrinks_with_the_batch():
  config = _one_device(helpers.config_file('gpt_shakespeare', arg=None))
  sizes = dict(_mesh(config).shape)
  full = preflight.estimate(run_lib.resolve(config), sizes, 'cpu')
  parts = ('params', 'optimizer_state', 'gradients', 'update', 'activations', 'gathered')
  assert full['total'] == pytest.approx(sum(full[p] for p in parts))
  assert full['gradients'] == full['params'] > 0  # float32 parameters, float32 gradients
  assert full['optimizer_state'] == 2 * full['params']  # AdamW's two moments
  half = _one_device(helpers.config_file('gpt_shakespeare', arg=None), 'train.batch_size=16')
  assert preflight.estimate(run_lib.resolve(half), sizes, 'cpu')['activations'] == pytest.approx(
      full['activations'] / 2)


def test_a_device_that_reports_a_limit_is_compared_with_it():
  class Device:  # an accelerator as jax describes it
    platform, device_kind = 'gpu', 'NVIDIA H200'

    def memory_stats(self):
      return {'bytes_limit': 140 * preflight.GIB}

  assert preflight.available_bytes(Device(), [Device()]) == (140 * preflight.GIB,
                                                            'one NVIDIA H200')
