"""The memory model (zoo/plan/memory.py) against the TPU compiler: a grid of
(config, slice, mesh) points spanning the families and regimes, each AOT-compiled for its
slice through libtpu; benchmarks/plan_calibration.py prints the table (docs/performance.md),
tests/plan_calibration_test.py holds a few cheap points to it.

Layer counts are cut where the full depth only repeats the same layers (the model counts
every term per layer, so its ratio to the compiler does not hang on depth), to two repeats
of a layer pattern where one would do (XLA unrolls a scan of one step and schedules its
layers differently: gemma3-32k); widths, vocabularies, lengths and batches are the
published shapes' or a pod run's.
"""

import dataclasses
import os
import time

import jax

from zoo import config as config_lib
from zoo import run as run_lib
from zoo import sharding
from zoo.plan import compiled
from zoo.plan import preflight
from zoo.plan import topology

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), 'configs')  # the repository's


@dataclasses.dataclass(frozen=True)
class Point:
  name: str
  config: str  # configs/NAME.py
  slice: str  # a TPU slice (zoo/plan/topology.py)
  mesh: dict  # mesh axes > 1 (the rest 1)
  overrides: tuple = ()  # FIELD=VALUE, as --config.FIELD=VALUE

  def load(self):
    mesh = {a: self.mesh.get(a, 1) for a in sharding.MESH_AXES}
    return config_lib.load(os.path.join(CONFIGS, f'{self.config}.py'), list(self.overrides) + [
        f'mesh.{a}={n}' for a, n in mesh.items()])

  def describe(self):
    mesh = sharding.describe({a: n for a, n in self.mesh.items() if n > 1}) or 'one chip'
    return f'{self.config}, {self.slice}, {mesh}' + (
        ', ' + ' '.join(self.overrides) if self.overrides else '')


def _p(name, config, slice_, mesh, *overrides):
  return Point(name, config, slice_, mesh, tuple(overrides))


FULL, NONE = 'model.remat=full', 'model.remat=none'
L8 = 'model.num_layers=8'

POINTS = (
    # dense decoders
    _p('llama-fsdp', 'llama3_8b', 'v5p-8', {'fsdp': 4}, L8, 'train.batch_size=16', FULL),
    _p('llama-fsdp-none', 'llama3_8b', 'v5p-8', {'fsdp': 4}, L8, 'train.batch_size=4', NONE),
    _p('llama-tensor', 'llama3_8b', 'v5p-16', {'fsdp': 4, 'tensor': 2}, L8,
       'train.batch_size=16', FULL),
    _p('llama-data', 'llama3_8b', 'v5p-16', {'data': 2, 'fsdp': 4}, L8, 'train.batch_size=32',
       FULL),
    _p('llama-512', 'llama3_8b', 'v5p-8', {'fsdp': 4}, L8, 'train.batch_size=128',
       'data.seq_len=512', FULL),
    _p('llama-16k', 'llama3_8b', 'v5p-8', {'fsdp': 4}, L8, 'train.batch_size=4',
       'data.seq_len=16384', FULL),
    _p('llama-32k-context', 'llama3_8b', 'v5p-16', {'fsdp': 2, 'context': 4}, L8,
       'train.batch_size=2', 'data.seq_len=32768', FULL),
    _p('llama-32k-context-xla', 'llama3_8b', 'v5p-16', {'fsdp': 2, 'context': 4}, L8,
       'train.batch_size=2', 'data.seq_len=32768', 'model.attention.kernel=xla', FULL),
    _p('llama-microbatches', 'llama3_8b', 'v5p-8', {'fsdp': 4}, L8, 'train.batch_size=32',
       'train.microbatches=4', FULL),
    _p('llama-tensor8', 'llama3_8b', 'v5p-16', {'tensor': 8}, L8, 'train.batch_size=8', FULL),
    _p('llama-dots', 'llama3_8b', 'v5p-8', {'fsdp': 4}, L8, 'train.batch_size=8',
       'model.remat=dots'),
    _p('gpt3-6.7b', 'gpt3_6_7b', 'v5p-8', {'fsdp': 4}, L8, 'train.batch_size=16',
       'train.batch_ramp=', FULL),
    _p('gpt2-xl-none', 'gpt2_xl', 'v5p-8', {'fsdp': 4}, 'train.batch_size=16', NONE),
    _p('palm-8b', 'palm_8b', 'v5p-8', {'fsdp': 4}, L8, 'train.batch_size=16', FULL),
    _p('qwen3-8b-tensor', 'qwen3_8b', 'v5p-16', {'fsdp': 4, 'tensor': 2}, L8,
       'train.batch_size=16', FULL),
    _p('mistral-16k', 'mistral_7b', 'v5p-8', {'fsdp': 4}, L8, 'train.batch_size=4',
       'data.seq_len=16384', FULL),
    _p('gemma2-softcap-8k', 'gemma2_9b', 'v5p-8', {'fsdp': 4}, 'model.num_layers=4',
       'train.batch_size=4', 'data.seq_len=8192', FULL),
    _p('gemma3-32k', 'gemma3_27b', 'v5p-16', {'fsdp': 8}, 'model.num_layers=12',
       'train.batch_size=8', 'data.seq_len=32768', FULL),
    _p('gemma3-1b-data', 'gemma3_1b', 'v5p-8', {'data': 4}, 'train.batch_size=16', FULL),
    _p('gpt3-175b-wide', 'gpt3_175b', 'v5p-64', {'fsdp': 8, 'tensor': 4},
       'model.num_layers=2', 'train.batch_size=16', 'train.batch_ramp=', FULL),
    # pipelines
    _p('llama-stage2', 'llama3_8b', 'v5p-16', {'fsdp': 4, 'stage': 2}, L8,
       'train.batch_size=32', 'model.pipeline_microbatches=4', FULL),
    _p('llama-stage2-circular', 'llama3_8b', 'v5p-16', {'fsdp': 4, 'stage': 2}, L8,
       'train.batch_size=32', 'model.pipeline_microbatches=4', 'model.pipeline_repeats=2',
       FULL),
    _p('llama-stage4-none', 'llama3_8b', 'v5p-32', {'fsdp': 4, 'stage': 4}, L8,
       'train.batch_size=32', 'model.pipeline_microbatches=8', NONE),
    _p('llama-stage2-dcn', 'llama3_8b', '2xv5p-16', {'fsdp': 8, 'stage': 2}, L8,
       'train.batch_size=32', 'model.pipeline_microbatches=4', 'mesh.slices=2',
       'mesh.dcn_axis=stage', FULL),
    # mixtures of experts: with and without an expert axis, dropless and capacity, MLA
    _p('mixtral-expert', 'mixtral_8x7b', 'v5p-16', {'fsdp': 2, 'expert': 4},
       'model.num_layers=4', 'train.batch_size=16', FULL),
    _p('mixtral-no-expert', 'mixtral_8x7b', 'v5p-16', {'fsdp': 8}, 'model.num_layers=4',
       'train.batch_size=16', FULL),
    _p('mixtral-capacity', 'mixtral_8x7b', 'v5p-16', {'fsdp': 2, 'expert': 4},
       'model.num_layers=4', 'train.batch_size=16', 'model.moe.capacity_factor=1.25', FULL),
    _p('mixtral-stage2', 'mixtral_8x7b', 'v5p-32', {'fsdp': 2, 'expert': 4, 'stage': 2},
       'model.num_layers=4', 'train.batch_size=32', 'model.pipeline_microbatches=4', FULL),
    _p('qwen3-moe-expert', 'qwen3_30b_a3b', 'v5p-32', {'fsdp': 2, 'expert': 8},
       'model.num_layers=4', 'train.batch_size=32', FULL),
    _p('qwen3-moe-no-expert', 'qwen3_30b_a3b', 'v5p-32', {'fsdp': 8, 'tensor': 2},
       'model.num_layers=4', 'train.batch_size=32', FULL),
    _p('deepseek-v3-mla', 'deepseek_v3', 'v5p-64', {'fsdp': 4, 'expert': 8},
       'model.num_layers=4', 'train.batch_size=32', 'train.batch_ramp=', FULL),
    # and without an expert axis: every expert's F split over tensor, the pairs whole
    _p('deepseek-v3-tensor', 'deepseek_v3', 'v5p-64', {'fsdp': 4, 'tensor': 8},
       'model.num_layers=5', 'train.batch_size=32', 'train.batch_ramp=', FULL),
    _p('deepseek-v2-lite', 'deepseek_v2_lite', 'v5p-16', {'fsdp': 2, 'expert': 4},
       'train.batch_size=16', FULL),
    # the newer shapes: gpt-oss (sinks, window and full layers, biased experts), Llama 4
    # (chunked layers, a NoPE one, a shared expert), Qwen3-Next (Gated DeltaNet layers)
    _p('gpt-oss-expert', 'gpt_oss_20b', 'v5p-16', {'fsdp': 2, 'expert': 4},
       'model.num_layers=4', 'train.batch_size=16', FULL),
    _p('llama4-scout-expert', 'llama4_scout', 'v5p-16', {'fsdp': 2, 'expert': 4},
       'model.num_layers=8', 'train.batch_size=8', FULL),
    _p('qwen3-next-expert', 'qwen3_next_80b_a3b', 'v5p-16', {'fsdp': 2, 'expert': 4},
       'model.num_layers=8', 'train.batch_size=16', FULL),
    _p('switch-capacity', 'switch_base_8', 'v5p-8', {'fsdp': 2, 'expert': 2},
       'train.batch_size=64', NONE),
    # encoder-decoders (flash_bias on TPU), T5Gemma
    _p('t5-base-none', 't5_base', 'v5p-8', {'data': 4}, 'train.batch_size=128', NONE),
    _p('t5-base-full', 't5_base', 'v5p-8', {'fsdp': 4}, 'train.batch_size=128', FULL),
    _p('t5-xl-fsdp', 't5_v1_1_xl', 'v5p-16', {'fsdp': 8}, 'train.batch_size=128', FULL),
    _p('t5-xl-stage2', 't5_v1_1_xl', 'v5p-16', {'fsdp': 4, 'stage': 2}, 'train.batch_size=128',
       'model.pipeline_microbatches=8', NONE),
    _p('t5-xl-circular', 't5_v1_1_xl', 'v5p-16', {'fsdp': 4, 'stage': 2},
       'train.batch_size=128', 'model.pipeline_microbatches=8', 'model.pipeline_repeats=2',
       NONE),
    _p('t5-2048', 't5_v1_1_base', 'v5p-8', {'fsdp': 4}, 'train.batch_size=32',
       'data.seq_len=2048', FULL),
    _p('umt5-xl', 'umt5_xl', 'v5p-16', {'fsdp': 8}, 'model.num_encoder_layers=6',
       'model.num_decoder_layers=6', 'train.batch_size=128', FULL),
    _p('umt5-base-none', 'umt5_base', 'v5p-8', {'fsdp': 4}, 'train.batch_size=64', NONE),
    _p('t5gemma', 't5gemma_2b_2b', 'v5p-16', {'fsdp': 8}, 'model.num_encoder_layers=6',
       'model.num_decoder_layers=6', 'train.batch_size=64', FULL),
    # encoders
    _p('bert-large-none', 'bert_large', 'v5p-8', {'fsdp': 4}, 'train.batch_size=256', NONE),
    _p('bert-large-full', 'bert_large', 'v5p-8', {'fsdp': 4}, 'train.batch_size=256', FULL),
    _p('bert-base-data', 'bert_base', 'v5p-8', {'data': 4}, 'train.batch_size=256', NONE),
    _p('bert-moe-expert', 'bert_base_moe', 'v5p-8', {'fsdp': 2, 'expert': 2},
       'train.batch_size=128', NONE),
)
BY_NAME = {p.name: p for p in POINTS}


def measure(point, saved=None):
  """-> {'estimate': the model's bytes by part, 'compiled': the compiler's per-device bytes
  by part (or {'total': needed, 'at_least': True} for a step that does not fit),
  'seconds': compile time}; an error other than memory raises. saved: an earlier result
  of this point, whose compiler's part is kept (only the estimate is made again)."""
  run = run_lib.resolve(point.load())
  tpu_slice = topology.parse(point.slice)
  devices = topology.devices(tpu_slice)
  sizes = sharding.mesh_shape(run.config.mesh, len(devices))
  estimate = {k: int(v) for k, v in preflight.estimate(run, sizes, 'tpu').items()}
  if saved:
    return {**saved, 'estimate': estimate}
  start = time.time()
  with jax.default_matmul_precision('default'):
    try:
      out = compiled.compile_step(run, devices, scan_corrected_cost=False)['per_device_bytes']
    except compiled.DoesNotFit as e:
      out = {'total': int(e.needed), 'at_least': True}
  return {'estimate': estimate, 'compiled': out,
          'seconds': round(time.time() - start, 1)}
