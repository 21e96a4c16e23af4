"""Hugging Face import/export against the committed fixtures (tiny random models and their
float32 PyTorch logits, made by tests/fixtures/hf/make_fixtures.py)."""

import json
import os
import shutil
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors import numpy as safetensors_np
import tokenizers

from tests import helpers
from tests.data.pretrained import gpt2_json
from tests.helpers import REPO
from zoo import families
from zoo.convert import hf
from zoo.models import head as head_lib
from zoo.train import checkpoint
from zoo.train import metrics as metrics_lib

FIXTURES = os.path.join(REPO, 'tests', 'fixtures', 'hf')
NAMES = ['gpt2', 'bert', 'bert_mlm', 't5_v1_0', 't5_v1_1', 'mt5', 'llama', 'mistral', 'mixtral',
         'llama3_1', 'gemma2', 'gemma3', 'qwen3', 'qwen3_moe', 'umt5',
         't5gemma', 'deepseek_v3', 'gpt_oss', 'gpt_oss_mxfp4', 'llama4',
         'llama4_mm', 'qwen3_next', 'llama4_scout_rope', 'qwen3_next_wide_shared',
         'kimi_k2', 'deepseek_v32']


CLASSIFIERS = ['bert_cls', 'gpt2_cls', 'llama_cls', 'mistral_cls']  # 3 labels, padded rows


def _batch(name, ref):
  if name.endswith('_cls'):  # right-padded rows: the zoo reads segment ids, not the pad id
    ids = ref['input_ids']
    return {'inputs': ids, 'segment_ids': ref['attention_mask'],
            'positions': np.broadcast_to(np.arange(ids.shape[1]), ids.shape),
            **({'token_type_ids': ref['token_type_ids']} if 'token_type_ids' in ref else {})}
  if name.startswith('bert'):
    ids = ref['input_ids']
    return {'inputs': ids, 'token_type_ids': ref['token_type_ids'],
            'segment_ids': ref['attention_mask'],
            'positions': np.broadcast_to(np.arange(ids.shape[1]), ids.shape)}
  if name.startswith(('t5', 'mt5', 'umt5')):
    return {'encoder_inputs': ref['input_ids'], 'decoder_inputs': ref['decoder_input_ids']}
  return {'inputs': ref['input_ids']}


@pytest.mark.parametrize('name', NAMES)
def test_zoo_logits_equal_the_pytorch_logits(name):
  config, variables = hf.load_variables(os.path.join(FIXTURES, name))
  ref = np.load(os.path.join(FIXTURES, name, 'reference.npz'))
  out = jax.jit(families.build(config.model).apply)(variables,
                                                  jax.tree.map(jnp.asarray, _batch(name, ref)))
  logits = out['logits'] if isinstance(out, dict) else out
  real = ref['attention_mask'][..., None] > 0 if 'attention_mask' in ref else True
  np.testing.assert_allclose(np.where(real, logits, 0), np.where(real, ref['logits'], 0),
                             atol=1e-4, rtol=0)
  if name == 'bert':
    np.testing.assert_allclose(out['nsp_logits'], ref['nsp_logits'], atol=1e-4, rtol=0)


@pytest.mark.parametrize('name', CLASSIFIERS)
def test_classifier_label_logits_equal_the_pytorch_ones_on_padded_rows(name):
  config, params = hf.load(os.path.join(FIXTURES, name))
  m = config.model
  assert (m.num_labels, m.label_names) == (3, ('comedy', 'history', 'tragedy'))
  assert config.data.task.kind == 'classification'
  ref = np.load(os.path.join(FIXTURES, name, 'reference.npz'))
  assert ref['attention_mask'][1].sum() < ref['attention_mask'].shape[1]  # a padded row
  out = families.build(m).apply({'params': params}, jax.tree.map(jnp.asarray, _batch(name, ref)))
  np.testing.assert_allclose(out['label_logits'], ref['label_logits'], atol=1e-5, rtol=0)


@pytest.mark.parametrize('name', CLASSIFIERS)
def test_a_classifier_saves_as_its_hugging_face_class_with_its_labels(name, tmp_path):
  config, params = hf.load(os.path.join(FIXTURES, name))
  hf.save(config, params, str(tmp_path))
  with open(tmp_path / 'config.json', encoding='utf-8') as f:
    written = json.load(f)
  with open(os.path.join(FIXTURES, name, 'config.json'), encoding='utf-8') as f:
    original = json.load(f)
  assert written['architectures'] == original['architectures']
  assert written['id2label'] == original['id2label'] and written['num_labels'] == 3
  assert set(safetensors_np.load_file(str(tmp_path / 'model.safetensors'))) == set(
      safetensors_np.load_file(os.path.join(FIXTURES, name, 'model.safetensors')))


def test_a_gpt2_under_gpt2s_vocabulary_saves_without_gpt2s_token_ids(tmp_path):
  """transformers defaults GPT-2's BOS and EOS to 50256 and warns past the vocabulary."""
  config, params = hf.load(os.path.join(FIXTURES, 'gpt2'))
  hf.save(config, params, str(tmp_path))
  written = json.loads((tmp_path / 'config.json').read_text())
  assert written['vocab_size'] < hf.GPT2_END_OF_TEXT
  assert written['bos_token_id'] is None and written['eos_token_id'] is None
  with config.unlocked():
    config.model.vocab_size = hf.GPT2_END_OF_TEXT + 1  # GPT-2's own: the defaults hold
  assert 'bos_token_id' not in hf._hf_config(config)  # pylint: disable=protected-access


def test_the_mixtral_router_picks_the_pytorch_experts():
  config, params = hf.load(os.path.join(FIXTURES, 'mixtral'))
  ref = np.load(os.path.join(FIXTURES, 'mixtral', 'reference.npz'))
  with config.unlocked():  # unrolled layers, so each layer's router input can be captured
    config.model.scan_layers = False
  layers = params.pop('layers')
  for i in range(config.model.num_layers):
    params[f'layers_{i}'] = jax.tree.map(lambda x, i=i: x[i], layers)
  _, state = families.build(config.model).apply(
      {'params': params}, {'inputs': jnp.asarray(ref['input_ids'])},
      capture_intermediates=lambda module, _: module.name == 'mlp_norm',
      mutable=['intermediates'])
  for layer in range(config.model.num_layers):
    block = f'layers_{layer}'
    normed = state['intermediates'][block]['block_0']['mlp_norm']['__call__'][0]
    router = params[block]['block_0']['moe']['router']
    logits = normed.reshape(-1, normed.shape[-1]) @ router
    picked = np.sort(np.asarray(jax.lax.top_k(logits, 2)[1]), axis=-1)
    np.testing.assert_array_equal(picked, np.sort(ref['experts'][layer], axis=-1))


@pytest.mark.parametrize('name', NAMES + CLASSIFIERS)
def test_load_save_load_gives_identical_params(name, tmp_path):
  config, params = hf.load(os.path.join(FIXTURES, name))
  hf.save(config, params, str(tmp_path))
  if name.endswith('_cls'):  # the pad id comes with the tokenizer (as zoo.convert.export)
    hf.set_token_ids(str(tmp_path), {'pad_token_id': 0})
  again_config, again = hf.load(str(tmp_path))
  assert again_config.model.to_dict() == config.model.to_dict()
  chex.assert_trees_all_equal(again, params)


def _copy(name, tmp_path):
  path = tmp_path / name
  shutil.copytree(os.path.join(FIXTURES, name), path)
  return path


def _edit_config(path, **changes):
  with open(path / 'config.json', encoding='utf-8') as f:
    config = json.load(f)
  config.update(changes)
  with open(path / 'config.json', 'w', encoding='utf-8') as f:
    json.dump(config, f)


def test_bad_checkpoints_name_the_tensor_or_field(tmp_path):
  with pytest.raises(hf.ConvertError, match='no config.json'):
    hf.load(str(tmp_path))
  path = _copy('llama', tmp_path)
  os.remove(path / 'model.safetensors')
  with pytest.raises(hf.ConvertError, match='no model.safetensors or model.safetensors.index'):
    hf.load(str(path))

  path = _copy('gpt2', tmp_path)
  _edit_config(path, n_embd=48)
  with pytest.raises(hf.ConvertError, match=r"shape mismatch: tensor 'transformer.h.0.attn.q."
                                            r"weight' \(32, 32\) does not fit zoo parameter"):
    hf.load(str(path))
  _edit_config(path, n_embd=32, vocab_size=400)
  with pytest.raises(hf.ConvertError, match=r"shape mismatch for 'token_embed/embedding': the "
                                            r'tensors give \(384, 32\), config.json implies '
                                            r'\(400, 32\)'):
    hf.load(str(path))

  path = _copy('mistral', tmp_path / 'missing')
  tensors = safetensors_np.load_file(str(path / 'model.safetensors'))
  del tensors['model.layers.1.mlp.up_proj.weight']
  safetensors_np.save_file(tensors, str(path / 'model.safetensors'))
  with pytest.raises(hf.ConvertError, match="tensor 'model.layers.1.mlp.up_proj.weight' is "
                                            'missing'):
    hf.load(str(path))

  path = _copy('llama', tmp_path / 'rope')
  _edit_config(path, rope_scaling={'rope_type': 'longrope', 'factor': 8.0})
  with pytest.raises(hf.ConvertError, match="rope scaling 'longrope' is not built"):
    hf.load(str(path))
  _edit_config(path, model_type='falcon')
  with pytest.raises(hf.ConvertError, match="model_type='falcon' is not supported"):
    hf.load(str(path))

  path = _copy('deepseek_v3', tmp_path / 'fp8')  # the hub's V3 is FP8 with block scales
  _edit_config(path, quantization_config={'quant_method': 'fp8', 'weight_block_size': [128, 128]})
  with pytest.raises(hf.ConvertError, match=r'deepseek_v3 quantization_config: .* FP8 .* '
                                            r'convert it to bfloat16 first'):
    hf.load(str(path))
  path = _copy('deepseek_v3', tmp_path / 'no_bias')
  tensors = safetensors_np.load_file(str(path / 'model.safetensors'))
  del tensors['model.layers.2.mlp.gate.e_score_correction_bias']
  safetensors_np.save_file(tensors, str(path / 'model.safetensors'))
  with pytest.raises(hf.ConvertError, match="'model.layers.2.mlp.gate.e_score_correction_bias' "
                                            'is missing'):
    hf.load(str(path))

  path = _copy('deepseek_v32', tmp_path / 'no_indexer')  # a V3 checkpoint under V3.2's config
  tensors = safetensors_np.load_file(str(path / 'model.safetensors'))
  del tensors['model.layers.1.self_attn.indexer.wk.weight']
  safetensors_np.save_file(tensors, str(path / 'model.safetensors'))
  with pytest.raises(hf.ConvertError, match=r"tensor 'model.layers.1.self_attn.indexer.wk."
                                            r"weight' is missing: deepseek_v32 reads each "
                                            r"layer's indexer"):
    hf.load(str(path))

  path = _copy('gpt2_cls', tmp_path / 'no_pad')
  _edit_config(path, pad_token_id=None)
  with pytest.raises(hf.ConvertError, match='config.json has no pad_token_id; '
                                            'GPT2ForSequenceClassification reads'):
    hf.load(str(path))
  path = _copy('bert_cls', tmp_path / 'token_head')
  _edit_config(path, architectures=['BertForTokenClassification'])
  with pytest.raises(hf.ConvertError, match="architectures 'BertForTokenClassification' "
                                            r"\(model_type='bert'\) is not a head the zoo "
                                            'builds; it reads BertForMaskedLM, BertForPreTraining'):
    hf.load(str(path))
  path = _copy('bert', tmp_path / 'extra')  # every tensor without a place is named
  tensors = safetensors_np.load_file(str(path / 'model.safetensors'))
  tensors.update({'cls.extra.weight': np.zeros(2, np.float32),
                  'bert.adapter.weight': np.zeros(2, np.float32)})
  safetensors_np.save_file(tensors, str(path / 'model.safetensors'))
  with pytest.raises(hf.ConvertError, match=r'2 tensors have no place in the zoo bert '
                                            r'\(bert.adapter.weight, cls.extra.weight\)'):
    hf.load(str(path))


def test_a_sharded_checkpoint_with_an_index_loads(tmp_path):
  path = _copy('llama', tmp_path)
  tensors = safetensors_np.load_file(str(path / 'model.safetensors'))
  names = sorted(tensors)
  shards = {'model-00001-of-00002.safetensors': names[::2],
            'model-00002-of-00002.safetensors': names[1::2]}
  for shard, keys in shards.items():
    safetensors_np.save_file({k: tensors[k] for k in keys}, str(path / shard))
  os.remove(path / 'model.safetensors')
  with open(path / 'model.safetensors.index.json', 'w', encoding='utf-8') as f:
    json.dump({'weight_map': {k: s for s, keys in shards.items() for k in keys}}, f)
  _, params = hf.load(str(path))
  _, want = hf.load(os.path.join(FIXTURES, 'llama'))
  chex.assert_trees_all_equal(params, want)


def run(*args):
  """python -m ARGS on one CPU device, as a user runs it."""
  return subprocess.run([sys.executable, '-m', *args], env=helpers.cpu_env(),
                        capture_output=True, text=True, timeout=300, check=False)


def test_an_imported_checkpoint_fine_tunes_and_evaluates_with_zoo_launch(tmp_path):
  workdir = tmp_path / 'run'
  result = run('zoo.convert.hf', f'--hf_dir={FIXTURES}/llama', f'--workdir={workdir}')
  assert result.returncode == 0, result.stderr[-2000:]
  config, params = hf.load(os.path.join(FIXTURES, 'llama'))
  restored = checkpoint.restore_params(str(workdir / 'imported'), params)
  chex.assert_trees_all_equal(restored, params)

  overrides = ['--config.train.steps=12', '--config.train.batch_size=8',
               '--config.train.log_every=1', '--config.optim.learning_rate=3e-3',
               '--config.optim.warmup_steps=2', '--config.data.seq_len=32']
  result = run('zoo.launch', f'--config={workdir}/config.py', f'--workdir={workdir}',
               '--mode=eval', *overrides)
  assert result.returncode == 0, result.stderr[-2000:]
  result = run('zoo.launch', f'--config={workdir}/config.py', f'--workdir={workdir}',
               *overrides)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = metrics_lib.read(str(workdir))
  before = [r['eval_loss'] for r in rows if r.get('mode') == 'eval'][0]
  losses = [r['loss'] for r in rows if 'loss' in r]
  after = [r['eval_loss'] for r in rows if 'eval_loss' in r and r.get('mode') != 'eval'][-1]
  assert losses[-1] < losses[0] and after < before
  assert run('zoo.convert.hf', f'--hf_dir={FIXTURES}/llama',
             f'--workdir={workdir}').returncode == 2  # never overwrites an import
  del config


def test_an_imported_classifiers_next_command_runs_once_dir_names_its_task(tmp_path):
  workdir = tmp_path / 'run'
  result = run('zoo.convert.hf', f'--hf_dir={FIXTURES}/bert_cls', f'--workdir={workdir}')
  assert result.returncode == 0, result.stderr[-2000:]
  command = result.stdout.split('next: ')[1].split(', where DIR holds')[0]
  assert '"label": 0..2}' in result.stdout  # the fixture's 3 labels
  assert command in (workdir / 'config.py').read_text()  # the file says the same
  task = helpers.speakers_task(str(tmp_path / 'task'), 'classification', 8, 4)
  args = command.replace('DIR', task).split()[2:]  # past 'python -m'
  result = run(*args, '--config.train.steps=2', '--config.optim.warmup_steps=1')
  assert result.returncode == 0, result.stderr[-2000:]
  assert 'eval_accuracy' in result.stdout


def test_an_imported_model_trains_and_generates_with_its_own_tokenizer(tmp_path):
  hf_dir, workdir = tmp_path / 'gpt2', tmp_path / 'run'
  shutil.copytree(os.path.join(FIXTURES, 'gpt2'), hf_dir)
  tokenizer = tokenizers.Tokenizer.from_file(gpt2_json(hf_dir / 'tokenizer.json'))
  result = run('zoo.convert.hf', f'--hf_dir={hf_dir}', f'--workdir={workdir}')
  assert result.returncode == 0, result.stderr[-2000:]
  assert (workdir / 'tokenizer' / 'tokenizer.json').read_bytes() == \
      (hf_dir / 'tokenizer.json').read_bytes()

  config = [f'--config={workdir}/config.py', f'--workdir={workdir}']
  result = run('zoo.launch', *config, '--config.train.steps=5', '--config.train.batch_size=4',
               '--config.data.seq_len=32', '--config.optim.warmup_steps=1')
  assert result.returncode == 0, result.stderr[-2000:]
  header = next(r for r in metrics_lib.read(str(workdir)) if r.get('event') == 'start')
  assert header['vocab'] == tokenizer.get_vocab_size()  # the checkpoint's, not a trained one
  assert not (workdir / 'tokenizer' / 'bpe_384.model').exists()
  result = run('zoo.launch', *config, '--mode=generate', '--prompt=ROMEO: But, soft',
               '--config.generate.max_new_tokens=8', '--config.data.seq_len=32')
  assert result.returncode == 0, result.stderr[-2000:]
  completion = result.stdout.split('--- step 5:')[1]
  assert 'ROMEO: But, soft' in completion and len(completion.strip()) > len('ROMEO: But, soft')


def test_a_deepseek_v3_config_in_the_hubs_layout_loads_the_same(tmp_path):
  """deepseek-ai/DeepSeek-V3's config.json keys: rope_theta and rope_scaling ('type':
  'yarn') at the top level, scoring_func, topk_method, seq_aux, aux_loss_alpha."""
  path = _copy('deepseek_v3', tmp_path / 'hub')
  with open(path / 'config.json', encoding='utf-8') as f:
    config = json.load(f)
  rope = config.pop('rope_parameters')
  config['rope_theta'] = rope.pop('rope_theta')
  rope['type'] = rope.pop('rope_type')
  config.update(rope_scaling=rope, scoring_func='sigmoid', topk_method='noaux_tc',
                seq_aux=True, aux_loss_alpha=0.0001)
  with open(path / 'config.json', 'w', encoding='utf-8') as f:
    json.dump(config, f)
  want_config, want = hf.load_variables(os.path.join(FIXTURES, 'deepseek_v3'))
  got_config, got = hf.load_variables(str(path))
  assert got_config.model.to_dict() == want_config.model.to_dict()
  assert got_config.model.rope_scaling.type == 'yarn'
  chex.assert_trees_all_equal(got, want)


def test_gemma_configs_in_the_hubs_older_layout_load_the_same(tmp_path):
  """config.json as the hub's Gemma 2 and 3 files have it: no layer_types or
  rope_parameters, but sliding_window_pattern, rope_theta, rope_scaling and
  rope_local_base_freq."""
  for name in ('gemma2', 'gemma3'):
    path = _copy(name, tmp_path / name)
    with open(path / 'config.json', encoding='utf-8') as f:
      config = json.load(f)
    rope = config.pop('rope_parameters')
    config.pop('layer_types')
    if name == 'gemma3':
      config.update(sliding_window_pattern=3, rope_theta=rope['full_attention']['rope_theta'],
                    rope_local_base_freq=rope['sliding_attention']['rope_theta'],
                    rope_scaling={'rope_type': 'linear', 'factor': 8.0})
    else:
      config['rope_theta'] = rope['rope_theta']
    with open(path / 'config.json', 'w', encoding='utf-8') as f:
      json.dump(config, f)
    want_config, want = hf.load(os.path.join(FIXTURES, name))
    got_config, got = hf.load(str(path))
    assert got_config.model.to_dict() == want_config.model.to_dict()
    chex.assert_trees_all_equal(got, want)


def test_a_deepseek_v3_saved_without_routing_biases_writes_zeros(tmp_path):
  config, variables = hf.load_variables(os.path.join(FIXTURES, 'deepseek_v3'))
  hf.save(config, variables['params'], str(tmp_path))  # a run without the loss-free bias
  _, saved = hf.load_variables(str(tmp_path))
  np.testing.assert_array_equal(saved['moe_bias']['layers']['block_0']['moe']['bias'],
                                np.zeros((2, 8), np.float32))  # 2 MoE layers, 8 experts
  chex.assert_trees_all_equal(saved['params'], variables['params'])


def test_deepseek_v3_imports_its_prediction_module_with_transformers_mtp_logits(tmp_path):
  # deepseek_v3_mtp: model.layers.3 (after the 3-layer stack) holds the module, drawn through
  # transformers' MtpModel; its logits for token i + 2 at positions 0..L-2 are the reference
  path = os.path.join(FIXTURES, 'deepseek_v3_mtp')
  config, variables = hf.load_variables(path)
  assert config.model.mtp.depth == 1
  assert hf.load_variables(os.path.join(FIXTURES, 'deepseek_v3'))[0].model.mtp.depth == 0
  ref = np.load(os.path.join(path, 'reference.npz'))
  model = families.build(config.model)
  logits, sown = model.apply(variables, {'inputs': jnp.asarray(ref['input_ids'])},
                             mutable=['mtp'])
  mtp_logits = head_lib.project(config.model, variables['params'], sown['mtp']['depth_1'][0])
  np.testing.assert_allclose(logits, ref['logits'], atol=1e-4, rtol=0)
  np.testing.assert_allclose(mtp_logits[:, :-1], ref['mtp_logits'], atol=1e-4, rtol=0)
  # export writes the hub's layout back, every tensor (the copies and the bias included)
  hf.save(config, variables['params'], str(tmp_path / 'out'), variables['moe_bias'])
  want = safetensors_np.load_file(os.path.join(path, 'model.safetensors'))
  got = safetensors_np.load_file(str(tmp_path / 'out' / 'model.safetensors'))
  assert sorted(got) == sorted(want)
  for name, value in want.items():
    np.testing.assert_allclose(got[name], value, atol=1e-6, err_msg=name)
  # a module whose embedding copy is not the model's
  shutil.copytree(path, tmp_path / 'other')
  want['model.layers.3.embed_tokens.weight'] = want['model.layers.3.embed_tokens.weight'] + 1
  safetensors_np.save_file(want, str(tmp_path / 'other' / 'model.safetensors'))
  with pytest.raises(hf.ConvertError, match=r"'model.layers.3.embed_tokens.weight' differs "
                     r"from 'model.embed_tokens.weight'"):
    hf.load_variables(str(tmp_path / 'other'))
