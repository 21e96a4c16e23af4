"""Serving: `python -m zoo.serve --workdir=W` answers OpenAI-style requests with continuous
batching over a paged KV cache (docs/serving.md).

engine.py runs the steps scheduler.py plans over pages.py's pool; step.py is the compiled
step and sampling.py its per-request sampling; api.py reads and answers requests;
server.py is the HTTP server; metrics.py its Prometheus metrics.
"""
