"""Correctness under load: 36 greedy requests of mixed lengths, half sharing a prefix,
submitted together to an engine with few pages (so sequences are preempted and computed
again) give, token for token, what --mode=generate's decoding (zoo.infer.generate) gives
each prompt alone, for a dense, a GQA + sliding-window (local, chunked, sinks), an MLA and
a hybrid Gated DeltaNet + MoE model, through two compiled steps; every page is
free again at the end. On a tensor mesh (the pool's kv heads split over it), and an MoE
model's on an expert x tensor mesh, the tokens are one device's."""

import threading

import jax
import ml_collections
import numpy as np
import pytest

from tests import helpers
from zoo import families
from zoo import run as run_lib
from zoo import sharding
from zoo.families import decoding
from zoo.infer import generate
from zoo.serve import engine as engine_lib
from zoo.serve import scheduler as scheduler_lib
from zoo.train import runtime
from zoo.train import state as state_lib

KINDS = {
    'dense': dict(position='rope', num_kv_heads=4),
    'gqa_window': dict(position='rope', num_layers=4, window=3, activation='clamped_swiglu',
                       swiglu_limit=0.5, attention=dict(pattern='LGCN', chunk=3, sinks=True,
                                                        use_bias=True, nope_scale=0.5,
                                                        nope_floor=2)),
    'mla': dict(position='rope', mla=dict(kv_lora_rank=16, q_lora_rank=12, qk_nope_head_dim=8,
                                          qk_rope_head_dim=4, v_head_dim=6)),
    'moe': dict(position='rope', num_kv_heads=2, moe=dict(num_experts=4, top_k=2)),
    'hybrid': dict(position='rope', num_layers=3, qk_norm=True, rope_fraction=0.5,
                   attention=dict(pattern='DDG', output_gate=True),
                   delta=dict(key_heads=2, value_heads=4, key_dim=8, value_dim=8, chunk=4),
                   moe=dict(num_experts=4, top_k=2, num_shared_experts=1, shared_gate=True)),
}
NEW_TOKENS = 10
SETTINGS = dict(page_size=8, num_pages=16, max_seqs=8, prefill_rows=2, prefill_chunk=8,
                max_queue=64, batching='continuous')


def build(kind):
  overrides = dict(KINDS[kind])
  config = helpers.tiny_config(**{k: v for k, v in overrides.items()
                                  if k not in ('window', 'attention', 'mla', 'delta', 'moe')})
  config.model.attention.window = overrides.get('window', 0)
  for section in ('attention', 'mla', 'delta', 'moe'):
    config.model[section].update(overrides.get(section, {}))
  model = families.build(config.model)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), families.example_batch(config.model, 1, 16))
  return config, model, {'params': params['params']}


LENGTHS = (5, 13)  # prompt tokens


def prompts():
  """36 prompts, 18 of 5 tokens and 18 of 13 sharing their first 8, each asking for 4 to
  10 new tokens (mixed lengths: sequences end at different steps)."""
  rng = np.random.default_rng(0)
  head = [int(t) for t in rng.integers(4, 64, 8)]
  out = []
  for i in range(36):
    length = LENGTHS[i % 2]
    tail = [int(t) for t in rng.integers(4, 64, length)]
    out.append(((head + tail)[:length] if length > 8 else tail, 4 + i % 7))
  return out


def run_engine(engine, requests):
  """Submits every (prompt, max_tokens) at once to the running engine -> their sequences."""
  done = threading.Semaphore(0)
  seqs = [scheduler_lib.Sequence(p, scheduler_lib.Sampling(max_tokens=n)) for p, n in requests]
  for seq in seqs:
    assert engine.submit(seq, lambda s, token, finished: finished and done.release())
  for _ in seqs:
    assert done.acquire(timeout=300)
  return seqs


def check_against_generate(model, variables, seqs):
  """Each sequence's tokens are the first of generate's greedy tokens for its prompt alone
  (prompts of one length batched: no padding, so each row is decoded as alone)."""
  reference = jax.jit(generate.make(model, NEW_TOKENS, {'temperature': 0.0}, eos_id=-1,
                                    pad_id=0))
  for length in {len(seq.prompt) for seq in seqs}:
    group = [seq for seq in seqs if len(seq.prompt) == length]
    ids, segments = decoding.left_pad([seq.prompt for seq in group], 0)
    want = np.asarray(reference(variables, ids, segments, jax.random.PRNGKey(0)))
    for seq, row in zip(group, want):
      assert seq.finish_reason == 'length'
      assert seq.output == list(row[:seq.sampling.max_tokens]), (seq.prompt, seq.preemptions)


@pytest.mark.parametrize('kind', ['dense', 'gqa_window', 'mla', 'hybrid'])
def test_under_load_every_request_equals_generate_alone(kind):
  config, model, variables = build(kind)
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  place = runtime.Placement(mesh, sharding.rules(config), None)
  engine = engine_lib.Engine(model, variables, place, ml_collections.ConfigDict(SETTINGS), 32,
                             2, recurrent=kind == 'hybrid')
  engine.start()
  try:
    seqs = run_engine(engine, prompts())
  finally:
    engine.stop()
  s = engine.scheduler
  # compiled per shape, never per request: decode and prefill (at one page-table width, 4)
  assert engine._step.jitted._cache_size() == 2  # pylint: disable=protected-access
  assert s.preemptions > 0
  assert (s.shared_pages > 0) == (kind != 'hybrid')  # no prefixes under a recurrent state
  assert s.pool.available == SETTINGS['num_pages'] - 1 and not s.running and not s.waiting
  check_against_generate(model, variables, seqs)


@pytest.mark.parametrize('kind, axes', [
    ('dense', {'tensor': 2}),  # the pool's kv heads split
    ('moe', {'expert': 2, 'tensor': 2}),  # experts split too
], ids=['tensor', 'expert_tensor'])
def test_on_a_mesh_every_request_equals_generate_alone(kind, axes):
  config, model, variables = build(kind)
  config.mesh.update({'data': 1, **axes})
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:int(np.prod(list(axes.values())))])
  place = runtime.Placement(mesh, sharding.rules(config), None)
  state = runtime.model_state(run_lib.resolve(config), mesh)
  shardings = state_lib.model_variables(state.shardings)
  placed = jax.device_put(variables, {'params': shardings['params']})
  engine = engine_lib.Engine(model, placed, place, ml_collections.ConfigDict(SETTINGS), 32,
                             config.model.num_kv_heads)
  pool_shardings = engine._pool_sharding  # pylint: disable=protected-access
  pool_specs = {s.spec for s in jax.tree.leaves(pool_shardings)}
  assert pool_specs == {jax.sharding.PartitionSpec(None, None, None, 'tensor', None)}
  engine.start()
  try:
    seqs = run_engine(engine, prompts()[:16])
  finally:
    engine.stop()
  check_against_generate(model, variables, seqs)
