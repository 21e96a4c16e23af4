"""Task files (zoo/data/task.py): what each kind reads, the one-line errors of bad files,
the label count; each family's rows by hand; the task pipeline's batches (one example per
row with its label; completions packed whole, the loss on the completion only) and its
exact resume."""

import json
import re

import ml_collections
import numpy as np
import pytest

from tests import helpers
from zoo.data import pipeline
from zoo.data import task as task_lib
from zoo.errors import ConfigError
from zoo.families import decoder
from zoo.families import encoder
from zoo.families import encoder_decoder
from zoo.families import tasks


class Words:
  """A tokenizer of known ids: word k of the text -> its length + 10; BOS 1, EOS 2."""
  vocab_size, bos_id, eos_id, pad_id = 64, 1, 2, 0
  encode = staticmethod(lambda texts: [[len(w) + 10 for w in t.split()] for t in texts])


def _write(directory, split, rows):
  directory.mkdir(exist_ok=True)
  (directory / f'{split}.jsonl').write_text(
      ''.join((r if isinstance(r, str) else json.dumps(r)) + '\n' for r in rows))


def _task(kind, path):
  return ml_collections.ConfigDict({'kind': kind, 'path': str(path), 'metrics': ()})


def _data(kind, seq_len=8, target_seq_len=4):
  return ml_collections.ConfigDict({'seq_len': seq_len, 'target_seq_len': target_seq_len,
                                    'task': {'kind': kind}})


@pytest.mark.parametrize('kind, line, message', [
    ('classification', {'text': 'a b'}, r"train.jsonl:2: no field 'label'; data.task.kind="
     r"'classification' reads text, label"),
    ('text_to_text', {'inputs': 'a'}, r"train.jsonl:2: no field 'targets'"),
    ('prompt_completion', {'completion': 'a'}, r"train.jsonl:2: no field 'prompt'"),
    ('classification', {'text': 'a', 'label': 1.5}, r"train.jsonl:2: label 1.5 is not a "
     'class; classification labels are integers'),
    ('classification', {'text': 'a', 'label': -1}, r'train.jsonl:2: label -1 is not a class'),
    ('regression', {'text': 'a', 'label': 'high'}, r"train.jsonl:2: label 'high' is not a "
     'finite number'),
    ('classification', {'text': 3, 'label': 0}, r"train.jsonl:2: field 'text' must be a "
     'string, got int'),
    ('prompt_completion', {'prompt': 'a', 'completion': 'b', 'choices': ['c']},
     r'train.jsonl:2: field choices must be a list of strings holding the completion'),
    ('classification', '{"text": "a", "label": 0', r'train.jsonl:2: not a JSON object'),
])
def test_a_bad_line_is_named_by_file_and_line(tmp_path, kind, line, message):
  good = {'classification': {'text': 'a', 'label': 0}, 'regression': {'text': 'a', 'label': 0},
          'text_to_text': {'inputs': 'a', 'targets': 'b'},
          'prompt_completion': {'prompt': 'a', 'completion': 'b'}}[kind]
  _write(tmp_path, 'train', [good, line])
  with pytest.raises(ConfigError, match=re.escape(str(tmp_path)) + '/' + message):
    task_lib.read_split(_task(kind, tmp_path), 'train')


def test_a_missing_or_empty_split_is_one_line(tmp_path):
  with pytest.raises(ConfigError, match=r'has no eval.jsonl; put the eval split there'):
    task_lib.read_split(_task('text_to_text', tmp_path), 'eval')
  _write(tmp_path, 'eval', ['', '  '])
  with pytest.raises(ConfigError, match=r'eval.jsonl holds no examples; data.task needs a '
                     'non-empty eval split'):
    task_lib.read_split(_task('text_to_text', tmp_path), 'eval')


def test_the_label_count_comes_from_the_train_split_and_must_hold_every_label(tmp_path):
  records = {'train': [{'label': 0}, {'label': 2}], 'eval': [{'label': 1}]}
  config = _task('classification', tmp_path)
  assert task_lib.num_labels('classification', records, 0, config) == 3
  assert task_lib.num_labels('classification', records, 5, config) == 5
  assert task_lib.num_labels('regression', records, 0, config) == 1
  records['eval'].append({'label': 3})
  with pytest.raises(ConfigError, match=r"eval.jsonl: example 2 has label 3, which a head "
                     r"of 3 classes \(the train split's labels 0..2\) cannot hold"):
    task_lib.num_labels('classification', records, 0, config)
  with pytest.raises(ConfigError, match=r'a head of 2 classes \(model.num_labels=2\)'):
    task_lib.num_labels('classification', records, 2, config)


# ------------------------------------------------------------------ rows, by hand

def test_bert_reads_cls_text_sep_pair_sep_with_token_types():
  example = {'text': [20, 21, 22, 23], 'text_pair': [30, 31], 'label': 1}
  row = encoder.task_example('classification', example, _Bert(), _data('classification'))
  # room 8 - 3 = 5: the longer text loses its last ids first (4 + 2 -> 3 + 2)
  np.testing.assert_array_equal(row['inputs'], [1, 20, 21, 22, 2, 30, 31, 2])
  np.testing.assert_array_equal(row['token_type_ids'], [0, 0, 0, 0, 0, 1, 1, 1])
  np.testing.assert_array_equal(row['segment_ids'], [1] * 8)
  assert row['labels'] == 1 and row['labels'].dtype == np.int32
  single = encoder.task_example('regression', {'text': [20], 'label': 0.5}, _Bert(),
                                _data('regression'))
  np.testing.assert_array_equal(single['inputs'], [1, 20, 2, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(single['segment_ids'], [1, 1, 1, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(single['positions'], [0, 1, 2, 0, 0, 0, 0, 0])
  assert single['labels'] == np.float32(0.5)


class _Bert:
  bos_id, eos_id = 1, 2


def test_a_decoder_row_ends_in_eos_for_its_head_to_read():
  row = decoder.task_example('classification', {'text': [20, 21], 'text_pair': [30],
                                                'label': 3}, Words(), _data('classification'))
  np.testing.assert_array_equal(row['inputs'], [1, 20, 21, 2, 30, 2, 0, 0])
  np.testing.assert_array_equal(row['segment_ids'], [1, 1, 1, 1, 1, 1, 0, 0])


def test_a_completion_is_what_the_loss_reads_and_a_long_prompt_loses_its_start():
  row = tasks.completion_row([20, 21, 22], [30, 31], Words(), seq_len=8)
  np.testing.assert_array_equal(row['inputs'], [1, 20, 21, 22, 30, 31])
  np.testing.assert_array_equal(row['targets'], [20, 21, 22, 30, 31, 2])
  np.testing.assert_array_equal(row['loss_weights'], [0, 0, 0, 1, 1, 1])
  cut = tasks.completion_row(list(range(20, 30)), [30, 31], Words(), seq_len=6)
  np.testing.assert_array_equal(cut['inputs'], [1, 27, 28, 29, 30, 31])  # 6 = seq_len
  np.testing.assert_array_equal(cut['loss_weights'], [0, 0, 0, 1, 1, 1])
  text = decoder.task_example('text_to_text', {'inputs': [20], 'targets': [30]}, Words(),
                              _data('text_to_text'))
  np.testing.assert_array_equal(text['targets'], [20, 30, 2])


def test_t5_encodes_the_inputs_and_decodes_the_targets_from_id_0():
  row = encoder_decoder.task_example('text_to_text', {'inputs': [20, 21], 'targets': list(
      range(30, 40))}, Words(), _data('text_to_text', target_seq_len=4))
  np.testing.assert_array_equal(row['encoder_inputs'], [20, 21, 2])
  np.testing.assert_array_equal(row['decoder_targets'], [30, 31, 32, 2])
  np.testing.assert_array_equal(row['decoder_inputs'], [0, 30, 31, 32])


# ------------------------------------------------------------------------ pipeline

def _completions(count, seed=0):
  rng = np.random.default_rng(seed)
  return [{'prompt': rng.integers(10, 60, rng.integers(1, 5)).astype(np.int32),
           'completion': rng.integers(10, 60, rng.integers(1, 4)).astype(np.int32)}
          for _ in range(count)]


def _completion_dataset(examples, train=True):
  import grain  # pylint: disable=g-import-not-at-top
  data = _data('prompt_completion', seq_len=16)
  spec = decoder.batch_spec(data, 4)
  rows = pipeline.make_task_rows(
      grain.MapDataset.source(examples), spec,
      lambda e: decoder.task_example('prompt_completion', e, Words(), data), train=train,
      packed=True, seed=3)
  return pipeline.batched(rows, spec, train=train)


def test_completions_are_packed_whole_with_the_loss_on_the_completions_only():
  examples = _completions(12)
  batches = list(_completion_dataset(examples, train=False))
  seen = []
  for batch in batches:
    for row in range(4):
      segments = batch['segment_ids'][row]
      for s in set(segments[segments > 0]):
        at = segments == s
        inputs, weights = batch['inputs'][row][at], batch['loss_weights'][row][at]
        np.testing.assert_array_equal(batch['positions'][row][at], np.arange(at.sum()))
        # the row of one example: [BOS] prompt completion, weights on completion + EOS
        match = next(e for e in examples if len(e['prompt']) + len(e['completion']) + 1 ==
                     at.sum() and list(inputs[1:]) == [*e['prompt'], *e['completion']])
        np.testing.assert_array_equal(weights, [0] * len(match['prompt']) +
                                      [1] * (len(match['completion']) + 1))
        seen.append(id(match))
      assert not batch['loss_weights'][row][segments == 0].any()
  assert len(seen) == len(examples)


def test_a_task_stream_resumes_exactly():
  examples = _completions(30, seed=1)
  reference = iter(_completion_dataset(examples))
  for _ in range(3):
    next(reference)
  state = reference.get_state()
  want = [next(reference) for _ in range(2)]
  resumed = iter(_completion_dataset(examples))
  resumed.set_state(state)
  for batch in want:
    got = next(resumed)
    for key in batch:
      np.testing.assert_array_equal(got[key], batch[key])


def test_headed_rows_are_one_example_each_and_the_last_batch_is_padded():
  import grain  # pylint: disable=g-import-not-at-top
  data = _data('classification')
  examples = [{'text': [20 + k], 'label': k % 3} for k in range(6)]
  spec = encoder.batch_spec(data, 4)
  batches = list(pipeline.batched(pipeline.make_task_rows(
      grain.MapDataset.source(examples), spec,
      lambda e: encoder.task_example('classification', e, _Bert(), data), train=False,
      packed=False), spec, train=False))
  assert len(batches) == 2
  np.testing.assert_array_equal(np.concatenate([b['labels'] for b in batches]),
                                [0, 1, 2, 0, 1, 2, 0, 0])
  np.testing.assert_array_equal(batches[1]['segment_ids'][:, 0], [1, 1, 0, 0])
  np.testing.assert_array_equal(batches[0]['inputs'][:, 1], [20, 21, 22, 23])


def test_open_task_tokenizes_both_splits_and_trains_no_tokenizer_when_given_one(tmp_path):
  _write(tmp_path / 'task', 'train', [{'text': 'to be or not', 'label': 1},
                                      {'text': 'that is', 'label': 0}])
  _write(tmp_path / 'task', 'eval', [{'text': 'the question', 'label': 1}])
  config = helpers.tiny_config()
  with config.unlocked():
    config.data.task.kind, config.data.task.path = 'classification', str(tmp_path / 'task')
    config.model.vocab_size = config.data.tokenizer.vocab_size = 300
  task = task_lib.open_task(config.data, str(tmp_path / 'run'), 0)
  assert task.num_labels == 2 and len(task.train) == 2 and len(task.eval) == 1
  np.testing.assert_array_equal(task.eval[0]['text'], task.tokenizer.encode(['the question'])[0])
  assert (tmp_path / 'run' / 'tokenizer').is_dir()  # trained on the train split's text


def test_eval_prompts_are_cut_as_the_training_rows_cut_them():
  config = helpers.smoke('gpt_shakespeare', 'generate.max_new_tokens=4', 'data.seq_len=8')
  ids, _ = decoder.tokenize_prompts(config, _Spaces(), ['a b c d e f g h i j', 'a b'],
                                    fit=True)
  # [BOS] and the last 3 pieces: 4 = seq_len - max_new_tokens; the short one left-padded
  np.testing.assert_array_equal(ids, [[1, 17, 18, 19], [0, 1, 10, 11]])
  t5 = helpers.smoke('t5_small', 'data.seq_len=4')
  ids, _ = encoder_decoder.tokenize_prompts(t5, _Spaces(), ['a b c d e f'], fit=True)
  np.testing.assert_array_equal(ids, [[10, 11, 12, 2]])  # as task_example: 3 pieces + EOS


def test_a_prompt_and_its_new_tokens_past_a_learned_position_table_is_one_line():
  config = helpers.smoke('gpt_shakespeare', 'model.position=learned', 'data.seq_len=32',
                         'model.max_length=32', 'generate.max_new_tokens=30')
  with pytest.raises(ConfigError, match=r'the longest prompt \(4 tokens\) \+ '
                                        r'generate.max_new_tokens=30 exceed model.max_length=32'):
    decoder.tokenize_prompts(config, _Spaces(), ['a b c', 'a'])


class _Spaces(Words):
  """Piece k of the text -> 10 + k."""
  encode = staticmethod(lambda texts: [[10 + k for k, _ in enumerate(t.split())]
                                       for t in texts])
  document = lambda self, ids: np.asarray([1, *ids, 2], np.int32)
