"""zoo/train/runtime.py: how the zoo's steps are compiled on each platform; the modes that
read a checkpoint refuse a workdir without one before anything is written."""

import re

import pytest

from tests import helpers
from zoo import families
from zoo import platform
from zoo import run as run_lib
from zoo import sharding
from zoo.convert import export
from zoo.errors import ConfigError
from zoo.infer import run as infer_run
from zoo.train import evaluate
from zoo.train import runtime


def _copied_floats(hlo_text):
  """The float arrays the entry computation of a compiled module copies whole."""
  entry = hlo_text[hlo_text.index('\nENTRY'):]
  entry = entry[:entry.index('\n}')]
  return re.findall(r'= (f32\[[\d,]*\]\S*) copy\(', entry)


def test_a_cpu_train_step_copies_no_parameter_or_optimizer_state():
  # the loop's step, its state donated: without region analysis XLA:CPU copied every
  # AdamW moment and parameter the update reads (40 arrays at this shape)
  config = helpers.smoke('gpt2_small', 'model.num_layers=4', 'model.scan_unroll=4')
  place = runtime.placement(run_lib.resolve(config))
  parts = runtime.model_state(run_lib.resolve(config), place.mesh)
  batch_sharding = sharding.batch_sharding(place.mesh)
  step = place.jit(parts.train_step(config), (parts.shardings, batch_sharding),
                   (parts.shardings, sharding.replicated(place.mesh)), donate_argnums=(0,))
  compiled = step.compile(parts.abstract, families.abstract_batch(config, batch_sharding))
  assert _copied_floats(compiled.as_text()) == []


def test_the_region_analysis_option_is_given_to_cpus_alone():
  assert platform.compiler_options('cpu') == {
      'xla_cpu_copy_insertion_use_region_analysis': True}
  assert platform.compiler_options('tpu') is None and platform.compiler_options('gpu') is None


@pytest.mark.parametrize('mode, command', [('eval', '--mode=eval'),
                                           ('generate', '--mode=generate'),
                                           ('export', 'zoo.convert.export')])
def test_a_mode_that_reads_a_checkpoint_refuses_a_workdir_without_one_writing_nothing(
    tmp_path, mode, command):
  run = run_lib.resolve(helpers.smoke('gpt_shakespeare'))
  workdir, out = tmp_path / 'mistyped', tmp_path / 'out'
  read = {'eval': lambda: evaluate.run(run, str(workdir)),
          'generate': lambda: infer_run.run(run, str(workdir), ['ROMEO:']),
          'export': lambda: export.export(run, str(workdir), str(out))}
  with pytest.raises(ConfigError, match=f'^{command}: no checkpoint in .*mistyped'):
    read[mode]()
  assert sorted(p.name for p in tmp_path.iterdir()) == []
