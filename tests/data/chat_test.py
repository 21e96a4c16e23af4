"""zoo.data.chat against transformers' apply_chat_template: six published templates
(tests/fixtures/chat_templates) render the same text and token ids on the same
conversations, and the assistant mask comes from the rendering."""

import json
import pathlib
import shutil

import jinja2
import numpy as np
import pytest
import transformers

from zoo.data import chat
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError

FIXTURES = pathlib.Path(__file__).parents[1] / 'fixtures' / 'chat_templates'
TEMPLATES = {  # file -> (bos_token, eos_token) of its checkpoint's tokenizer_config.json
    'llama3_1': ('<|begin_of_text|>', '<|eot_id|>'),
    'qwen3': (None, '<|im_end|>'),
    'gemma3': ('<bos>', '<eos>'),
    'mistral_nemo': ('<s>', '</s>'),
    'deepseek_v3_1': ('<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>'),
    'gpt_oss': ('<|endoftext|>', '<|return|>'),
}
WEATHER = {'type': 'function', 'function': {
    'name': 'get_weather', 'description': 'The weather in a city today.',
    'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}},
                   'required': ['city']}}}


def _call(arguments):
  return {'id': 'call12345', 'type': 'function',
          'function': {'name': 'get_weather', 'arguments': arguments}}


CONVERSATIONS = {
    'multi_turn': dict(messages=[
        {'role': 'user', 'content': 'What is 2 + 3?'},
        {'role': 'assistant', 'content': '5'},
        {'role': 'user', 'content': 'And 5 x 7, with ünïcode?'},
        {'role': 'assistant', 'content': '35'}]),
    'system_prompt': dict(messages=[
        {'role': 'system', 'content': 'You answer in one word.'},
        {'role': 'user', 'content': 'Capital of France?'},
        {'role': 'assistant', 'content': 'Paris'}]),
    'generation_prompt': dict(messages=[
        {'role': 'system', 'content': 'Be brief.'},
        {'role': 'user', 'content': 'Say hi.'}], add_generation_prompt=True),
    'tool_calls': dict(tools=[WEATHER], messages=[
        {'role': 'user', 'content': 'Weather in Paris?'},
        {'role': 'assistant', 'content': '', 'tool_calls': [_call({'city': 'Paris'})]},
        {'role': 'tool', 'tool_call_id': 'call12345', 'name': 'get_weather',
         'content': '{"sky": "clear", "celsius": 21}'},
        {'role': 'assistant', 'content': 'Clear and 21 degrees.'}]),
}


def _hf(name):
  bos, eos = TEMPLATES[name]
  return transformers.PreTrainedTokenizerFast(
      tokenizer_file=str(FIXTURES / 'tokenizer.json'), bos_token=bos, eos_token=eos,
      chat_template=(FIXTURES / f'{name}.jinja').read_text())


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory):
  """Each template as a checkpoint directory ships it: tokenizer_config.json's
  chat_template and special tokens, beside the tokenizer.json."""
  out = {}
  for name, (bos, eos) in TEMPLATES.items():
    d = tmp_path_factory.mktemp(name)
    shutil.copy(FIXTURES / 'tokenizer.json', d / 'tokenizer.json')
    config = {'eos_token': eos, 'chat_template': (FIXTURES / f'{name}.jinja').read_text()}
    if bos:
      config['bos_token'] = bos
    (d / 'tokenizer_config.json').write_text(json.dumps(config))
    out[name] = d
  return out


def _arguments(name, conversation):
  """DeepSeek's template concatenates a tool call's arguments as a JSON string."""
  if name != 'deepseek_v3_1' or 'tools' not in conversation:
    return conversation
  text = json.loads(json.dumps(conversation))
  text['messages'][1]['tool_calls'][0]['function']['arguments'] = '{"city": "Paris"}'
  return text


@pytest.mark.parametrize('conversation', sorted(CONVERSATIONS))
@pytest.mark.parametrize('name', sorted(TEMPLATES))
def test_rendered_text_and_ids_equal_transformers_apply_chat_template(
    name, conversation, checkpoints):
  c = _arguments(name, CONVERSATIONS[conversation])
  template = chat.from_directory(str(checkpoints[name]))
  tokenizer = tokenizer_lib.from_file(str(checkpoints[name] / 'tokenizer.json'))
  hf = _hf(name)
  kwargs = {k: v for k, v in c.items() if k != 'messages'}
  try:
    expected = hf.apply_chat_template(c['messages'], tokenize=False, **kwargs)
  except jinja2.TemplateError as e:  # the template refuses it: the same refusal
    with pytest.raises(jinja2.TemplateError, match=str(e)):
      template.render(c['messages'], **kwargs)
    assert name == 'gemma3' and conversation == 'tool_calls'  # only this one refuses
    return
  assert template.render(c['messages'], **kwargs) == expected
  expected_ids = hf.apply_chat_template(c['messages'], tokenize=True, return_dict=False,
                                        **kwargs)
  ids, _ = tokenizer.encode_with_offsets(expected)
  assert ids == list(expected_ids)


def test_every_template_puts_its_turn_markers_in_as_single_ids(checkpoints):
  tokenizer = tokenizer_lib.from_file(str(checkpoints['llama3_1'] / 'tokenizer.json'))
  template = chat.from_directory(str(checkpoints['llama3_1']))
  ids, _ = chat.encode(template, tokenizer, CONVERSATIONS['multi_turn']['messages'])
  eot = tokenizer.impl.token_to_id('<|eot_id|>')
  assert int(np.sum(ids == eot)) == 5  # the (empty-system) header turn and four messages


def test_generation_blocks_mark_exactly_the_assistant_replies():
  tokenizer = tokenizer_lib.from_file(str(FIXTURES / 'tokenizer.json'))
  template = chat.Template(chat.DEFAULT_TEMPLATE)
  messages = CONVERSATIONS['multi_turn']['messages']
  ids, mask = chat.encode(template, tokenizer, messages)
  marked = tokenizer.decode(ids[mask > 0])
  assert marked == '5<|im_end|>35<|im_end|>'
  assert tokenizer.decode(ids) == template.render(messages)


def test_prefix_rendering_marks_the_same_tokens_as_generation_blocks():
  """A template without generation blocks (the default's blocks removed) finds the
  assistant's text by rendering prefixes: the same mask."""
  tokenizer = tokenizer_lib.from_file(str(FIXTURES / 'tokenizer.json'))
  marked = chat.Template(chat.DEFAULT_TEMPLATE)
  plain = chat.Template(chat.DEFAULT_TEMPLATE.replace('{%- generation %}', '')
                        .replace('{%- endgeneration %}', ''))
  assert not plain.marks_generation
  messages = CONVERSATIONS['multi_turn']['messages']
  ids_a, mask_a = chat.encode(marked, tokenizer, messages)
  ids_b, mask_b = chat.encode(plain, tokenizer, messages)
  np.testing.assert_array_equal(ids_a, ids_b)
  # prefix rendering also counts the newline after each turn's end marker
  assert tokenizer.decode(ids_b[mask_b > 0]) == '5<|im_end|>\n35<|im_end|>\n'
  assert np.all(mask_b >= mask_a)


def test_the_assistant_mask_equals_transformers_return_assistant_tokens_mask():
  hf = transformers.PreTrainedTokenizerFast(
      tokenizer_file=str(FIXTURES / 'tokenizer.json'), eos_token='<|im_end|>',
      chat_template=chat.DEFAULT_TEMPLATE)
  messages = CONVERSATIONS['system_prompt']['messages'] + [
      {'role': 'user', 'content': 'And of Italy?'}, {'role': 'assistant', 'content': 'Rome'}]
  out = hf.apply_chat_template(messages, tokenize=True, return_dict=True,
                               return_assistant_tokens_mask=True)
  tokenizer = tokenizer_lib.from_file(str(FIXTURES / 'tokenizer.json'))
  ids, mask = chat.encode(chat.Template(chat.DEFAULT_TEMPLATE), tokenizer, messages)
  assert list(ids) == list(out['input_ids'])
  assert list(mask.astype(int)) == list(out['assistant_masks'])


def test_a_template_that_does_not_render_prefixes_is_refused():
  tokenizer = tokenizer_lib.from_file(str(FIXTURES / 'tokenizer.json'))
  # numbers each turn from the end: an earlier turn renders differently once more follow
  template = chat.Template("{% for m in messages %}{{ loop.revindex }}{{ m['content'] }}"
                           "{% endfor %}")
  with pytest.raises(ConfigError, match='prefix by prefix'):
    chat.encode(template, tokenizer, CONVERSATIONS['multi_turn']['messages'])


def test_tojson_keeps_unicode_and_takes_transformers_options():
  template = chat.Template("{{ tools | tojson(indent=2, sort_keys=true) }}")
  tools = [{'b': 'é', 'a': 1}]
  assert template.render([], tools) == json.dumps(tools, ensure_ascii=False, indent=2,
                                                  sort_keys=True)


def test_the_sandbox_refuses_attribute_escapes():
  template = chat.Template("{{ messages.__class__.__mro__ }}")
  with pytest.raises(jinja2.exceptions.SecurityError):
    template.render([])


def test_named_templates_and_chat_template_jinja_are_read(tmp_path):
  (tmp_path / 'tokenizer_config.json').write_text(json.dumps({
      'eos_token': {'content': '</s>'},
      'chat_template': [{'name': 'default', 'template': 'D{{ eos_token }}'},
                        {'name': 'tool_use', 'template': 'T'}]}))
  assert chat.from_directory(str(tmp_path)).render([]) == 'D</s>'
  assert chat.from_directory(str(tmp_path), 'tool_use').render([]) == 'T'
  with pytest.raises(ConfigError, match='no chat template named'):
    chat.from_directory(str(tmp_path), 'rag')
  (tmp_path / chat.FILE).write_text('J')
  assert chat.from_directory(str(tmp_path)).render([]) == 'J'
