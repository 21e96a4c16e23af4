"""A load generator against zoo.serve on localhost: Poisson arrivals, prompt and output
lengths drawn uniformly from ranges, every request streamed; continuous batching against
the same engine run as static batches (serve.batching='static') at the same pages.

    python benchmarks/serve_load.py --workdir=runs/gpt_shakespeare
    python benchmarks/serve_load.py --workdir=W --requests=96 --rate=40 \\
        --prompt_len=16,64 --output_len=16,128 --overrides=serve.num_pages=129

The server is `python -m zoo.serve` in a process of its own (the run's config with the
overrides) on a free port; a warm-up of the same load first compiles its steps. Per mode
it prints requests/s, output tokens/s, time to first token and time per output token (p50,
p99, in ms), the most pages held at once (its /metrics, polled) and what contiguous caches
of serve.max_len would take for the most sequences running at once.
"""

import argparse
import asyncio
import re
import socket
import subprocess
import sys
import time

import httpx
import jax
import numpy as np

from zoo.serve import load
from zoo.train import run_config
from zoo.train import runtime


def _requests(args, vocab, bos, seed):
  """[(arrival s, prompt ids, output tokens)] of the load."""
  rng = np.random.default_rng(seed)
  lo, hi = map(int, args.prompt_len.split(','))
  out_lo, out_hi = map(int, args.output_len.split(','))
  arrivals = np.cumsum(rng.exponential(1.0 / args.rate, args.requests))
  return [(float(t), [bos] + [int(i) for i in rng.integers(4, vocab, rng.integers(lo, hi + 1) - 1)],
           int(rng.integers(out_lo, out_hi + 1))) for t in arrivals]


async def _one(client, start, arrival, prompt, max_tokens, timings):
  await asyncio.sleep(max(0.0, start + arrival - time.monotonic()))
  sent = time.monotonic()
  stamps = []
  body = {'prompt': prompt, 'max_tokens': max_tokens, 'temperature': 0, 'stream': True,
          'ignore_eos': True}
  async with client.stream('POST', '/v1/completions', json=body) as response:
    async for line in response.aiter_lines():
      if line.startswith('data: {'):
        stamps.append(time.monotonic())
  timings.append((stamps[0] - sent, (stamps[-1] - stamps[0]) / max(len(stamps) - 2, 1),
                  max_tokens))


async def _load(url, requests, max_seconds):
  timings = []
  async with httpx.AsyncClient(base_url=url, timeout=max_seconds) as client:
    start = time.monotonic()
    jobs = [_one(client, start, *r, timings) for r in requests]
    await asyncio.wait_for(asyncio.gather(*jobs), max_seconds)
  return timings, time.monotonic() - start


async def _watch(url, samples, stop):
  """Polls /metrics for pages used and sequences running until `stop` is set."""
  async with httpx.AsyncClient(base_url=url, timeout=10) as client:
    while not stop.is_set():
      text = (await client.get('/metrics')).text
      value = lambda name: float(re.search(rf'^{name} (\S+)$', text, re.M).group(1))
      samples.append((value('zoo_serve_pages_used'), value('zoo_serve_requests_running')))
      await asyncio.sleep(0.05)


async def _measured(url, requests, max_seconds):
  samples, stop = [], asyncio.Event()
  watcher = asyncio.create_task(_watch(url, samples, stop))
  timings, seconds = await _load(url, requests, max_seconds)
  stop.set()
  await watcher
  return timings, seconds, samples


def _serve(workdir, overrides, port):
  """python -m zoo.serve on `port`, once it answers /health."""
  process = subprocess.Popen([sys.executable, '-m', 'zoo.serve', f'--workdir={workdir}',
                              f'--port={port}', *[f'--config.{o}' for o in overrides]],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  for _ in range(1200):
    try:
      if httpx.get(f'http://127.0.0.1:{port}/health', timeout=1).status_code == 200:
        return process
    except httpx.TransportError:
      time.sleep(0.1)
  process.kill()
  raise RuntimeError(f'zoo.serve did not start: {process.stdout.read()[-2000:]}')


def measure(workdir, overrides, args, batching):
  config = run_config.resolve(workdir, None, overrides).config
  vocab, max_len = config.model.vocab_size, load.max_len(config)
  page_size = config.serve.page_size
  tokenizer = runtime.tokenizer(config, workdir)
  bos = tokenizer.eos_id if tokenizer.bos_id is None else tokenizer.bos_id
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  server = _serve(workdir, [*overrides, f'serve.batching={batching}'], port)
  url = f'http://127.0.0.1:{port}'
  try:
    asyncio.run(_load(url, _requests(args, vocab, bos, 1), args.max_seconds))  # compiles
    timings, seconds, samples = asyncio.run(_measured(url, _requests(args, vocab, bos, 0),
                                                      args.max_seconds))
  finally:
    server.terminate()
    server.wait()
  ttft, tpot, tokens = (np.asarray(x) for x in zip(*timings))
  return dict(batching=batching, rps=len(timings) / seconds, tps=tokens.sum() / seconds,
              ttft=np.percentile(ttft, [50, 99]) * 1e3, tpot=np.percentile(tpot, [50, 99]) * 1e3,
              pages=int(max(p for p, _ in samples)),
              contiguous=int(max(r for _, r in samples)) * -(-max_len // page_size))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--workdir', required=True)
  parser.add_argument('--requests', type=int, default=96)
  parser.add_argument('--rate', type=float, default=40.0, help='arrivals a second (Poisson)')
  parser.add_argument('--prompt_len', default='16,64', help='lo,hi tokens (uniform)')
  parser.add_argument('--output_len', default='16,128', help='lo,hi tokens (uniform)')
  parser.add_argument('--max_seconds', type=float, default=600.0)
  parser.add_argument('--overrides', default='serve.max_len=256,serve.page_size=16,'
                      'serve.num_pages=129,serve.max_seqs=32,serve.prefill_chunk=64')
  args = parser.parse_args()
  overrides = [o for o in args.overrides.split(',') if o]
  print(f'{args.workdir}: {args.requests} requests at {args.rate:g}/s, prompts {args.prompt_len}, '
        f'outputs {args.output_len} tokens; {" ".join(overrides)}; '
        f'{jax.devices()[0].device_kind}, jax {jax.__version__}')
  print(f'{"batching":>10} {"req/s":>6} {"tok/s":>7} {"TTFT p50/p99 ms":>16} '
        f'{"TPOT p50/p99 ms":>16} {"pages (peak)":>12} {"contiguous":>10}')
  for batching in ('continuous', 'static'):
    r = measure(args.workdir, overrides, args, batching)
    print(f'{r["batching"]:>10} {r["rps"]:>6.2f} {r["tps"]:>7.0f} '
          f'{r["ttft"][0]:>7.0f}/{r["ttft"][1]:<8.0f} {r["tpot"][0]:>7.1f}/{r["tpot"][1]:<8.1f} '
          f'{r["pages"]:>12} {r["contiguous"]:>10}', flush=True)


if __name__ == '__main__':
  main()
