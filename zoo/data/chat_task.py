"""Conversations as tasks (zoo/data/task.py): instruction tuning (data.task.kind='chat') and
preference pairs (data.task.kind='preference'), each rendered with the run's chat template
(zoo/data/chat.py) and tokenized once, before anything compiles.

  chat        messages: [{"role", "content", ...}, ...] with at least one assistant turn;
              the loss reads every assistant turn's tokens (the template's mask)
  preference  prompt (a text: one user turn; or messages), chosen and rejected (a text: one
              assistant turn; or a list of assistant messages); the completions differ
  prompts     prompt (as preference's), rendered with the generation prompt; the rest of
              the line is the example the reward reads (train.grpo.reward)
A conversation longer than data.seq_len + 1 tokens (a prompt: with its new tokens) is an
error naming its line, or with data.task.too_long='skip' it is left out and counted.
"""

import jinja2
import numpy as np

from zoo.data import chat
from zoo.errors import ConfigError

KINDS = ('chat', 'preference', 'prompts')


def check(record, kind, where):
  """A ConfigError naming `where` (file:line) unless the record is a conversation (chat)
  or a pair of different completions of a prompt (preference)."""
  if kind == 'chat':
    _check_messages(record.get('messages'), 'messages', where)
    if not any(m['role'] == 'assistant' for m in record['messages']):
      raise ConfigError(f'{where}: the conversation has no assistant turn, so nothing to '
                        'learn from; add the assistant\'s reply or drop the line')
    return
  fields = ('prompt',) if kind == 'prompts' else ('prompt', 'chosen', 'rejected')
  for field in fields:
    if field not in record:
      raise ConfigError(f'{where}: no field {field!r}; data.task.kind={kind!r} reads '
                        f'{", ".join(fields)}')
    if not isinstance(record[field], str):
      _check_messages(record[field], field, where)
  if kind == 'preference' and _completion(record['chosen']) == _completion(record['rejected']):
    raise ConfigError(f'{where}: chosen and rejected are the same completion, which teaches '
                      'no preference; drop the line or fix one of them')


def _check_messages(messages, field, where):
  if not (isinstance(messages, list) and messages and all(
      isinstance(m, dict) and isinstance(m.get('role'), str) for m in messages)):
    raise ConfigError(f'{where}: field {field!r} must be a non-empty list of messages, '
                      'each {"role": ..., "content": ...}')


def _prompt(prompt):
  return [{'role': 'user', 'content': prompt}] if isinstance(prompt, str) else prompt


def _completion(completion):
  return ([{'role': 'assistant', 'content': completion}] if isinstance(completion, str)
          else completion)


def texts(record, kind):
  """The record's text (a tokenizer trained for the task sees it)."""
  if kind == 'chat':
    messages = record['messages']
  elif kind == 'prompts':
    messages = _prompt(record['prompt'])
  else:
    messages = [*_prompt(record['prompt']), *_completion(record['chosen']),
                *_completion(record['rejected'])]
  return [m['content'] for m in messages if isinstance(m.get('content'), str)]


def _encoded(template, tokenizer, messages, where, completion_turns=0):
  """(ids, mask) of a conversation (chat.encode), a refusal named by its line;
  completion_turns > 0: only the last that many assistant spans count (a preference pair's
  completion, not its prompt's turns)."""
  try:
    return chat.encode(template, tokenizer, messages, last_turns=completion_turns)
  except jinja2.TemplateError as e:
    raise ConfigError(f'{where}: the chat template refuses this conversation ({e}); fix the '
                      'line (roles, their order) or pick another data.task.template') from None
  except ConfigError as e:
    raise ConfigError(f'{where}: {e}') from None


def _rendered_prompt(template, tokenizer, prompt, where):
  try:
    text = template.render(_prompt(prompt), add_generation_prompt=True)
  except jinja2.TemplateError as e:
    raise ConfigError(f'{where}: the chat template refuses this prompt ({e}); fix the line '
                      'or pick another data.task.template') from None
  return np.asarray(tokenizer.encode_with_offsets(text)[0], np.int32)


def tokenized(records, kind, template, tokenizer, data_config, path, new_tokens=0):
  """-> (examples, how many were too long and skipped): chat {'ids', 'mask'}; preference
  {'chosen_ids', 'chosen_mask', 'rejected_ids', 'rejected_mask'}; prompts {'prompt_ids',
  'index': the record's place in `records`, 'line'} (new_tokens: the room each leaves)."""
  examples, skipped = [], 0
  room = data_config.seq_len + 1  # a row's inputs and targets are its ids shifted by one
  for index, (number, record) in enumerate(records):
    where = f'{path}:{number}'
    if kind == 'prompts':
      ids = _rendered_prompt(template, tokenizer, record['prompt'], where)
      if len(ids) + new_tokens > room:
        if data_config.task.too_long == 'skip':
          skipped += 1
          continue
        raise ConfigError(f'{where}: the prompt is {len(ids)} tokens, which with '
                          f'train.grpo.max_new_tokens={new_tokens} is over data.seq_len='
                          f'{data_config.seq_len} + 1; raise data.seq_len, shorten it, or '
                          "set data.task.too_long='skip'")
      examples.append({'prompt_ids': ids, 'index': np.int32(index), 'line': np.int32(number)})
      continue
    if kind == 'chat':
      ids, mask = _encoded(template, tokenizer, record['messages'], where)
      example = {'ids': ids, 'mask': mask}
    else:
      prompt = _prompt(record['prompt'])
      example = {}
      for side in ('chosen', 'rejected'):
        completion = _completion(record[side])
        turns = sum(m['role'] == 'assistant' for m in completion)
        ids, mask = _encoded(template, tokenizer, [*prompt, *completion], where, turns)
        example.update({f'{side}_ids': ids, f'{side}_mask': mask})
    longest = max(len(v) for k, v in example.items() if k.endswith('ids'))
    if not any(np.any(v[1:]) for k, v in example.items() if k.endswith('mask')):
      raise ConfigError(f'{where}: the template marks none of the assistant\'s tokens; check '
                        'the template\'s generation blocks (data.task.template)')
    if longest > room:
      if data_config.task.too_long == 'skip':
        skipped += 1
        continue
      raise ConfigError(f'{where}: the conversation is {longest} tokens, over data.seq_len='
                        f'{data_config.seq_len} + 1; raise data.seq_len, shorten it, or set '
                        "data.task.too_long='skip'")
    examples.append(example)
  return examples, skipped
