"""zoo.convert.export: a trained workdir as a Hugging Face directory whose weights are the
checkpoint's and whose tokenizer.json gives the zoo's ids (transformers itself is not a
test dependency; docs/hf.md records a check with AutoTokenizer / AutoModelFor*)."""

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tokenizers

from tests import helpers
from zoo import config as config_lib
from zoo import families
from zoo import run as run_lib
from zoo.convert import export
from zoo.convert import hf
from zoo.convert import hf_tokenizer
from zoo.data import readers
from zoo.data import tokenizer as tokenizer_lib
from zoo.models import lora
from zoo.train import evaluate
from zoo.train import loop
from zoo.train import metrics as metrics_lib
from zoo.train import runtime


def _documents(count, start=0):
  docs = readers.documents([helpers.EMBEDDED_CORPUS])
  return [text for text, _ in itertools.islice(docs, start, start + count)]


@pytest.mark.parametrize('kind', ['bpe', 'unigram'])
def test_a_sentencepiece_model_converts_to_a_tokenizer_json_with_the_same_ids(kind):
  zoo = tokenizer_lib.train(_documents(1500), 700, kind)
  converted = hf_tokenizer.from_sentencepiece(zoo.model_proto)
  texts = _documents(1500, start=1500) + [
      '<mask> first, then x <mask> y', '\nleads with a newline', '  two spaces lead',
      'caf\u00e9 \u2603 \U0001f642', 'tab\there  and   gaps ']
  assert [converted.encode(t).ids for t in texts] == zoo.encode(texts)
  assert converted.decode(converted.encode(texts[0]).ids) == texts[0]


@pytest.fixture(scope='module', params=['bpe', 'unigram'])
def sentencepiece(request):
  return tokenizer_lib.train(_documents(1500), 700, request.param)


def _byte_id(zoo, byte):
  return zoo.processor.piece_to_id(f'<0x{byte:02X}>')


def _id_sequences(zoo, count, seed=0):
  """Id sequences mixing ordinary pieces, the byte pieces of characters of 1 to 4 UTF-8
  bytes, and invalid bytes (a lone continuation, a lead byte cut short) each followed by an
  ASCII byte and preceded by an ordinary piece: the sequences SentencePiece's decoding
  defines and tokenizers' per-piece rules can follow."""
  rng = np.random.default_rng(seed)
  ordinary = [i for i in zoo.piece_ids() if not zoo.processor.is_byte(int(i))]
  characters = ['a', ' ', '~', '\u00e9', '\u00df', '\u20ac', '\u2603', '\U0001f642', '\n']
  sequences = []
  for _ in range(count):
    ids = []
    for _ in range(rng.integers(1, 8)):
      kind = rng.integers(3)
      if kind == 0:
        ids.append(int(rng.choice(ordinary)))
      elif kind == 1:
        ids += [_byte_id(zoo, b) for b in rng.choice(characters).encode('utf-8')]
      else:
        invalid = int(rng.choice([0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFF]))
        ids += [int(rng.choice(ordinary)), _byte_id(zoo, invalid),
                _byte_id(zoo, int(rng.integers(0x20, 0x7F)))]
    sequences.append(ids)
  return sequences


def test_the_exported_tokenizer_decodes_byte_pieces_as_sentencepiece_does(sentencepiece):
  converted = hf_tokenizer.from_sentencepiece(sentencepiece.model_proto)
  byte = lambda b: _byte_id(sentencepiece, b)
  hand = [[byte(0xE2), byte(0x31), byte(0x6D)],  # '\ufffd1m', not three U+FFFD
          [byte(0x20), *sentencepiece.encode(['Hi'])[0]],  # a leading byte space stays
          [byte(0xE2), byte(0x82), byte(0xAC)]]  # '\u20ac'
  assert [converted.decode(ids) for ids in hand] == [
      sentencepiece.decode(ids) for ids in hand] == ['\ufffd1m', '  Hi', '\u20ac']
  sequences = _id_sequences(sentencepiece, 300)
  assert [converted.decode(ids) for ids in sequences] == [
      sentencepiece.decode(ids) for ids in sequences]


def test_known_problem_a_byte_run_mixing_a_character_and_an_invalid_byte(sentencepiece):
  """docs/contracts.md, Known problems: tokenizers' ByteFallback turns a whole run of byte
  pieces with an invalid byte in it into U+FFFDs, where SentencePiece keeps the run's valid
  characters; no tokenizers decoder can tell the two apart."""
  converted = hf_tokenizer.from_sentencepiece(sentencepiece.model_proto)
  ids = [_byte_id(sentencepiece, b) for b in (0xE2, 0x82, 0xAC, 0xFF)]
  assert sentencepiece.decode(ids) == '\u20ac\ufffd'
  assert converted.decode(ids) == '\ufffd' * 4


def test_t5_sentinels_are_in_the_exported_tokenizer_with_the_zoo_ids(sentencepiece, tmp_path):
  path = tmp_path / 'spm.model'
  path.write_bytes(sentencepiece.model_proto)
  ids = hf_tokenizer.write(str(path), str(tmp_path / 'hf'), ('eos',), 64, sentinels=3)
  exported = tokenizers.Tokenizer.from_file(str(tmp_path / 'hf' / 'tokenizer.json'))
  assert [exported.token_to_id(f'<extra_id_{k}>') for k in range(3)] == list(
      sentencepiece.sentinel_ids(3)) == [702, 701, 700]
  assert ids == {'bos_token_id': sentencepiece.bos_id, 'eos_token_id': sentencepiece.eos_id,
                 'pad_token_id': sentencepiece.pad_id}
  settings = json.loads((tmp_path / 'hf' / 'tokenizer_config.json').read_text())
  assert settings['additional_special_tokens'] == ['<extra_id_0>', '<extra_id_1>',
                                                   '<extra_id_2>']


def test_export_writes_the_checkpoint_weights_and_a_tokenizer_with_the_zoo_ids(tmp_path):
  config = helpers.smoke('gpt_shakespeare', 'train.steps=3', 'optim.warmup_steps=1')
  workdir, out = str(tmp_path / 'run'), str(tmp_path / 'hf')
  loop.train(run_lib.resolve(config), workdir)
  assert export.export(run_lib.resolve(config), workdir, out) == 3

  place = runtime.placement(run_lib.resolve(config))
  state = runtime.model_state(run_lib.resolve(config), place.mesh)
  _, variables = runtime.restore_variables(config, workdir, state, 'test')
  _, params = hf.load(out)
  ids = helpers.random_ids((2, 16), vocab=config.model.vocab_size)
  model = families.build(config.model)
  np.testing.assert_allclose(model.apply({'params': params}, {'inputs': ids}),
                             model.apply(variables, {'inputs': ids}), atol=1e-5, rtol=0)

  zoo = runtime.tokenizer(config, workdir)
  exported = tokenizers.Tokenizer.from_file(f'{out}/tokenizer.json')
  for text in _documents(200):  # a decoder's input: [BOS] text, as generation feeds it
    assert exported.encode(text).ids == list(zoo.document(zoo.encode([text])[0])[:-1])
  with pytest.raises(config_lib.ConfigError, match='--out=.* is not empty; export into a new'):
    export.export(run_lib.resolve(config), workdir, out)

  umask = os.umask(0)
  os.umask(umask)
  assert {name: oct(os.stat(os.path.join(out, name)).st_mode & 0o777)
          for name in os.listdir(out)} == {name: oct(0o666 & ~umask) for name in (
              'config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json',
              'tokenizer_config.json', 'zoo_config.json')}
  hf_config = json.loads(open(f'{out}/config.json', encoding='utf-8').read())
  special = {'bos_token_id': zoo.bos_id, 'eos_token_id': zoo.eos_id, 'pad_token_id': zoo.pad_id}
  assert {k: hf_config[k] for k in special} == special
  assert json.loads(open(f'{out}/generation_config.json', encoding='utf-8').read()) == special
  settings = json.loads(open(f'{out}/tokenizer_config.json', encoding='utf-8').read())
  assert settings['model_max_length'] == config.data.seq_len == 64
  assert settings['split_special_tokens'] is True and settings['unk_token'] == '<unk>'
  exported.encode_special_tokens = True  # what split_special_tokens tells transformers
  literal = 'a <s> b </s> c'
  assert exported.encode(literal, add_special_tokens=False).ids == zoo.encode([literal])[0]

  imported = hf.write_workdir(out, str(tmp_path / 'imported'))  # the export, read back
  assert imported.data.seq_len == 64
  again = runtime.tokenizer(imported, str(tmp_path / 'imported'))
  assert again.encode([literal]) == zoo.encode([literal])
  # with the run's own settings (zoo_config.json): it evaluates as the run did
  assert (imported.train.batch_size, imported.train.eval_batches) == (8, 2) != (
      config_lib.base().train.batch_size, config_lib.base().train.eval_batches)
  loss = evaluate.run(run_lib.resolve(imported), str(tmp_path / 'imported'))['eval_loss']
  want = [r['eval_loss'] for r in metrics_lib.read(workdir) if 'eval_loss' in r][-1]
  assert loss == pytest.approx(want, abs=2e-5)


def test_a_decoder_classifier_with_lora_exports_as_its_hugging_face_class(tmp_path):
  task = helpers.speakers_task(str(tmp_path / 'task'), 'classification', 16, 8)
  make = lambda: helpers.smoke('gpt_shakespeare', 'data.task.kind=classification',
                               f'data.task.path={task}', "model.label_names=('first', 'second')",
                               'train.steps=3', 'optim.warmup_steps=1', 'train.lora.rank=2',
                               "train.lora.targets='query,value,wo'", 'optim.learning_rate=0.05')
  workdir, out = str(tmp_path / 'run'), str(tmp_path / 'hf')
  loop.train(run_lib.resolve(make()), workdir)
  config = make()
  # num_labels 0: sized from the task
  assert export.export(run_lib.resolve(config), workdir, out) == 3
  hf_config = json.loads(open(f'{out}/config.json', encoding='utf-8').read())
  zoo = runtime.tokenizer(config, workdir)
  assert hf_config['architectures'] == ['LlamaForSequenceClassification']
  assert hf_config['id2label'] == {'0': 'first', '1': 'second'}
  assert hf_config['pad_token_id'] == zoo.pad_id != zoo.eos_id
  # the exported tokenizer writes the rows the head was trained on: [BOS] text [EOS]
  exported = tokenizers.Tokenizer.from_file(f'{out}/tokenizer.json')
  exported.enable_truncation(config.data.seq_len)  # as transformers' truncation=True
  family = families.get(config.model)
  for example in runtime.corpus(config, workdir).eval:
    row = family.task_example('classification', example, zoo, config.data)
    text = zoo.decode(example['text'])
    assert exported.encode(text).ids == list(row['inputs'][:row['segment_ids'].sum()])
  settings = json.loads(open(f'{out}/tokenizer_config.json', encoding='utf-8').read())
  assert settings['model_input_names'] == ['input_ids', 'attention_mask']  # no token types

  # the export's label logits are the adapted checkpoint's, its adapters merged
  _, params = hf.load(out)
  place = runtime.placement(run_lib.resolve(config))
  _, variables = runtime.restore_variables(config, workdir,
                                           runtime.model_state(run_lib.resolve(config),
                                                               place.mesh), 'test')
  batch = helpers.family_batch(config, 4)
  exported = families.build(config.model).apply({'params': params}, batch)['label_logits']
  adapted = families.build(config.model, config.train.lora).apply(variables, batch)
  np.testing.assert_allclose(exported, adapted['label_logits'], atol=1e-5, rtol=0)
  stripped = lora.merge(variables['params'], 0.0)  # the adapters dropped
  base = families.build(config.model).apply({'params': stripped}, batch)
  assert np.abs(base['label_logits'] - exported).max() > 1e-3  # the adapters moved


def test_the_command_reads_the_runs_own_config_so_no_override_is_repeated(tmp_path):
  trained = ['train.steps=2', 'optim.warmup_steps=1', 'train.lora.rank=4',
             'train.lora.targets=query,value', 'model.num_layers=1']
  loop.train(run_lib.load(helpers.config_file('gpt_shakespeare'), trained), str(tmp_path / 'w'))
  command = [sys.executable, '-m', 'zoo.convert.export', f'--workdir={tmp_path / "w"}']
  ours = subprocess.run([*command, f'--out={tmp_path / "out"}'], env=helpers.cpu_env(),
                        capture_output=True, text=True, timeout=300, check=False)
  assert ours.returncode == 0 and (tmp_path / 'out' / 'model.safetensors').exists(), ours.stderr
  # the config file alone, without the run's overrides: another model, refused in one line
  theirs = subprocess.run([*command, f'--out={tmp_path / "out2"}',
                           f'--config={helpers.config_file("gpt_shakespeare")}'],
                          env=helpers.cpu_env(), capture_output=True, text=True, timeout=300,
                          check=False)
  assert theirs.returncode == 2 and 'model.num_layers=2 (was 1)' in theirs.stderr, theirs.stderr
