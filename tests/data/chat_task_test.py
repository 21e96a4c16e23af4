"""Conversation tasks (zoo/data/chat_task.py): rows whose loss reads the assistant's tokens,
preference pairs, prompts, and bad input refused with its file and line (or skipped and
counted, as data.task.too_long says)."""

import json

import numpy as np
import pytest

from tests import helpers
from zoo.data import chat
from zoo.data import task as task_lib
from zoo.errors import ConfigError
from zoo.families import decoder
from zoo.families import encoder_decoder

TURNS = [{'role': 'user', 'content': 'Say one.'}, {'role': 'assistant', 'content': 'one'},
         {'role': 'user', 'content': 'And two?'}, {'role': 'assistant', 'content': 'two'}]


def _write(path, kind, train, eval_=None, **task):
  path.mkdir(exist_ok=True)
  for split, lines in (('train', train), ('eval', eval_ or train)):
    (path / f'{split}.jsonl').write_text(''.join(json.dumps(x) + '\n' for x in lines))
  config = helpers.tiny_config()
  with config.unlocked():
    config.model.vocab_size = 320
    config.data.seq_len = 96
    config.data.task.update(kind=kind, path=str(path), **task)
  return config


def _open(config, workdir, new_tokens=0):
  return task_lib.open_task(config.data, str(workdir), 0, new_tokens)


def test_chat_rows_weight_every_assistant_turn_and_nothing_else(tmp_path):
  config = _write(tmp_path / 'task', 'chat', [{'messages': TURNS}] * 3)
  task = _open(config, tmp_path)
  example = task.train[0]
  row = decoder.task_example('chat', example, task.tokenizer, config.data)
  weighted = row['targets'][row['loss_weights'] > 0]
  assert task.tokenizer.decode(weighted) == 'one<|im_end|>two<|im_end|>'
  np.testing.assert_array_equal(row['inputs'][1:], row['targets'][:-1])
  # the turn markers are whole pieces of the tokenizer trained for the task
  assert task.tokenizer.piece_id('<|im_start|>') is not None
  assert chat.end_of_turn_id(task.template, task.tokenizer) == task.tokenizer.piece_id(
      '<|im_end|>')


def test_an_encoder_decoder_reads_the_turns_before_the_last_reply(tmp_path):
  config = _write(tmp_path / 'task', 'chat', [{'messages': TURNS}])
  task = _open(config, tmp_path)
  with config.unlocked():
    config.data.target_seq_len = 8
  row = encoder_decoder.task_example('chat', task.train[0], task.tokenizer, config.data)
  text = task.tokenizer.decode(row['encoder_inputs'][:-1])
  assert text.endswith('And two?<|im_end|>\n<|im_start|>assistant\n')
  assert task.tokenizer.decode(row['decoder_targets'][:-1]) == 'two<|im_end|>'


def test_preference_rows_weight_only_each_completion(tmp_path):
  pair = {'prompt': 'Pick a number.', 'chosen': 'seven', 'rejected': 'eight'}
  config = _write(tmp_path / 'task', 'preference', [pair])
  task = _open(config, tmp_path)
  row = decoder.task_example('preference', task.train[0], task.tokenizer, config.data)
  assert row['inputs'].shape == (2, config.data.seq_len)
  chosen, rejected = (task.tokenizer.decode(row['targets'][i][row['loss_weights'][i] > 0])
                      for i in (0, 1))
  assert (chosen, rejected) == ('seven<|im_end|>', 'eight<|im_end|>')
  assert np.all(row['segment_ids'][:, 0] == 1)


def test_prompts_end_with_the_generation_prompt(tmp_path):
  config = _write(tmp_path / 'task', 'prompts', [{'prompt': '2+2=', 'answer': 4}])
  task = _open(config, tmp_path, new_tokens=4)
  text = task.tokenizer.decode(task.train[0]['prompt_ids'])
  assert text.endswith('2+2=<|im_end|>\n<|im_start|>assistant\n')
  assert int(task.train[0]['line']) == 1 and task.records['train'][0]['answer'] == 4


@pytest.mark.parametrize('kind, line, message', [
    ('chat', {'messages': [{'role': 'user', 'content': 'hi'}]}, 'has no assistant turn'),
    ('chat', {'messages': 'hi'}, "field 'messages' must be a non-empty list"),
    ('preference', {'prompt': 'p', 'chosen': 'same', 'rejected': 'same'},
     'chosen and rejected are the same completion'),
    ('preference', {'prompt': 'p', 'chosen': 'a'}, "no field 'rejected'"),
    ('prompts', {'question': 'p'}, "no field 'prompt'"),
])
def test_bad_lines_name_their_file_and_line(tmp_path, kind, line, message):
  good = {'chat': {'messages': TURNS}, 'preference': {'prompt': 'p', 'chosen': 'a',
                                                       'rejected': 'b'},
          'prompts': {'prompt': 'p'}}[kind]
  config = _write(tmp_path / 'task', kind, [good, line])
  with pytest.raises(ConfigError, match=rf'train\.jsonl:2: .*{message}'):
    _open(config, tmp_path)


def test_a_role_the_template_refuses_names_the_line_and_the_templates_words(tmp_path):
  template = tmp_path / 'strict.jinja'
  template.write_text("{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
                      "{{ raise_exception('Only user and assistant roles are supported') }}"
                      "{% endif %}{{ m['content'] }}{% endfor %}")
  lines = [{'messages': TURNS}, {'messages': [{'role': 'narrator', 'content': 'x'}, *TURNS]}]
  config = _write(tmp_path / 'task', 'chat', lines, template=str(template))
  with pytest.raises(ConfigError, match=r'train\.jsonl:2: the chat template refuses this '
                                         r'conversation \(Only user and assistant'):
    _open(config, tmp_path)


def test_too_long_is_an_error_or_skipped_and_counted(tmp_path):
  long = {'messages': [{'role': 'user', 'content': 'word ' * 80}, *TURNS[1:2]]}
  config = _write(tmp_path / 'task', 'chat', [{'messages': TURNS}, long])
  with pytest.raises(ConfigError, match=r'train\.jsonl:2: the conversation is \d+ tokens, '
                                         r'over data\.seq_len=96'):
    _open(config, tmp_path)
  with config.unlocked():
    config.data.task.too_long = 'skip'
  task = _open(config, tmp_path)
  assert len(task.train) == 1 and task.skipped == {'train': 1, 'eval': 1}


def test_a_prompt_without_room_for_its_new_tokens_is_refused(tmp_path):
  config = _write(tmp_path / 'task', 'prompts', [{'prompt': '1+1='}, {'prompt': ' '.join(f'w{i}q' for i in range(50))}])
  with pytest.raises(ConfigError, match=r'train\.jsonl:2: the prompt is \d+ tokens, which '
                                         r'with train\.grpo\.max_new_tokens=16'):
    _open(config, tmp_path, new_tokens=16)
