"""Fine-tuning end to end: an imported Hugging Face BERT fine-tunes on a classification
task (new head named, unused heads dropped only when asked, its loss falls, task metrics in
the eval rows, the imported checkpoint untouched); a decoder run's checkpoint fine-tunes on
prompts and completions; T5 and regression report their metrics; imported umT5 and T5Gemma
fine-tune text to text; bad starts are one line
before anything compiles; the label head's loss by hand."""

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import counting
from zoo import families
from zoo import run as run_lib
from zoo import sharding
from zoo.convert import hf
from zoo.errors import ConfigError
from zoo.infer import task_eval
from zoo.train import loop
from zoo.train import metrics as metrics_lib
from zoo.train import runtime

BERT = os.path.join(helpers.REPO, 'tests', 'fixtures', 'hf', 'bert')
FAST = ['train.log_every=1', 'train.eval_batches=0', 'train.batch_size=8',
        'optim.warmup_steps=2', 'train.compile_cache_dir=']


@pytest.fixture(scope='module')
def imported(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('bert') / 'imported_run')
  hf.write_workdir(BERT, workdir)
  return workdir


@pytest.fixture(scope='module')
def classification(tmp_path_factory):
  return helpers.speakers_task(str(tmp_path_factory.mktemp('task') / 'speakers'),
                               'classification', 16, 16)


def _bert(imported, task, *overrides):
  return helpers.load(os.path.join(imported, 'config.py'), [
      'data.task.kind=classification', f'data.task.path={task}', 'data.seq_len=32',
      'train.steps=30', 'train.eval_every=30', 'optim.learning_rate=3e-3', *FAST, *overrides])


def _rows(workdir):
  with open(os.path.join(workdir, metrics_lib.METRICS), encoding='utf-8') as f:
    return [json.loads(line) for line in f]


def _tree(directory):
  return sorted((os.path.relpath(os.path.join(d, f), directory),
                 os.path.getsize(os.path.join(d, f)))
                for d, _, files in os.walk(directory) for f in files)


def test_an_imported_bert_fine_tunes_on_a_classification_task(imported, classification,
                                                                 tmp_path):
  before = _tree(os.path.join(imported, 'imported'))
  config = _bert(imported, classification, 'train.drop_unused_params=True')
  loop.train(run_lib.resolve(config), str(tmp_path), task_eval.make)
  rows = _rows(str(tmp_path))
  header = next(r for r in rows if r.get('event') == 'start')
  assert header['task'] == 'classification' and header['num_labels'] == 2
  assert header['new_params'] == 'classifier/bias,classifier/kernel'  # HF's pooler is read
  assert header['dropped_params'].split(',') == [
      'mlm_bias', 'mlm_norm/bias', 'mlm_norm/scale', 'mlm_transform/bias',
      'mlm_transform/kernel', 'nsp/bias', 'nsp/kernel']
  losses = [r['loss'] for r in rows if 'loss' in r and 'event' not in r]
  assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:3]), losses
  [evaluated] = [r for r in rows if 'eval_loss' in r]
  assert set(evaluated) == {'step', 'eval_loss', 'eval_accuracy', 'eval_f1', 'eval_mcc'}
  assert 0 <= evaluated['eval_accuracy'] <= 1 and -1 <= evaluated['eval_mcc'] <= 1
  assert _tree(os.path.join(imported, 'imported')) == before


@pytest.mark.parametrize('name', ['gemma3', 'qwen3'])
def test_an_imported_gemma3_or_qwen3_fine_tunes_a_label_head_on_its_last_token(
    name, classification, tmp_path):
  """Local and global layers (and a tail), QK-norm, sandwich norms: the decoder's label
  head reads each row's last real token."""
  imported = str(tmp_path / 'imported')
  hf.write_workdir(os.path.join(helpers.REPO, 'tests', 'fixtures', 'hf', name), imported)
  config = helpers.load(os.path.join(imported, 'config.py'), [
      'data.task.kind=classification', f'data.task.path={classification}', 'data.seq_len=32',
      'train.steps=30', 'train.eval_every=30', 'optim.learning_rate=3e-3',
      'train.drop_unused_params=True', *FAST])  # Qwen 3's untied output layer
  loop.train(run_lib.resolve(config), str(tmp_path / 'tuned'), task_eval.make)
  rows = _rows(str(tmp_path / 'tuned'))
  header = next(r for r in rows if r.get('event') == 'start')
  assert header['num_labels'] == 2 and header['new_params'] == 'classifier/kernel'
  losses = [r['loss'] for r in rows if 'loss' in r and 'event' not in r]
  assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:3]), losses
  [evaluated] = [r for r in rows if 'eval_loss' in r]
  assert 0 <= evaluated['eval_accuracy'] <= 1


def test_bad_starts_are_one_line_before_any_compile(imported, classification, tmp_path,
                                                    monkeypatch):
  monkeypatch.setattr(jax.stages.Lowered, 'compile', _no_compile)
  with pytest.raises(ConfigError, match=r"holds 7 parameters this model does not use "
                     r"\(mlm_bias, mlm_norm/bias, mlm_norm/scale, mlm_transform/bias, ...\); "
                     'set train.drop_unused_params=True'):
    loop.train(run_lib.resolve(_bert(imported, classification)), str(tmp_path / 'a'))
  with pytest.raises(ConfigError, match=r'parameter layers/mlp/wi/bias is \(2, 48\) there '
                     r'but \(2, 64\) in this model; make the model config match'):
    loop.train(run_lib.resolve(_bert(imported, classification, 'model.mlp_dim=64',
                     'train.drop_unused_params=True')), str(tmp_path / 'b'))
  with pytest.raises(ConfigError, match=r'is inside train.init_params=.*; a run never writes '
                     'into the checkpoint it starts from'):
    loop.train(run_lib.resolve(_bert(imported, classification)), os.path.join(imported, 'imported', 'run'))
  assert not os.path.exists(os.path.join(imported, 'imported', 'run'))


def _no_compile(*args, **kwargs):
  raise AssertionError('compiled before the error')


def test_a_decoder_run_fine_tunes_on_completions_from_its_checkpoint(tmp_path):
  pretrained = str(tmp_path / 'pretrained')
  loop.train(run_lib.resolve(helpers.smoke('gpt_shakespeare', 'train.steps=3', 'train.compile_cache_dir=')),
             pretrained)
  task = helpers.speakers_task(str(tmp_path / 'task'), 'prompt_completion', 16, 8)
  tokenizer = os.path.join(pretrained, 'tokenizer', 'bpe_512.model')
  config = helpers.smoke('gpt_shakespeare', 'data.task.kind=prompt_completion',
                         f'data.task.path={task}', f'data.tokenizer.path={tokenizer}',
                         f'train.init_params={pretrained}', 'train.steps=4',
                         'train.eval_every=4', 'generate.max_new_tokens=4',
                         "data.task.metrics=('mc_accuracy','exact_match','perplexity')", *FAST)
  loop.train(run_lib.resolve(config), str(tmp_path / 'tuned'))
  rows = _rows(str(tmp_path / 'tuned'))
  header = next(r for r in rows if r.get('event') == 'start')
  assert header['new_params'] == 'none' and header['dropped_params'] == 'none'
  assert header['init_params_held'] == len(jax.tree.leaves(_params(config)))
  [evaluated] = [r for r in rows if 'eval_loss' in r]
  assert 'eval_mc_accuracy' not in evaluated  # no task_eval: the loss alone
  row = _eval_row(config, str(tmp_path / 'tuned'))
  assert row['eval_perplexity'] == pytest.approx(np.exp(row['eval_loss']), rel=1e-6)
  assert row['eval_mc_accuracy'] in {k / 8 for k in range(9)}
  assert row['eval_exact_match'] in {k / 8 for k in range(9)}


def _params(config):
  model = families.build(config.model)
  return jax.eval_shape(model.init, jax.random.PRNGKey(0),
                        families.example_batch(config.model, 1, 8))['params']


def _eval_row(config, workdir):
  from zoo.train import evaluate  # pylint: disable=g-import-not-at-top
  return evaluate.run(run_lib.resolve(config), workdir, task_eval.make)


def test_t5_and_regression_report_their_metrics(imported, tmp_path):
  task = helpers.speakers_task(str(tmp_path / 't2t'), 'text_to_text', 8, 8)
  t5 = helpers.smoke('t5_small', 'data.task.kind=text_to_text', f'data.task.path={task}',
                     'train.steps=3', 'train.eval_every=3', 'generate.max_new_tokens=4',
                     'data.tokenizer.vocab_size=384', *FAST)
  loop.train(run_lib.resolve(t5), str(tmp_path / 't5'), task_eval.make)
  [row] = [r for r in _rows(str(tmp_path / 't5')) if 'eval_loss' in r]
  assert {'eval_exact_match', 'eval_bleu', 'eval_rouge_l'} <= set(row)
  assert 0 <= row['eval_bleu'] <= 100 and 0 <= row['eval_rouge_l'] <= 1
  regression = helpers.speakers_task(str(tmp_path / 'regression'), 'regression', 16, 8)
  config = _bert(imported, regression, 'data.task.kind=regression', 'train.steps=3',
                 'train.eval_every=3', 'train.drop_unused_params=True')
  loop.train(run_lib.resolve(config), str(tmp_path / 'bert'), task_eval.make)
  [row] = [r for r in _rows(str(tmp_path / 'bert')) if 'eval_loss' in r]
  assert {'eval_pearson', 'eval_spearman'} <= set(row)
  assert config.model.num_labels == 1


def test_the_label_heads_loss_by_hand():
  config = helpers.tiny_config()
  with config.unlocked():  # the parts the loss reads; not a whole valid run
    config.model.family, config.model.num_labels, config.model.type_vocab_size = (
        'encoder', 3, 2)
    config.data.task.kind = 'classification'
  model = families.build(config.model)
  batch = {'inputs': jnp.asarray(helpers.random_ids((4, 16))),
           'token_type_ids': jnp.zeros((4, 16), jnp.int32),
           'segment_ids': jnp.asarray(np.repeat([[1], [1], [1], [0]], 16, 1)),
           'positions': jnp.broadcast_to(jnp.arange(16), (4, 16)),
           'labels': jnp.asarray([0, 2, 1, 1])}
  variables = jax.jit(model.init)(jax.random.PRNGKey(1), batch)
  loss = families.loss_fn(model, config)(variables, batch)
  logits = np.asarray(model.apply(variables, batch)['label_logits'], np.float64)
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  want = -np.mean(log_probs[np.arange(3), [0, 2, 1]])  # the padding row is not counted
  assert float(loss.total) == pytest.approx(want, rel=1e-5)
  assert float(loss.weight_sum) == 3
  np.testing.assert_allclose(loss.predictions, logits, rtol=1e-5)
  with config.unlocked():
    config.data.task.kind, config.model.num_labels = 'regression', 1
  model = families.build(config.model)
  batch['labels'] = jnp.asarray([0.5, -1.0, 2.0, 0.0])
  variables = jax.jit(model.init)(jax.random.PRNGKey(1), batch)
  loss = families.loss_fn(model, config)(variables, batch)
  value = np.asarray(model.apply(variables, batch)['label_logits'][:, 0], np.float64)
  assert float(loss.total) == pytest.approx(np.mean((value[:3] - [0.5, -1.0, 2.0]) ** 2),
                                            rel=1e-5)


def test_a_label_heads_flops_count_no_vocabulary_projection():
  config = helpers.tiny_config(tie_embeddings=True, position='learned')
  with config.unlocked():
    config.model.num_labels, config.data.task.kind = 4, 'classification'
  m = config.model
  params = counting.param_count(nn.unbox(counting.abstract_params(config)))
  attention = 6 * m.num_layers * config.data.seq_len * m.num_heads * (m.d_model // m.num_heads)
  # every parameter but the two tables (token: a gather, its LM head not built; positions)
  want = 6 * (params - m.vocab_size * m.d_model - m.max_length * m.d_model) + attention
  assert counting.flops_per_token(config) == want


@pytest.mark.parametrize('name', ['umt5', 't5gemma'])
def test_an_imported_umt5_or_t5gemma_fine_tunes_text_to_text(name, tmp_path):
  """umT5 (a bias table in every layer), T5Gemma (Gemma 2's blocks, two tables, two-sided
  encoder windows): the task's targets generated and scored."""
  imported = str(tmp_path / 'imported')
  hf.write_workdir(os.path.join(helpers.REPO, 'tests', 'fixtures', 'hf', name), imported)
  task = helpers.speakers_task(str(tmp_path / 't2t'), 'text_to_text', 16, 8)
  config = helpers.load(os.path.join(imported, 'config.py'), [
      'data.task.kind=text_to_text', f'data.task.path={task}', 'data.seq_len=32',
      'train.steps=20', 'train.eval_every=20', 'optim.learning_rate=3e-3',
      'generate.max_new_tokens=4', 'data.reserved_ids=0', *FAST])  # a task reads no sentinels
  loop.train(run_lib.resolve(config), str(tmp_path / 'tuned'), task_eval.make)
  rows = _rows(str(tmp_path / 'tuned'))
  losses = [r['loss'] for r in rows if 'loss' in r and 'event' not in r]
  assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3]), losses
  [row] = [r for r in rows if 'eval_loss' in r]
  assert {'eval_exact_match', 'eval_bleu', 'eval_rouge_l'} <= set(row)
  assert 0 <= row['eval_exact_match'] <= 1


def test_an_imported_deepseek_v3_starts_from_its_routing_biases(tmp_path):
  """The routing biases (the moe_bias collection, not parameters) travel with the import
  into the run's first state (zoo/train/loop.py: runtime.initial_collections)."""
  fixture = os.path.join(helpers.REPO, 'tests', 'fixtures', 'hf', 'deepseek_v3')
  imported = str(tmp_path / 'imported')
  hf.write_workdir(fixture, imported)
  _, variables = hf.load_variables(fixture)
  want = variables['moe_bias']['layers']['block_0']['moe']['bias']
  assert np.max(np.abs(want)) > 0.05  # not the zeros a fresh state starts from
  config = helpers.load(os.path.join(imported, 'config.py'), [
      'data.seq_len=32', 'model.moe.bias_update_rate=0.001', *FAST])
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  held = runtime.initial_collections(config, runtime.model_state(run_lib.resolve(config), mesh))
  np.testing.assert_array_equal(held['moe_bias']['layers']['block_0']['moe']['bias'], want)
