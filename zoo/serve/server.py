"""The HTTP server (aiohttp): the OpenAI-compatible endpoints over one engine.

    POST /v1/completions, /v1/chat/completions   (api.py; "stream": true for server-sent
                                                  events, ended by `data: [DONE]`)
    GET  /v1/models, /health, /metrics           (Prometheus text, metrics.py)

A request's choices are sequences in the engine; their tokens come back through one queue
per request and become text (text.py). Bad input is answered with a 4xx and a one-line JSON
error before anything is queued; a full queue with 429 and Retry-After. A client that goes
away (a stream's write fails, or the request is dropped) cancels its sequences, whose pages
are free after the engine's next step. A failed engine step answers its requests 500.
Every answer other than 200 is logged in one line.
"""

import asyncio
import json
import threading
import time

from aiohttp import web

from zoo.serve import api
from zoo.serve import scheduler as scheduler_lib
from zoo.serve import text as text_lib


class _Choice:
  def __init__(self, seq, text):
    self.seq, self.text = seq, text
    self.reason, self.first_at, self.last_at = None, None, None


def make_app(engine, ctx, metrics):
  """The aiohttp application serving `engine`."""
  async def health(_):
    alive = engine.alive
    return web.json_response({'status': 'ok' if alive else 'engine stopped'},
                             status=200 if alive else 503)

  async def models(_):
    return web.json_response({'object': 'list', 'data': [
        {'id': ctx.model_name, 'object': 'model', 'owned_by': 'zoo',
         'max_model_len': ctx.max_len}]})

  async def prometheus(_):
    return web.Response(body=metrics.text(), content_type='text/plain')

  handler = _Handler(engine, ctx, metrics)

  async def completions(http):
    return await handler(http, chat=False)

  async def chat(http):
    return await handler(http, chat=True)
  app = web.Application(client_max_size=16 * 2**20)
  app.add_routes([web.get('/health', health), web.get('/v1/models', models),
                  web.get('/metrics', prometheus), web.post('/v1/completions', completions),
                  web.post('/v1/chat/completions', chat)])
  return app


class _Handler:
  def __init__(self, engine, ctx, metrics):
    self.engine, self.ctx, self.metrics = engine, ctx, metrics

  async def __call__(self, http, chat):
    arrived = time.monotonic()
    try:
      try:
        body = await http.json()
      except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise api.ApiError(400, f'malformed JSON: {e}') from None
      request = api.parse(body, self.ctx, chat)
      choices, queue = self._submit(request)
    except api.ApiError as e:
      return self._refuse(http, e)
    try:
      if request.stream:
        return await self._stream(http, request, choices, queue, arrived)
      return await self._whole(http, request, choices, queue, arrived)
    except api.ApiError as e:
      return self._refuse(http, e)
    except asyncio.CancelledError:  # the client went away (aiohttp's handler cancellation)
      _log(http, 499, f'the client went away; its {len(choices)} sequences are cancelled')
      raise
    finally:
      for choice in choices:
        if choice.seq.finish_reason is None:
          self.engine.cancel(choice.seq)

  def _submit(self, request):
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()
    choices = []
    for i, sampling in enumerate(request.samplings):
      prompt = request.prompts[i // request.n]
      seq = scheduler_lib.Sequence(list(prompt), sampling)
      listener = (lambda s, token, finished, i=i:
                  loop.call_soon_threadsafe(queue.put_nowait, (i, token, finished)))
      if not self.engine.submit(seq, listener):
        for choice in choices:
          self.engine.cancel(choice.seq)
        raise api.ApiError(429, f'the queue is full (serve.max_queue='
                           f'{self.engine.settings.max_queue} requests wait); retry shortly',
                           retry_after=1)
      choices.append(_Choice(seq, text_lib.Text(self.ctx.tokenizer, prompt, request.stop)))
    for prompt in request.prompts:
      self.metrics.prompt_tokens.inc(len(prompt))
    return choices, queue

  async def _events(self, choices, queue, arrived):
    """-> (choice index, text to send, finish reason or None) as tokens arrive."""
    open_choices = len(choices)
    while open_choices:
      i, token, finished = await queue.get()
      choice = choices[i]
      if choice.reason is not None:
        continue  # ended by a stop string; the engine's cancellation follows
      if token is not None:
        self._timing(choice, arrived)
        delta = choice.text.add(token)
        if choice.text.stopped is not None:
          self.engine.cancel(choice.seq)
          finished = True
        yield i, delta, None
      if finished:
        choice.reason = 'stop' if choice.text.stopped is not None else choice.seq.finish_reason
        open_choices -= 1
        if choice.reason == 'error':
          raise api.ApiError(500, f'the engine failed on this request ({choice.seq.error}); '
                             'it has restarted, retry')
        if choice.first_at is not None and len(choice.seq.output) > 1:
          self.metrics.tpot.observe((choice.last_at - choice.first_at) /
                                    (len(choice.seq.output) - 1))
        yield i, choice.text.rest(), choice.reason

  def _timing(self, choice, arrived):
    now = time.monotonic()
    if choice.first_at is None:
      choice.first_at = now
      self.metrics.ttft.observe(now - arrived)
    choice.last_at = now
    self.metrics.token(now)

  async def _whole(self, http, request, choices, queue, arrived):
    async for _ in self._events(choices, queue, arrived):
      pass
    rows = [(c.text.text, c.reason) for c in choices]
    self.metrics.requests.labels('200').inc()
    return web.json_response(api.answer(request, self.ctx, rows, self._usage(request, choices)))

  async def _stream(self, http, request, choices, queue, arrived):
    response = web.StreamResponse(headers={'Content-Type': 'text/event-stream',
                                           'Cache-Control': 'no-cache'})
    await response.prepare(http)
    send = lambda obj: response.write(f'data: {json.dumps(obj)}\n\n'.encode())
    try:
      if request.chat:
        for i in range(len(choices)):
          await send(api.chunk(request, self.ctx, i, first=True))
      try:
        async for i, delta, reason in self._events(choices, queue, arrived):
          if delta or reason:
            await send(api.chunk(request, self.ctx, i, delta or None, reason))
      except api.ApiError as e:
        _log(http, e.status, e.message)
        await send(e.body())
        return response
      if request.include_usage:
        await send(api.usage_chunk(request, self.ctx, self._usage(request, choices)))
      await response.write(b'data: [DONE]\n\n')
    except ConnectionError as e:
      _log(http, 499, f'the client went away mid-stream ({type(e).__name__}); its '
           f'{len(choices)} sequences are cancelled')
      return response
    self.metrics.requests.labels('200').inc()
    return response

  def _usage(self, request, choices):
    return api.usage(sum(map(len, request.prompts)), sum(len(c.seq.output) for c in choices))

  def _refuse(self, http, error):
    self.metrics.requests.labels(str(error.status)).inc()
    _log(http, error.status, error.message)
    headers = {'Retry-After': str(error.retry_after)} if error.retry_after else None
    return web.json_response(error.body(), status=error.status, headers=headers)


def _log(http, status, message):
  print(f'serve: {status} {http.method} {http.path}: {message}', flush=True)


class Background:
  """The app served on host:port (0 = a free port) from a thread of its own (tests, the
  load benchmark); `url` once started."""

  def __init__(self, app, host='127.0.0.1', port=0):
    self.app, self.host, self.port = app, host, port
    self.loop = asyncio.new_event_loop()
    self._ready = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True, name='zoo-serve-http')

  def __enter__(self):
    self._thread.start()
    self._ready.wait()
    return self

  def __exit__(self, *_):
    asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result()
    self.loop.call_soon_threadsafe(self.loop.stop)
    self._thread.join()

  @property
  def url(self):
    return f'http://{self.host}:{self.port}'

  def _run(self):
    asyncio.set_event_loop(self.loop)
    self._runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
    self.loop.run_until_complete(self._runner.setup())
    site = web.TCPSite(self._runner, self.host, self.port)
    self.loop.run_until_complete(site.start())
    self.port = site._server.sockets[0].getsockname()[1]  # pylint: disable=protected-access
    self._ready.set()
    self.loop.run_forever()
