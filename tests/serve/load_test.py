"""Which kernel attends over the pages (the Pallas one only on TPU, unsplit, for models
that need nothing it lacks; asked for where it cannot run, one line), and the command's
bad input: one line and exit 2 before anything is compiled."""

import subprocess
import sys

import pytest

from tests import helpers
from zoo.errors import ConfigError
from zoo.serve import load


def test_the_pallas_kernel_only_where_it_runs():
  config = helpers.tiny_config()
  assert load.attention_kernel(config, 'tpu', 1)[0] == 'pallas'
  assert load.attention_kernel(config, 'cpu', 1) == (
      'xla', 'the Pallas kernel runs on TPU, this is cpu')
  assert load.attention_kernel(config, 'tpu', 2)[0] == 'xla'
  config.model.attention.sinks = True
  assert load.attention_kernel(config, 'tpu', 1) == (
      'xla', 'the Pallas kernel does not take attention sinks')
  config.serve.kernel = 'pallas'
  with pytest.raises(ConfigError, match="serve.kernel='pallas': the Pallas kernel does not "
                     'take attention sinks'):
    load.attention_kernel(config, 'tpu', 1)


@pytest.mark.parametrize('args, message', [
    (['--config.serve.max_len=16384'], 'serve.max_len=16384 needs 1024 pages'),
    (['--config.serve.num_pages=1'], 'serve.num_pages=1 must be at least 2'),
    (['--config.serve.kernel=pallas'], "serve.kernel='pallas': the Pallas kernel runs on TPU"),
    ([], 'zoo.serve: no checkpoint in'),
], ids=['max_len', 'num_pages', 'kernel', 'untrained'])
def test_bad_settings_are_one_line_and_exit_2(tmp_path, args, message):
  result = subprocess.run(
      [sys.executable, '-m', 'zoo.serve', f'--workdir={tmp_path}',
       f'--config={helpers.config_file("gpt_shakespeare")}', *args],
      env=helpers.cpu_env(), capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = [l for l in result.stderr.splitlines() if l.strip()]
  assert lines[-1].startswith('error: ') and message in lines[-1], result.stderr[-2000:]
