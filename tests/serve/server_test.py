"""python -m zoo.serve's server on a trained smoke run, through real clients: the `openai`
package (completions and chat, streamed and not, n choices with a seed) and httpx; its
answers equal zoo.infer.generate's greedy tokens; bad input gets a 4xx with one line of
JSON; a storm of garbage, disconnecting and queue-overflowing clients beside good ones
leaves every good answer right and every page free; a failed engine step answers 500 to
the requests in it and the queued ones still complete."""

import asyncio
import subprocess
import sys

import httpx
import jax
import numpy as np
import openai
import pytest

from tests import helpers
from zoo.infer import generate
from zoo.serve import load
from zoo.serve import metrics as metrics_lib
from zoo.serve import server
from zoo.serve import text as text_lib
from zoo.train import run_config

SERVE = ['serve.max_len=96', 'serve.num_pages=40', 'serve.page_size=8', 'serve.max_seqs=4',
         'serve.max_queue=8', 'serve.prefill_chunk=32']


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('served')
  result = subprocess.run(
      [sys.executable, '-m', 'zoo.launch', f'--config={helpers.config_file("gpt_shakespeare")}',
       f'--workdir={workdir}', '--config.train.steps=20', '--config.train.eval_every=1000'],
      env=helpers.cpu_env(), capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return workdir


@pytest.fixture(scope='module')
def served(workdir):
  served = load.from_workdir(run_config.resolve(str(workdir), None, SERVE), str(workdir))
  served.engine.start()
  app = server.make_app(served.engine, served.context, metrics_lib.Metrics(served.engine))
  with server.Background(app) as background:
    yield served, background.url
  served.engine.stop()


def _greedy_text(served, prompt_ids, max_tokens, stop_ids):
  """What zoo.infer.generate decodes greedily for the prompt alone, as text up to a stop id."""
  engine = served.engine
  model, layout = generate.decoding_model(engine.model)
  fn = jax.jit(generate.make(model, max_tokens, {'temperature': 0.0}, eos_id=stop_ids[0],
                             pad_id=0))
  ids = np.asarray([prompt_ids], np.int32)
  tokens = list(np.asarray(fn(engine.variables, ids, np.ones_like(ids), jax.random.PRNGKey(0)))[0])
  tokens = [t for t in tokens[:next((i for i, t in enumerate(tokens) if t in stop_ids),
                                    len(tokens))]]
  text = text_lib.Text(served.context.tokenizer, prompt_ids, ())
  for t in tokens:
    text.add(int(t))
  return text.text, len(tokens)


def _prompt_ids(served, text):
  tokenizer = served.context.tokenizer
  return [int(t) for t in tokenizer.document(tokenizer.encode([text])[0])[:-1]]


def test_the_openai_client_gets_generates_text_streamed_and_not(served):
  served, url = served
  client = openai.OpenAI(base_url=f'{url}/v1', api_key='unused', max_retries=0)
  name = served.context.model_name
  prompt_ids = _prompt_ids(served, 'ROMEO:')
  want, count = _greedy_text(served, prompt_ids, 12, (served.context.tokenizer.eos_id,))
  whole = client.completions.create(model=name, prompt='ROMEO:', max_tokens=12, temperature=0)
  assert whole.choices[0].text == want
  assert whole.usage.completion_tokens == count and whole.usage.prompt_tokens == len(prompt_ids)
  streamed = client.completions.create(model=name, prompt='ROMEO:', max_tokens=12,
                                       temperature=0, stream=True)
  assert ''.join(c.choices[0].text for c in streamed) == want
  messages = [{'role': 'user', 'content': 'Speak, friend.'}]
  chat = client.chat.completions.create(model=name, messages=messages, max_tokens=10,
                                        temperature=0)
  chunks = list(client.chat.completions.create(model=name, messages=messages, max_tokens=10,
                                               temperature=0, stream=True,
                                               stream_options={'include_usage': True}))
  assert ''.join(c.choices[0].delta.content or '' for c in chunks if c.choices) == \
      chat.choices[0].message.content
  assert chunks[-1].usage.completion_tokens == chat.usage.completion_tokens
  sampled = [client.completions.create(model=name, prompt='KING:', max_tokens=8, n=3,
                                       temperature=1.0, top_p=0.9, seed=5) for _ in range(2)]
  texts = [[c.text for c in s.choices] for s in sampled]
  assert texts[0] == texts[1] and len(set(texts[0])) > 1  # seeded; each choice its own draw


def test_stop_strings_cut_the_text_and_health_models_and_metrics_answer(served):
  served, url = served
  want, _ = _greedy_text(served, _prompt_ids(served, 'ROMEO:'), 12,
                         (served.context.tokenizer.eos_id,))
  stop = want.strip()[2:4]
  body = {'prompt': 'ROMEO:', 'max_tokens': 12, 'temperature': 0, 'stop': [stop]}
  with httpx.Client(base_url=url, timeout=60) as client:
    answer = client.post('/v1/completions', json=body).json()
    assert answer['choices'][0]['text'] == want[:want.find(stop)]
    assert answer['choices'][0]['finish_reason'] == 'stop'
    assert client.get('/health').json() == {'status': 'ok'}
    assert client.get('/v1/models').json()['data'][0]['id'] == served.context.model_name
    metrics = client.get('/metrics').text
  for name in ('zoo_serve_queue_depth', 'zoo_serve_requests_waiting',
               'zoo_serve_requests_running', 'zoo_serve_pages_used',
               'zoo_serve_pages_free', 'zoo_serve_time_to_first_token_seconds_count',
               'zoo_serve_time_per_output_token_seconds_count', 'zoo_serve_tokens_per_second'):
    assert f'\n{name} ' in metrics, name


@pytest.mark.parametrize('body, status, words', [
    (b'{"prompt": "x"', 400, 'malformed JSON'),
    ({'prompt': 'x', 'max_tokens': 4, 'best_of': 2}, 400, "unknown field 'best_of'"),
    ({'prompt': 'x', 'model': 'gpt-9'}, 404, "model 'gpt-9' does not exist"),
    ({'prompt': 'x ' * 200}, 400, 'serve.max_len=96'),
    ({'prompt': 'x', 'max_tokens': 500}, 400, 'max_tokens=500'),
    ({'prompt': 'x', 'temperature': -0.5}, 400, 'temperature=-0.5 must be'),
    ({'prompt': [70000]}, 400, 'outside the vocabulary'),
    ({'messages': []}, 400, 'messages must be'),
], ids=['json', 'field', 'model', 'prompt_long', 'max_tokens', 'temperature', 'token', 'chat'])
def test_bad_input_gets_a_4xx_and_one_line_of_json(served, body, status, words):
  _, url = served
  chat = isinstance(body, dict) and 'messages' in body
  path = '/v1/chat/completions' if chat else '/v1/completions'
  send = dict(content=body) if isinstance(body, bytes) else dict(json=body)
  response = httpx.post(url + path, timeout=60, **send)
  assert response.status_code == status
  message = response.json()['error']['message']
  assert words in message and '\n' not in message


async def _good(client, prompt):
  """A good client: asks, and on 429 waits Retry-After and asks again."""
  body = {'prompt': prompt, 'max_tokens': 12, 'temperature': 0}
  while True:
    response = await client.post('/v1/completions', json=body)
    if response.status_code != 429:
      return response
    await asyncio.sleep(float(response.headers['Retry-After']))


async def _disconnecting(client):
  """A client that waits its turn (as _good), then goes away after the first event."""
  while True:
    async with client.stream('POST', '/v1/completions', json={
        'prompt': 'MENENIUS:', 'max_tokens': 80, 'temperature': 0, 'stream': True}) as response:
      if response.status_code != 429:
        async for _ in response.aiter_bytes():
          return
    await asyncio.sleep(float(response.headers['Retry-After']))


async def _storm(url, prompts):
  async with httpx.AsyncClient(base_url=url, timeout=120) as client:
    good = [_good(client, p) for p in prompts]
    garbage = [client.post('/v1/completions', content=b'\x00{nope') for _ in range(6)]
    gone = [_disconnecting(client) for _ in range(6)]
    burst = [client.post('/v1/completions', json={'prompt': 'BURST', 'max_tokens': 30})
             for _ in range(16)]
    results = await asyncio.gather(*good, *garbage, *gone, *burst)
  n = len(prompts)
  return results[:n], results[n:n + 6], results[n + 12:]


def test_a_storm_of_bad_clients_leaves_good_answers_right_and_every_page_free(served):
  served, url = served
  engine = served.engine
  free_before, cancelled = engine.scheduler.pool.available, engine.cancelled
  prompts = ['ROMEO:', 'JULIET:', 'KING HENRY:', 'First Citizen:', 'MENENIUS:', 'Clown:'] * 2
  good, garbage, burst = asyncio.run(_storm(url, prompts))
  eos = (served.context.tokenizer.eos_id,)
  for prompt, response in zip(prompts, good):
    assert response.status_code == 200
    assert response.json()['choices'][0]['text'] == _greedy_text(
        served, _prompt_ids(served, prompt), 12, eos)[0]
  assert {r.status_code for r in garbage} == {400}
  assert 429 in {r.status_code for r in burst}  # the queue held 8
  assert all('Retry-After' in r.headers for r in burst if r.status_code == 429)
  for _ in range(600):  # the engine ends what the storm left
    if not (engine.running or engine.waiting):
      break
    asyncio.run(asyncio.sleep(0.05))
  assert engine.scheduler.pool.available == free_before
  assert engine.cancelled >= cancelled + 6  # the clients that went away


def test_a_failed_step_answers_500_and_the_queued_requests_still_complete(served, monkeypatch):
  served, url = served
  engine = served.engine
  real, calls = engine._step, []  # pylint: disable=protected-access

  def failing(*args):
    calls.append(1)
    if len(calls) == 3:
      raise RuntimeError('injected step failure')
    return real(*args)
  monkeypatch.setattr(engine, '_step', failing)

  async def ask_all():
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
      return await asyncio.gather(*[client.post('/v1/completions', json={
          'prompt': f'CITIZEN {i}:', 'max_tokens': 6, 'temperature': 0}) for i in range(8)])
  restarts = engine.restarts
  responses = asyncio.run(ask_all())
  codes = [r.status_code for r in responses]
  assert 500 in codes and 200 in codes and set(codes) == {200, 500}
  assert engine.restarts == restarts + 1
  assert all('injected step failure' in r.json()['error']['message']
             for r in responses if r.status_code == 500)
