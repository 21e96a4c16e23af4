"""The server's Prometheus metrics (GET /metrics, text format): the queue, the running
requests and the pages, read from the engine when scraped; time to first token and time
per output token as histograms; tokens and requests as counters, and tokens per second
over the last WINDOW seconds."""

import collections
import time

import prometheus_client as prom

WINDOW = 10.0  # seconds of tokens the tokens/s gauge averages
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
  def __init__(self, engine):
    self.registry = prom.CollectorRegistry()
    r = self.registry
    gauge = lambda name, text, fn: prom.Gauge(name, text, registry=r).set_function(fn)
    gauge('zoo_serve_queue_depth', 'requests not yet running (waiting, and handed in since '
          'the last step)', lambda: engine.queued)
    gauge('zoo_serve_requests_waiting', 'sequences in the queue, preempted ones included',
          lambda: engine.waiting)
    gauge('zoo_serve_requests_running', 'sequences holding a row', lambda: engine.running)
    gauge('zoo_serve_pages_used', 'KV cache pages held by sequences or cached prefixes',
          lambda: engine.scheduler.pool.used)
    gauge('zoo_serve_pages_free', 'KV cache pages a request can take (free or evictable)',
          lambda: engine.scheduler.pool.available)
    gauge('zoo_serve_preemptions', 'sequences preempted since the engine started',
          lambda: engine.scheduler.preemptions)
    gauge('zoo_serve_engine_restarts', 'times a failed step restarted the engine',
          lambda: engine.restarts)
    gauge('zoo_serve_tokens_per_second', f'output tokens a second over the last {WINDOW:g} s',
          self._rate)
    self.ttft = prom.Histogram('zoo_serve_time_to_first_token_seconds',
                               'request arrival to its first output token', buckets=_LATENCY,
                               registry=r)
    self.tpot = prom.Histogram('zoo_serve_time_per_output_token_seconds',
                               'mean time between a choice\'s output tokens after the first',
                               buckets=_LATENCY, registry=r)
    self.output_tokens = prom.Counter('zoo_serve_output_tokens', 'tokens generated', registry=r)
    self.prompt_tokens = prom.Counter('zoo_serve_prompt_tokens', 'prompt tokens received',
                                      registry=r)
    self.requests = prom.Counter('zoo_serve_requests', 'requests answered, by HTTP status',
                                 ['status'], registry=r)
    self._recent = collections.deque()

  def token(self, now=None):
    now = time.monotonic() if now is None else now
    self.output_tokens.inc()
    self._recent.append(now)

  def _rate(self):
    now = time.monotonic()
    while self._recent and self._recent[0] < now - WINDOW:
      self._recent.popleft()
    return len(self._recent) / WINDOW

  def text(self):
    return prom.generate_latest(self.registry)
