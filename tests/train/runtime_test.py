"""zoo/train/runtime.py: how the zoo's steps are compiled on each platform; the modes that
read a checkpoint refuse a workdir without one before anything is written."""

import os
import re
import subprocess
import sys

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



def _compile_into(cache, capped, scale):
  """A process that jits x * scale with the cache in `cache`: the zoo's (capped, through
  runtime.compile_cache) or a plain JAX program's (no cap) -> its stderr."""
  code = ('import sys, jax, jax.numpy as jnp, ml_collections\n'
          'from zoo.train import runtime\n'
          'if sys.argv[2] == "zoo":\n'
          '  runtime.compile_cache(ml_collections.ConfigDict({"train": {"compile_cache_dir": '
          'sys.argv[1]}}))\n'
          'else:\n'
          '  jax.config.update("jax_compilation_cache_dir", sys.argv[1])\n'
          '  jax.config.update("jax_compilation_cache_max_size", -1)\n'
          'jax.jit(lambda x: x * float(sys.argv[3]))(jnp.ones(3)).block_until_ready()\n')
  env = {k: v for k, v in helpers.cpu_env().items()
         if k != 'JAX_COMPILATION_CACHE_MAX_SIZE'}  # the zoo's own cap (the tests run none)
  result = subprocess.run([sys.executable, '-c', code, str(cache),
                           'zoo' if capped else 'plain', str(scale)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  return result.stderr


def test_the_capped_cache_takes_entries_a_plain_jax_program_left_there(tmp_path):
  """JAX's capped cache fails every write on an entry with no access-time file, which an
  uncapped process writes; the zoo gives such entries the oldest time when it turns the
  cache on (the suite itself runs every process uncapped)."""
  _compile_into(tmp_path, capped=False, scale=2.0)
  plain = {n for n in os.listdir(tmp_path) if n.endswith('-cache')}
  assert plain and not any(n.endswith('-atime') for n in os.listdir(tmp_path))
  stderr = _compile_into(tmp_path, capped=True, scale=3.0)
  assert 'Error writing persistent compilation cache entry' not in stderr, stderr[-2000:]
  entries = {n for n in os.listdir(tmp_path) if n.endswith('-cache')}
  assert entries > plain  # the zoo's step went in beside them
  assert all(os.path.exists(tmp_path / (n[:-len('-cache')] + '-atime')) for n in entries)
