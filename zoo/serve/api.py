"""The OpenAI-compatible API's requests and answers: a request body read into prompts (token
ids) and per-choice sampling settings, or an `ApiError` (an HTTP status and one line); the
answer and stream-chunk objects built from what the engine produced.

/v1/completions takes `prompt` as a string, a list of strings, a list of token ids or a
list of those (each tokenized as the run trained: BOS + pieces); /v1/chat/completions
renders `messages` (and `tools`) with the checkpoint's chat template (zoo/data/chat.py) and
ends a turn at the template's end-of-turn id. Both take OpenAI's sampling fields and
vLLM's extensions (top_k, min_p, repetition_penalty, min_tokens, ignore_eos); a field the
server does not know is refused, not ignored.
"""

import dataclasses
import time
import uuid

from zoo.serve import scheduler as scheduler_lib

_COMMON = {'model', 'max_tokens', 'temperature', 'top_p', 'n', 'stream', 'stream_options',
           'stop', 'seed', 'frequency_penalty', 'presence_penalty', 'user', 'top_k', 'min_p',
           'repetition_penalty', 'min_tokens', 'ignore_eos', 'logprobs'}
COMPLETION_FIELDS = _COMMON | {'prompt'}
CHAT_FIELDS = _COMMON | {'messages', 'max_completion_tokens', 'tools'}
MAX_N = 16


class ApiError(Exception):
  """An answer other than 200: status, one line, the offending field (if any)."""

  def __init__(self, status, message, param=None, retry_after=None):
    super().__init__(message)
    self.status, self.message, self.param, self.retry_after = status, message, param, retry_after

  def body(self):
    kind = {400: 'invalid_request_error', 404: 'not_found_error', 429: 'rate_limit_error',
            503: 'service_unavailable'}.get(self.status, 'server_error')
    return {'error': {'message': self.message, 'type': kind, 'param': self.param,
                      'code': self.status}}


@dataclasses.dataclass(frozen=True)
class Context:
  """What reading a request needs from the server."""
  tokenizer: object
  template: object  # zoo.data.chat.Template
  model_name: str
  max_len: int
  vocab_size: int
  end_of_turn_id: int


@dataclasses.dataclass
class Request:
  prompts: list  # token id lists, one per prompt
  n: int  # choices per prompt
  samplings: list  # a scheduler.Sampling per choice (prompt-major)
  stop: tuple  # stop strings
  stream: bool
  include_usage: bool
  chat: bool
  created: int = dataclasses.field(default_factory=lambda: int(time.time()))
  id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:24])


def parse(body, ctx, chat):
  """A request body (parsed JSON) -> Request, or ApiError(400/404)."""
  if not isinstance(body, dict):
    raise ApiError(400, 'the request body must be a JSON object')
  fields = CHAT_FIELDS if chat else COMPLETION_FIELDS
  unknown = sorted(set(body) - fields)
  if unknown:
    raise ApiError(400, f'unknown field {unknown[0]!r}; this endpoint takes '
                   f'{", ".join(sorted(fields))}', unknown[0])
  model = body.get('model', ctx.model_name)
  if model != ctx.model_name:
    raise ApiError(404, f'model {model!r} does not exist; this server serves '
                   f'{ctx.model_name!r}', 'model')
  if body.get('logprobs') not in (None, False, 0):
    raise ApiError(400, 'logprobs are not returned by this server; leave logprobs out', 'logprobs')
  prompts = _chat_prompt(body, ctx) if chat else _prompts(body.get('prompt'), ctx)
  n = _number(body, 'n', int, 1, 1, MAX_N)
  longest = max(len(p) for p in prompts)
  if longest >= ctx.max_len:
    raise ApiError(400, f'the prompt has {longest} tokens; this server\'s context is '
                   f'serve.max_len={ctx.max_len}: shorten it', 'messages' if chat else 'prompt')
  room = ctx.max_len - longest
  default = room if chat else min(16, room)  # OpenAI's defaults: the context, and 16
  key = 'max_completion_tokens' if chat and 'max_completion_tokens' in body else 'max_tokens'
  max_tokens = _number(body, key, int, default, 1, None)
  if max_tokens > room:
    raise ApiError(400, f'{key}={max_tokens}: the prompt\'s {longest} tokens + {max_tokens} '
                   f'exceed the context (serve.max_len={ctx.max_len}); ask for at most {room}',
                   key)
  base = _sampling(body, max_tokens, ctx, chat)
  samplings = [dataclasses.replace(base, seed=(base.seed + i) % 2**32)
               for _ in prompts for i in range(n)]
  stream_options = body.get('stream_options') or {}
  if not isinstance(stream_options, dict) or set(stream_options) - {'include_usage'}:
    raise ApiError(400, 'stream_options takes {"include_usage": true|false}', 'stream_options')
  return Request(prompts, n, samplings, _stops(body.get('stop')), bool(body.get('stream')),
                 bool(stream_options.get('include_usage')), chat)


def _sampling(body, max_tokens, ctx, chat):
  seed = body.get('seed')
  if seed is not None and not isinstance(seed, int):
    raise ApiError(400, f'seed={seed!r} must be an integer', 'seed')
  stop_ids = (ctx.end_of_turn_id, ctx.tokenizer.eos_id) if chat else (ctx.tokenizer.eos_id,)
  if body.get('ignore_eos'):  # vLLM's: the output runs to max_tokens (load tests)
    stop_ids = ()
  return scheduler_lib.Sampling(
      max_tokens=max_tokens,
      temperature=_number(body, 'temperature', float, 1.0, 0.0, 2.0),
      top_k=max(_number(body, 'top_k', int, 0, -1, ctx.vocab_size), 0),
      top_p=_number(body, 'top_p', float, 1.0, 1e-9, 1.0),
      min_p=_number(body, 'min_p', float, 0.0, 0.0, 1.0),
      repetition_penalty=_number(body, 'repetition_penalty', float, 1.0, 1e-9, None),
      frequency_penalty=_number(body, 'frequency_penalty', float, 0.0, -2.0, 2.0),
      presence_penalty=_number(body, 'presence_penalty', float, 0.0, -2.0, 2.0),
      seed=(seed if seed is not None else uuid.uuid4().int) % 2**32,
      min_tokens=_number(body, 'min_tokens', int, 0, 0, max_tokens),
      stop_ids=tuple(dict.fromkeys(stop_ids)))


def _number(body, name, kind, default, low, high):
  value = body.get(name, default)
  if value is None:
    value = default
  ok = isinstance(value, (int, float)) and not isinstance(value, bool)
  if ok and kind is int:
    ok = float(value).is_integer()
  if not ok or value < low or (high is not None and value > high):
    bounds = f'in [{low}, {high}]' if high is not None else f'>= {low}'
    raise ApiError(400, f'{name}={value!r} must be {"an integer" if kind is int else "a number"} '
                   f'{bounds}', name)
  return kind(value)


def _prompts(prompt, ctx):
  """`prompt` -> token id lists (text: BOS + pieces, as the run trained)."""
  if isinstance(prompt, str):
    prompt = [prompt]
  if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
    prompt = [prompt]
  if not (isinstance(prompt, list) and prompt and all(
      isinstance(p, str) or (isinstance(p, list) and p and all(isinstance(t, int) for t in p))
      for p in prompt)):
    raise ApiError(400, 'prompt must be a string, a list of strings, a list of token ids or a '
                   'list of those, not empty', 'prompt')
  out = []
  for p in prompt:
    ids = list(ctx.tokenizer.document(ctx.tokenizer.encode([p])[0])[:-1]) if isinstance(
        p, str) else p
    bad = [t for t in ids if not 0 <= t < ctx.vocab_size]
    if bad:
      raise ApiError(400, f'prompt token id {bad[0]} is outside the vocabulary [0, '
                     f'{ctx.vocab_size})', 'prompt')
    out.append([int(t) for t in ids])
  return out


def _chat_prompt(body, ctx):
  messages = body.get('messages')
  if not (isinstance(messages, list) and messages and all(
      isinstance(m, dict) and isinstance(m.get('role'), str) for m in messages)):
    raise ApiError(400, 'messages must be a non-empty list of {"role", "content"} objects',
                   'messages')
  try:
    text = ctx.template.render(messages, body.get('tools'), add_generation_prompt=True)
  except Exception as e:  # pylint: disable=broad-except  (a template's raise_exception)
    raise ApiError(400, f'the chat template refused these messages: {e}', 'messages') from None
  ids, _ = ctx.tokenizer.encode_with_offsets(text)
  return [[int(t) for t in ids]]


def _stops(stop):
  if stop is None:
    return ()
  stops = [stop] if isinstance(stop, str) else stop
  if not (isinstance(stops, list) and all(isinstance(s, str) and s for s in stops)):
    raise ApiError(400, 'stop must be a string or a list of non-empty strings', 'stop')
  return tuple(stops)


# ---------------------------------------------------------------------------- answers

def usage(prompt_tokens, completion_tokens):
  return {'prompt_tokens': prompt_tokens, 'completion_tokens': completion_tokens,
          'total_tokens': prompt_tokens + completion_tokens}


def answer(request, ctx, choices, usage_row):
  """The whole answer: choices [(text, finish_reason)] in order."""
  if request.chat:
    rows = [{'index': i, 'message': {'role': 'assistant', 'content': text},
             'finish_reason': reason} for i, (text, reason) in enumerate(choices)]
  else:
    rows = [{'index': i, 'text': text, 'logprobs': None, 'finish_reason': reason}
            for i, (text, reason) in enumerate(choices)]
  return {**_head(request, ctx, chunk=False), 'choices': rows, 'usage': usage_row}


def chunk(request, ctx, index, text=None, finish_reason=None, first=False):
  """One stream event's object for choice `index`."""
  if request.chat:
    delta = {'role': 'assistant', 'content': ''} if first else (
        {} if text is None else {'content': text})
    row = {'index': index, 'delta': delta, 'finish_reason': finish_reason}
  else:
    row = {'index': index, 'text': text or '', 'logprobs': None, 'finish_reason': finish_reason}
  return {**_head(request, ctx, chunk=True), 'choices': [row]}


def usage_chunk(request, ctx, usage_row):
  return {**_head(request, ctx, chunk=True), 'choices': [], 'usage': usage_row}


def _head(request, ctx, chunk):
  kind = ('chat.completion' + ('.chunk' if chunk else '') if request.chat
          else 'text_completion')
  prefix = 'chatcmpl-' if request.chat else 'cmpl-'
  return {'id': prefix + request.id, 'object': kind, 'created': request.created,
          'model': ctx.model_name}
