"""Which kernel attends over the pages (the Pallas one only on TPU, unsplit, for models
that need nothing it lacks; asked for where it cannot run, one line); the command's bad
input: one line and exit 2 before anything is compiled; a LoRA run served with its adapters
merged, and a run with train.init_params and no checkpoint (a Hugging Face import) served
from those weights, each giving the unmerged model's greedy tokens."""

import subprocess
import sys

import jax
import numpy as np
import pytest

from tests import helpers
from zoo import run as run_lib
from zoo.errors import ConfigError
from zoo.families import decoding
from zoo.infer import generate
from zoo.serve import load
from zoo.serve import scheduler as scheduler_lib
from zoo.train import loop
from zoo.train import runtime


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


def _served_tokens(served, prompts, new_tokens):
  """Greedy tokens of each prompt through the engine (stepped here, no thread)."""
  seqs = [scheduler_lib.Sequence(p, scheduler_lib.Sampling(max_tokens=new_tokens))
          for p in prompts]
  engine = served.engine
  for seq in seqs:
    assert engine.submit(seq, lambda *_: None)
  engine._take(engine._inbox)  # pylint: disable=protected-access
  while engine.scheduler.running or engine.scheduler.waiting:
    engine.step()
  return [seq.output for seq in seqs]


def _generated(model, variables, prompts, new_tokens):
  fn = jax.jit(generate.make(model, new_tokens, {'temperature': 0.0}, eos_id=-1, pad_id=0))
  return [list(np.asarray(fn(variables, *decoding.left_pad([p], 0),
                             jax.random.PRNGKey(0)))[0]) for p in prompts]


def test_a_lora_run_is_served_merged_and_an_untrained_import_from_its_init_params(tmp_path):
  fast = ['train.steps=3', 'train.compile_cache_dir=', 'train.eval_every=1000',
          'serve.max_len=64', 'serve.num_pages=40', 'serve.page_size=8']
  pretrained = str(tmp_path / 'pretrained')
  loop.train(run_lib.resolve(helpers.smoke('gpt_shakespeare', *fast)), pretrained)
  tokenizer = f'data.tokenizer.path={pretrained}/tokenizer/bpe_512.model'
  prompts = [[1, 40, 41, 42], [1, 90, 91, 92, 93, 94, 95, 96, 97, 98]]
  lora = helpers.smoke('gpt_shakespeare', *fast, tokenizer, f'train.init_params={pretrained}',
                       'train.lora.rank=4', 'optim.learning_rate=0.05')
  loop.train(run_lib.resolve(lora), str(tmp_path / 'lora'))
  served = load.from_workdir(run_lib.resolve(lora), str(tmp_path / 'lora'))
  assert not any('lora' in str(path) for path, _ in
                 jax.tree_util.tree_flatten_with_path(served.engine.variables)[0])
  state = runtime.model_state(run_lib.resolve(lora), served.engine.mesh)
  _, variables = runtime.restore_variables(lora, str(tmp_path / 'lora'), state, 'test')
  assert _served_tokens(served, prompts, 8) == _generated(state.model, variables, prompts, 8)

  imported = helpers.smoke('gpt_shakespeare', *fast, tokenizer,
                           f'train.init_params={pretrained}')  # no checkpoint of its own
  served = load.from_workdir(run_lib.resolve(imported), str(tmp_path / 'imported'))
  state = runtime.model_state(run_lib.resolve(imported), served.engine.mesh)
  _, variables = runtime.restore_variables(imported, pretrained, state, 'test')
  assert _served_tokens(served, prompts, 8) == _generated(state.model, variables, prompts, 8)
