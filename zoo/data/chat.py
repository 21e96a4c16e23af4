"""Chat templates: a conversation ([{"role", "content"}, ...], tools, a generation prompt)
rendered to text with the Jinja template its checkpoint ships, exactly as transformers'
`apply_chat_template` renders it, and tokenized with the mask of the assistant's tokens.

The environment is transformers' contract for templates (docs/post.md, "Chat templates"):
Jinja's immutable sandbox with trim_blocks and lstrip_blocks, loop controls,
`raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII and takes indent,
separators and sort_keys,
the tokenizer's special tokens (bos_token, eos_token, ...) as variables, and the
`{% generation %}` tag, which marks the assistant's text.

Which tokens are the assistant's comes from the rendering: the template's generation blocks
where it has them, else the conversation rendered prefix by prefix (the text an assistant
turn adds after the generation prompt of the turns before it). A token is the assistant's
when its characters overlap such a span.

The zoo's own tokenizers get `DEFAULT_TEMPLATE` (ChatML's turns), whose markers
(`TURN_MARKERS`) a tokenizer trained for a chat task holds as whole pieces.
"""

import dataclasses
import datetime
import functools
import json
import os
import re

import jinja2
import jinja2.ext
import jinja2.sandbox
import numpy as np

from zoo import storage
from zoo.errors import ConfigError

TURN_MARKERS = ('<|im_start|>', '<|im_end|>')
DEFAULT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
FILE = 'chat_template.jinja'  # where an export writes its template (transformers reads it)
_GENERATION_TAG = re.compile(r'\{%-?\s*generation\s*-?%\}')
_SPECIAL_NAMES = ('bos_token', 'eos_token', 'unk_token', 'pad_token', 'sep_token',
                  'cls_token', 'mask_token')


class _Generation(jinja2.ext.Extension):
  """`{% generation %}...{% endgeneration %}`: renders its body, and while a render tracks
  spans (`_Tracking`), records where in the text the body landed."""
  tags = {'generation'}

  def parse(self, parser):
    lineno = next(parser.stream).lineno
    body = parser.parse_statements(('name:endgeneration',), drop_needle=True)
    return jinja2.nodes.CallBlock(self.call_method('_mark'), [], [], body).set_lineno(lineno)

  def _mark(self, caller):
    text = caller()
    tracking = getattr(self.environment, 'zoo_tracking', None)
    if tracking is not None:
      start = sum(map(len, tracking.blocks))
      tracking.spans.append((start, start + len(text)))
    return text


@dataclasses.dataclass
class _Tracking:
  blocks: list
  spans: list


def _raise_exception(message):
  raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
  return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                    sort_keys=sort_keys)


def _strftime_now(fmt):
  return datetime.datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=32)
def _compiled(source):
  env = jinja2.sandbox.ImmutableSandboxedEnvironment(
      trim_blocks=True, lstrip_blocks=True,
      extensions=[_Generation, jinja2.ext.loopcontrols])
  env.filters['tojson'] = _tojson
  env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
  return env.from_string(source)


@dataclasses.dataclass(frozen=True)
class Template:
  """A chat template and the special tokens it is rendered with (as text)."""
  source: str
  specials: tuple = ()  # ((name, text), ...): bos_token, eos_token, ...

  @property
  def marks_generation(self):
    return bool(_GENERATION_TAG.search(self.source))

  def render(self, messages, tools=None, add_generation_prompt=False, **kwargs):
    """The conversation as text; a template's raise_exception is a TemplateError."""
    return self._render(messages, tools, add_generation_prompt, kwargs, None)

  def _render(self, messages, tools, add_generation_prompt, kwargs, tracking):
    compiled = _compiled(self.source)
    context = {**dict(self.specials), **kwargs, 'messages': _messages(messages),
               'tools': tools, 'documents': None,
               'add_generation_prompt': add_generation_prompt}
    compiled.environment.zoo_tracking = tracking
    try:
      if tracking is None:
        return compiled.render(**context)
      for block in compiled.generate(**context):
        tracking.blocks.append(block)
      return ''.join(tracking.blocks)
    finally:
      compiled.environment.zoo_tracking = None

  def assistant_spans(self, messages, tools=None, **kwargs):
    """-> (text, [(start, end)] character spans of the assistant's text): the generation
    blocks' where the template has them, else each assistant turn's text after the
    generation prompt of the turns before it."""
    if self.marks_generation:
      tracking = _Tracking([], [])
      text = self._render(messages, tools, False, kwargs, tracking)
      return text, [s for s in tracking.spans if s[1] > s[0]]
    text = self.render(messages, tools, **kwargs)
    spans = []
    for i, message in enumerate(messages):
      if message.get('role') != 'assistant':
        continue
      before = self.render(messages[:i], tools, add_generation_prompt=True, **kwargs)
      through = self.render(messages[:i + 1], tools, **kwargs)
      if not (through.startswith(before) and text.startswith(through)):
        raise ConfigError(
            f'this chat template does not render conversations prefix by prefix (turn {i} '
            'renders differently once later turns follow), so the assistant\'s tokens cannot '
            'be found from it; use a template with {% generation %} blocks '
            '(data.task.template)')
      spans.append((len(before), len(through)))
    return text, spans


REASONING_FIELDS = ('reasoning_content', 'thinking', 'reasoning')


def _messages(messages):
  """Each message without its None fields, its reasoning under every name templates read
  (`reasoning_content`, gpt-oss's `thinking`), as transformers passes them."""
  out = []
  for message in messages:
    message = {k: v for k, v in message.items() if v is not None}
    reasoning = next((message[k] for k in REASONING_FIELDS if k in message), None)
    if reasoning is not None:
      message = {'thinking': reasoning, **message, 'reasoning_content': reasoning}
    out.append(message)
  return out


def _token_text(value):
  """A tokenizer_config.json special token: a string or an AddedToken's dict."""
  return value.get('content') if isinstance(value, dict) else value


def from_directory(path, name=None):
  """The template a Hugging Face checkpoint directory ships: chat_template.jinja, else
  tokenizer_config.json's chat_template (a string, or named templates: `name`, else
  'default'); its special tokens from tokenizer_config.json. None when it has none."""
  config_path = storage.join(path, 'tokenizer_config.json')
  config = (json.loads(storage.read_text(config_path)) if storage.isfile(config_path)
            else {})
  specials = tuple((k, _token_text(config[k])) for k in _SPECIAL_NAMES
                   if isinstance(_token_text(config.get(k)), str))
  jinja_path = storage.join(path, FILE)
  if storage.isfile(jinja_path):
    return Template(storage.read_text(jinja_path), specials)
  source = config.get('chat_template')
  if isinstance(source, list):
    named = {t['name']: t['template'] for t in source}
    if (name or 'default') not in named:
      raise ConfigError(f'{config_path}: no chat template named {name or "default"!r} '
                        f'(it has {", ".join(sorted(named))}); name one of them')
    source = named[name or 'default']
  return Template(source, specials) if isinstance(source, str) else None


def default(tokenizer):
  """ChatML turns for the zoo's own tokenizers, with the tokenizer's BOS and EOS."""
  text = lambda i: None if i is None else tokenizer.decode([i])
  specials = (('bos_token', text(tokenizer.bos_id)), ('eos_token', text(tokenizer.eos_id)))
  return Template(DEFAULT_TEMPLATE, tuple((k, v) for k, v in specials if v is not None))


def for_run(template_setting, tokenizer_path, tokenizer):
  """data.task.template: a .jinja file or a checkpoint directory; '' = the template beside
  the run's tokenizer (a pretrained one's directory), else DEFAULT_TEMPLATE."""
  setting = template_setting
  if setting.endswith('.jinja'):
    if not storage.isfile(setting):
      raise ConfigError(f'data.task.template={setting}: no such file; pass a .jinja file or '
                        'a checkpoint directory with tokenizer_config.json')
    return Template(storage.read_text(setting), default(tokenizer).specials)
  directory = setting or (os.path.dirname(str(tokenizer_path)) if tokenizer_path else '')
  found = from_directory(directory) if directory else None
  if found is None and setting:
    raise ConfigError(f'data.task.template={setting}: no chat_template.jinja there and no '
                      'chat_template in its tokenizer_config.json')
  return found or default(tokenizer)


def end_of_turn_id(template, tokenizer):
  """The id a generated assistant turn ends with: ChatML's end marker under the default
  template, else the template's eos_token, where the tokenizer holds it as one piece; else
  the tokenizer's EOS."""
  candidates = [TURN_MARKERS[1]] if template.source == DEFAULT_TEMPLATE else []
  candidates += [text for name, text in template.specials if name == 'eos_token']
  found = [tokenizer.piece_id(text) for text in candidates]
  return next((i for i in found if i is not None), tokenizer.eos_id)


def encode(template, tokenizer, messages, tools=None, last_turns=0, **kwargs):
  """-> (ids int32 [T], assistant mask float32 [T]) of the rendered conversation, the text
  tokenized as a whole (no special tokens added: the template writes them). last_turns >
  0: only the last that many assistant spans are masked in (a completion after a prompt
  that has assistant turns of its own)."""
  text, spans = template.assistant_spans(messages, tools, **kwargs)
  if last_turns:
    spans = spans[-last_turns:]
  ids, offsets = tokenizer.encode_with_offsets(text)
  return np.asarray(ids, np.int32), overlap_mask(offsets, spans)


def overlap_mask(offsets, spans):
  """1 for each token whose [start, end) characters overlap one of the sorted spans."""
  mask, j = np.zeros(len(offsets), np.float32), 0
  for i, (start, end) in enumerate(offsets):
    while j < len(spans) and start >= spans[j][1]:
      j += 1
    if j == len(spans):
      break
    if end > spans[j][0]:
      mask[i] = 1.0
  return mask
