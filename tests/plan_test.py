import dataclasses
import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from tests.helpers import REPO
from zoo import config as config_lib
from zoo import counting
from zoo import families
from zoo import run as run_lib
from zoo import sharding
from zoo import plan
from zoo.plan import analytic
from zoo.plan import compiled
from zoo.plan import memory
from zoo.plan import sweep
from zoo.plan import topology
from zoo.plan import preflight
from zoo.plan import residuals
from zoo.train import metrics as metrics_lib
from zoo.train import state as state_lib


# Published parameter counts (each config file names its source). GPT-3's paper prints
# rounded sizes; the exact counts follow from Table 2.1's shapes (see the config files).
PUBLISHED = {
    'gpt2_small': 124_439_808, 'gpt2_medium': 354_823_168, 'gpt2_large': 774_030_080,
    'gpt2_xl': 1_557_611_200,
    'gpt3_125m': 125_226_240, 'gpt3_350m': 355_871_744, 'gpt3_760m': 760_300_032,
    'gpt3_1_3b': 1_315_723_264, 'gpt3_2_7b': 2_651_553_280, 'gpt3_6_7b': 6_658_404_352,
    'gpt3_13b': 12_853_386_240, 'gpt3_175b': 174_604_259_328,
    'llama3_8b': 8_030_261_248, 'llama3_70b': 70_553_706_496, 'llama3_405b': 405_853_388_800,
    'mistral_7b': 7_241_732_096,
    'bert_base': 110_106_428, 'bert_large': 336_226_108,
    't5_small': 60_506_624, 't5_base': 222_903_552, 't5_large': 737_668_096,
    't5_3b': 2_851_598_336, 't5_11b': 11_307_321_344,
    't5_v1_1_small': 76_961_152, 't5_v1_1_base': 247_577_856, 't5_v1_1_large': 783_150_080,
    't5_v1_1_xl': 2_849_757_184, 't5_v1_1_xxl': 11_135_332_352,
    'palm_8b': 8_632_012_800, 'palm_62b': 62_495_662_080, 'palm_540b': 540_356_474_880,
    'mixtral_8x7b': 46_702_792_704,
    'gemma2_9b': 9_241_705_984, 'gemma2_27b': 27_227_128_320,  # Gemma 2 report, Table 1
    'gemma3_1b': 999_885_952, 'gemma3_27b': 27_009_346_304,  # text; config.json shapes
    'qwen3_8b': 8_190_735_360, 'qwen3_32b': 32_762_123_264,
    'qwen3_30b_a3b': 30_532_122_624, 'qwen3_235b_a22b': 235_093_634_560,
    # the transformers classes' counts (umT5's with its untied head: + vocab x d_model)
    'umt5_base': 592_043_520, 'umt5_xl': 3_768_356_864, 't5gemma_2b_2b': 5_596_853_760,
    'deepseek_v3': 671_026_404_352, 'deepseek_v2_lite': 15_706_484_224,
    'kimi_k2': 1_026_408_209_408,  # DeepseekV3ForCausalLM on its config.json, on meta
    'deepseek_v3_2': 671_877_929_216,  # DeepseekV32ForCausalLM on its config.json, on meta
}
# total less the routed experts a token does not use (Qwen 3 report, Table 2: 3.3B, 22B)
ACTIVE = {'mixtral_8x7b': 12_879_925_248, 'qwen3_30b_a3b': 3_353_032_704,
          'qwen3_235b_a22b': 22_190_763_520, 'deepseek_v3': 37_552_282_624,
          'deepseek_v2_lite': 2_661_150_208, 'kimi_k2': 32_861_477_888,
          'deepseek_v3_2': 38_403_807_488}


def test_deepseek_counts_round_to_the_reports_and_its_cache_holds_the_latent():
  # the reports count activated parameters without the input embedding: 37B and 2.4B
  v3, lite = (analytic.plan(run_lib.load(helpers.config_file(n, arg=None)), 1)
              for n in ('deepseek_v3', 'deepseek_v2_lite'))
  assert round((v3['params_total'] - v3['params_mtp']) / 1e9) == 671
  # the prediction module: an MoE block (MLA, 256 + 1 experts, router), its [2D, D]
  # projection and three norms; the report's 14B also counts the hub's copies of the
  # embedding and output head beside it
  moe_block = (256 + 1) * 3 * 7168 * 2048 + 256 * 7168 + 2 * 7168  # (its bias: state)
  mla = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 +
         128 * 128 * 7168)
  assert v3['params_mtp'] == moe_block + mla + 2 * 7168 * 7168 + 3 * 7168 == 11_610_067_968
  assert round(v3['params_active_without_input_embedding'] / 1e9) == 37
  assert lite['params_active_without_input_embedding'] == 2_451_435_008  # the report's 2.4B
  assert round(lite['params_total'] / 1e8) == 157
  # 61 layers x (latent 512 + rotary key 64) x 2 bytes: the 70,272
  assert v3['kv_cache_bytes_per_token'] == 61 * (512 + 64) * 2 == 70_272


@pytest.mark.parametrize('name', sorted(PUBLISHED))
def test_plan_counts_equal_the_published_architecture(name):
  # as transformers counts them: without a multi-token prediction module (deepseek_v3's)
  result = analytic.plan(run_lib.load(helpers.config_file(name, arg=None),
                                         ['model.mtp.depth=0']), 1)
  assert result['params_total'] == PUBLISHED[name]
  assert result['params_active'] == ACTIVE.get(name, PUBLISHED[name])


def test_sparse_attention_counts_its_kept_keys_and_the_indexers_scores_by_hand():
  def attention(stage, length):
    config = helpers.load(helpers.config_file('deepseek_v3_2', arg=None), [
        f'model.mla.index_stage={stage}', f'data.seq_len={length}', 'model.mtp.depth=0',
        'model.remat=none'])
    return counting.attention_flops_per_token(config)
  # 61 layers, forward and backward: each kept key's absorbed q.k (512 + 64) and p.v (512)
  # for 128 heads; the indexer's 64 heads of 128 over every earlier key (half the length)
  kept = 2048 - 2048 * 2047 / (2 * 131_072)  # a causal query keeps min(i + 1, 2048)
  assert attention('sparse', 131_072) == round(
      6 * 61 * (128 * 1088 * kept + 64 * 128 * 65_536))
  # the warm-up attends every earlier key
  assert attention('warmup', 131_072) == round(6 * 61 * (128 * 1088 + 64 * 128) * 65_536)
  assert attention('sparse', 131_072) < attention('warmup', 131_072) / 10  # 11.8x


def test_mixtral_active_parameters_and_expert_traffic_by_hand():
  config = helpers.load(helpers.config_file('mixtral_8x7b', arg=None),
                           ['mesh.data=1', 'mesh.expert=8'])
  result = analytic.plan(run_lib.resolve(config), 8)
  expert = 3 * 4096 * 14336  # one SwiGLU expert: wi_0, wi_1, wo
  # every token uses 2 of the 8 experts of each of 32 layers, and everything else
  assert result['params_active'] == PUBLISHED['mixtral_8x7b'] - 32 * 6 * expert
  assert result['params_active'] == 12_879_925_248
  # dropless over 8 expert shards: each of the 2 (token, choice) pairs leaves its shard 7
  # times in 8 and comes back, bf16
  assert result['moe']['bytes_per_token_per_layer_forward'] == 2 * 2 * 4096 * 2 * 7 // 8
  assert result['flops_per_token'] < 0.3 * 6 * PUBLISHED['mixtral_8x7b']


def test_t5_counts_its_decoder_self_attention_cache_and_bert_none():
  t5 = analytic.plan(run_lib.load(helpers.config_file('t5_base', arg=None)), 1)
  assert t5['kv_cache_bytes_per_token'] == 2 * 12 * 12 * 64 * 2  # 12 decoder layers, bf16
  bert = analytic.plan(run_lib.load(helpers.config_file('bert_base', arg=None)), 1)
  assert 'kv_cache_bytes_per_token' not in bert
  # T5Gemma's decoder: 13 global layers keep every token, 13 local ones a 4096-slot ring
  t5gemma = analytic.plan(run_lib.load(helpers.config_file('t5gemma_2b_2b', arg=None)), 1)
  per_layer = 2 * 4 * 256 * 2  # keys and values, 4 kv heads of 256, bf16
  assert t5gemma['kv_cache_bytes_per_token'] == 13 * per_layer
  assert t5gemma['kv_cache_local'] == {'layers': 13, 'window': 4096, 'kind': 'local',
                                       'bytes_per_sequence': 13 * 4096 * per_layer}


def test_kv_cache_and_flops_for_llama3_8b_by_hand():
  config = helpers.load(helpers.config_file('llama3_8b', arg=None))
  result = analytic.plan(run_lib.resolve(config), 1)
  assert result['kv_cache_bytes_per_token'] == 2 * 32 * 8 * 128 * 2  # bf16: 128 KiB
  n_matmul = PUBLISHED['llama3_8b'] - 128_256 * 4096  # input embedding table is a gather
  assert result['flops_per_token'] == 6 * n_matmul + 6 * 32 * 4096 * 32 * 128
  assert result['remat_flops_per_token'] == 0  # model.remat='none'
  attention_forward = 2 * 32 * 4096 * 32 * 128
  for policy, recomputed in (('full', 2 * (n_matmul - 128_256 * 4096) + attention_forward),
                             ('dots_no_batch', attention_forward), ('dots', 0), ('none', 0)):
    config = helpers.load(helpers.config_file('llama3_8b', arg=None),
                             [f'model.remat={policy}'])
    assert counting.remat_flops_per_token(config) == recomputed, policy


def test_a_config_for_the_cudnn_kernel_plans_on_a_cpu():
  # the shapes are the kernel's whatever it is; only the memory model asks which one runs
  config = helpers.load(helpers.config_file('llama3_8b', arg=None),
                           ['model.attention.kernel=gpu', 'model.dtype=bfloat16'])
  result = analytic.plan(run_lib.resolve(config), 1)
  assert result['params_total'] == PUBLISHED['llama3_8b']
  sizes = analytic.mesh_sizes_for(config.mesh, 1)
  on_gpu = preflight.estimate(run_lib.resolve(config), sizes, 'gpu')
  # xla on a CPU: the [H, L] scores held
  on_cpu = preflight.estimate(run_lib.resolve(config), sizes, 'cpu')
  assert on_gpu['params'] == on_cpu['params'] and on_gpu['activations'] < on_cpu['activations']


def test_per_device_bytes_follow_the_sharding_rules():
  config = helpers.tiny_config(vocab_size=64, d_model=32, mlp_dim=64, num_layers=2,
                               num_heads=4, num_kv_heads=4)
  replicated = analytic.plan(run_lib.resolve(config), 8)  # mesh data=-1 -> data=8: nothing is split
  params = replicated['params_total']
  assert replicated['per_device_bytes']['params'] == 4 * params
  assert replicated['per_device_bytes']['optimizer_state'] == 8 * params
  assert replicated['per_device_bytes']['total'] == 16 * params
  config.mesh.data, config.mesh.fsdp = 1, 8
  split = analytic.plan(run_lib.resolve(config), 8)
  # every kernel, embedding and norm scale has an 'embed' dim (32, divisible by fsdp=8)
  assert split['per_device_bytes']['params'] == 4 * params // 8
  assert split['mesh'] == {'data': 1, 'fsdp': 8, 'tensor': 1, 'expert': 1,
                           'context': 1, 'stage': 1}
  config.mesh.fsdp, config.mesh.tensor = 1, 3
  uneven = analytic.plan(run_lib.resolve(config), 3)
  assert any('over tensor=3' in line for line in uneven['not_divisible'])


def test_plan_mode_cli_writes_json_without_a_workdir(tmp_path):
  out = tmp_path / 'plan.json'
  result = subprocess.run(
      [sys.executable, '-m', 'zoo.launch', f'--config={REPO}/configs/palm_540b.py',
       '--mode=plan', f'--plan_json={out}', '--config.mesh.fsdp=256', '--config.mesh.tensor=8',
       '--config.mesh.data=1'],
      env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=REPO), capture_output=True,
      text=True, timeout=120, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  assert '540,356,474,880 parameters' in result.stdout
  written = json.loads(out.read_text())
  assert written['mesh']['fsdp'] == 256 and written['per_device_bytes']['total'] > 0
  assert written['per_device_bytes']['params'] < 4 * written['params_total'] / 1000


@pytest.mark.parametrize('name,adafactor,lora', [('adamw', {}, 0), ('adafactor', {}, 0),
                                                 ('adafactor', {'momentum': 0.9}, 0),
                                                 ('adafactor', {'factored': False}, 0),
                                                 ('adamw', {}, 4)])
def test_optimizer_state_bytes_equal_the_optimizers_own_state(name, adafactor, lora):
  """Plan mode's bytes against eval_shape of the optimizer's init (Adafactor's [1]-shaped
  placeholders and step counters aside), on one device; with train.lora the adapters'."""
  config = helpers.tiny_config()
  config.optim.name = name
  config.optim.adafactor.update(min_dim_size_to_factor=8, **adafactor)
  config.train.lora.rank = lora
  result = analytic.plan(run_lib.resolve(config), 1)
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  _, _, abstract, _ = state_lib.make(families.build(config.model, config.train.lora), config,
                                     mesh, run_lib.resolve(config).schedule)
  floats = sum(x.size for x in jax.tree.leaves(abstract['opt_state'])
               if x.shape not in ((), (1,)))
  assert result['optimizer_state_bytes_per_device'][name] == 4 * floats
  assert result['per_device_bytes']['optimizer_state'] == 4 * floats
  if lora:  # query and value: a [32, 4] and b [4, 4, 8] (query) or [4, 2, 8] per layer
    assert result['lora']['params_trainable'] == 2 * (32 * 4 + 4 * 32 + 32 * 4 + 4 * 16)
    assert result['per_device_bytes']['gradients'] == 4 * result['lora']['params_trainable']
    full = analytic.plan(run_lib.resolve(helpers.tiny_config()), 1)['per_device_bytes']
    assert result['lora']['bytes_saved_per_device'] == full['total'] - result[
        'per_device_bytes']['total'] > 0


def test_the_step_estimate_runs_the_quantized_share_at_the_int8_peak():
  v5p = topology.CHIPS['v5p']
  assert topology.seconds(v5p, 918e12, 0.0, 'int8') == pytest.approx(2.0)
  assert topology.seconds(v5p, 918e12, 1.0, 'int8') == pytest.approx(1.0)
  assert topology.seconds(v5p, 918e12, 0.5, 'none') == pytest.approx(2.0)
  assert topology.seconds(topology.CHIPS['v4'], 275e12, 1.0, 'int8') == pytest.approx(1.0)
  with pytest.raises(config_lib.ConfigError, match="model.quant.mode='fp8': TPU v5p has no "
                     "fp8 matmul units .*; use model.quant.mode='int8'"):
    topology.seconds(v5p, 1.0, 1.0, 'fp8')
  config = helpers.tiny_config(remat='full')
  config.model.quant.mode = 'int8'
  result = analytic.plan(run_lib.resolve(config), 1)
  blocks = 2 * (32 * 32 + 2 * 32 * 16 + 32 * 32 + 3 * 32 * 64)  # 2 layers' projections, MLP
  norms = 5 * 32  # N_matmul counts the norm scales (zoo/counting.py's convention)
  assert result['quantized_flops_per_token'] == 8 * (blocks + norms)  # forward, back, remat


def test_gpu_machines_by_name_and_their_plan_is_the_sweeps_estimate(capsys):
  h100 = topology.parse('h100-64')  # 8 nodes of 8: NVLink inside a node, InfiniBand across
  assert (h100.chips, h100.slices, h100.chip.platform) == (64, 8, 'gpu')
  assert topology.parse('h200-4').slices == 1
  for bad in ('h100-12', 'h100-3'):
    with pytest.raises(config_lib.ConfigError, match='not 1, 2, 4 or a whole number of 8-GPU'):
      topology.parse(bad)
  # fp8 runs at the GPU's fp8 peak, about twice bf16's
  assert topology.seconds(h100.chip, 1979e12, 1.0, 'fp8') == pytest.approx(1.0)
  assert topology.seconds(h100.chip, 1979e12, 0.0, 'fp8') == pytest.approx(1979 / 989)
  with pytest.raises(config_lib.ConfigError, match='a GPU plan is analytic'):
    topology.devices(h100)
  device = lambda kind: type('D', (), {'device_kind': kind})()
  assert topology.chip_of(device('NVIDIA H200')).generation == 'h200'
  assert topology.chip_of(device('TPU v5')).generation == 'v5p'  # what v5p devices say
  assert topology.chip_of(device('TPU v5 lite')).generation == 'v5e'
  assert topology.chip_of(device('cpu')) is None
  for prefix, name in topology.DEVICE_KINDS:  # MFU's peaks are the plan's
    assert metrics_lib.peak_flops(device(prefix)) == topology.CHIPS[name].peak_flops, prefix

  config = helpers.tiny_config()
  run = run_lib.resolve(config)
  result = plan.run(run, topology_name='h200-8')
  chip, sizes = topology.CHIPS['h200'], result['mesh']
  want, memory = sweep.estimate(config, sizes, chip, result, counting.abstract_params(config))
  assert result['estimated_step_seconds'] == want > 0  # a GPU plan has a time
  compute = (result['flops_per_token'] + result['remat_flops_per_token']) * \
      result['run']['tokens_per_step'] / 8 / chip.peak_flops
  assert compute < want  # and the data axis's gradient all-reduce over NVLink
  assert result['estimated_bytes_per_device'] == int(memory) and result['fits']
  assert 'estimated step time on h200-8' in capsys.readouterr().out


def test_a_dropless_mixture_on_an_expert_axis_is_timed_by_the_analytic_flops(monkeypatch):
  """The compiler counts every row of the ragged dots' receive buffers (a fake compile here
  reports 40 x the FLOPs); the estimate takes the analytic count and says why."""
  def fake(run, devices, **_):
    return {'narrow_dots': {}, 'per_device_bytes': {'total': 2**30, 'temporaries': 2**29},
            'flops_per_step_per_device': 40 * per_device_flops, 'compile_seconds': 1.0,
            'hbm_bytes_per_step_per_device': 1.0, 'mesh_devices': len(devices)}
  monkeypatch.setattr(compiled, 'compile_step', fake)
  config = helpers.smoke('mixtral_8x7b', 'mesh.data=1', 'mesh.expert=4',
                         'model.moe.capacity_factor=0.0')
  run = run_lib.resolve(config)
  base = analytic.plan(run, 4)
  per_device_flops = ((base['flops_per_token'] + base['remat_flops_per_token']) *
                      base['run']['tokens_per_step'] / 4)
  result = plan.run(run, topology_name='v5p-8')
  assert result['ragged_buffers'] and result['estimated_step_seconds'] == pytest.approx(
      per_device_flops / topology.CHIPS['v5p'].peak_flops)
  assert "analytic FLOPs at peak: the compiler counts every row" in analytic.report(result)


def test_on_a_gpu_the_memory_model_holds_less_of_the_traced_activations():
  config = helpers.tiny_config()
  config.model.attention.kernel = 'xla'  # the same kernel on every platform
  run = run_lib.resolve(config)
  sizes = analytic.mesh_sizes_for(config.mesh, 1)
  tpu, gpu, cpu = (preflight.estimate(run, sizes, on) for on in ('tpu', 'gpu', 'cpu'))
  # XLA:GPU and XLA:CPU share a fit, the GPU holding GPU_ACTIVATIONS of the activations
  assert gpu['activations'] == pytest.approx(memory.GPU_ACTIVATIONS * cpu['activations'])
  assert gpu['total'] - gpu['activations'] == pytest.approx(cpu['total'] - cpu['activations'])
  # XLA:TPU's fit: the update fused in place (no float32 temporaries), and a step that
  # holds less than the traced residuals
  assert tpu['update'] == 0 and cpu['update'] == pytest.approx(0.5 * cpu['gradients'])
  assert tpu['activations'] < cpu['activations']


def test_the_compiled_hlo_count_of_int8_dots():
  config = helpers.tiny_config()
  config.model.quant.mode = 'int8'
  out = compiled.compile_step(run_lib.resolve(config), jax.devices()[:1], scan_corrected_cost=False)
  # 7 projections (q, k, v, out, wi_0, wi_1, wo) in the scanned layer, each forward and
  # twice backward
  assert out['narrow_dots'] == {'s8': 21}


def test_unrolled_cost_steps_that_do_not_fit_leave_the_flops_to_the_analytic_count(
    monkeypatch):
  # DeepSeek-V3 at 128K on v5p-128: the scanned step fits, the unrolled ones do not
  def out_of_hbm(run, mesh):
    raise jax.errors.JaxRuntimeError(
        'RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO '
        'temporaries (132.21G) exceeds available HBM (95.74G).')
  monkeypatch.setattr(compiled, '_unrolled_cost', out_of_hbm)
  out = compiled.compile_step(run_lib.resolve(helpers.tiny_config()), jax.devices()[:1])
  assert out['flops_per_step_per_device'] is None and out['per_device_bytes']['total'] > 0


def test_t5_11b_plans_adafactor_state_beside_adamw_and_the_whole_run():
  config = helpers.load(helpers.config_file('t5_11b', arg=None), ['mesh.data=1',
                                                                    'mesh.fsdp=8'])
  result = analytic.plan(run_lib.resolve(config), 8)
  states = result['optimizer_state_bytes_per_device']
  assert result['optimizer'] == 'adafactor' and states['adafactor'] < states['adamw'] / 100
  # AdamW: two float32 moments per parameter, split 8 ways
  assert abs(states['adamw'] - 8 * result['params_total'] / 8) < 0.01 * states['adamw']
  run = result['run']
  assert run['tokens_per_step'] == 128 * 512 and run['tokens'] == 128 * 512 * 2 ** 19
  report = analytic.report(result)
  assert 'optimizer state (adafactor)' in report and 'adamw would keep' in report
  assert '65,536 tokens/step x 524,288 steps' in report


def test_accumulation_under_fsdp_repeats_the_parameter_collectives():
  config = helpers.tiny_config()
  config.train.batch_size, config.train.microbatches = 8, 4
  config.mesh.data, config.mesh.fsdp = 1, 8
  result = analytic.plan(run_lib.resolve(config), 8)
  run, params = result['run'], result['per_device_bytes']['params']
  assert 'gradient accumulation: 4 microbatches of 2 rows; under fsdp' in analytic.report(result)
  assert run['rows_per_microbatch'] == 2
  assert run['fsdp_collective_bytes_per_step_per_device'] == 3 * 4 * 7 * params
  assert run['fsdp_collective_bytes_per_step_per_device_unaccumulated'] == 3 * 7 * params


def test_the_ring_traffic_of_a_context_mesh_by_hand():
  # 2 kv heads x head_dim 8 (d_model 32 / 4 heads), float32: a token's keys and values are
  # 2 x 2 x 8 x 4 = 128 bytes, + its slot and segment id (8): 136 bytes, 3 hops on 4 shards
  config = helpers.tiny_config()
  config.mesh.data, config.mesh.context = 1, 4
  result = analytic.plan(run_lib.resolve(config), 4)
  assert result['context'] == {'context_shards': 4, 'bytes_per_token_per_layer_forward': 408,
                               'bytes_per_token_per_layer_train': 1224}
  assert 'round the ring' in analytic.report(result)


def test_the_pipeline_plan_by_hand():
  # 2 stages, 4 microbatches: 5 iterations, bubble 1/5; batch 8 over data 2: 1 row per
  # microbatch per device, 16 tokens x d_model 32 x 4 bytes = 2048 bytes handed each way
  config = helpers.tiny_config()
  config.train.batch_size, config.model.pipeline_microbatches = 8, 4
  config.mesh.data, config.mesh.stage = 2, 2
  result = analytic.plan(run_lib.resolve(config), 4)
  assert result['pipeline'] == {'stages': 2, 'microbatches': 4, 'repeats': 1, 'bubble': 0.2,
                                'layers_per_stage': 1,
                                'boundary_bytes_per_step_per_device': 2 * 5 * 2048,
                                'regroup_bytes_per_step_per_device': 0}
  assert 'bubble 20.0%' in analytic.report(result)
  # the stacked layers split over the stages: the layer parameters' bytes halve
  assert result['per_device_bytes']['params'] < analytic.plan(run_lib.resolve(
      helpers.tiny_config()), 1)['per_device_bytes']['params']
  # circular, 2 rounds of 4 layers (groups 0..3 lie on stages 0, 0, 1, 1 and run on 0, 1,
  # 0, 1: half move): 9 iterations, bubble 1/9; half the stacked parameters out (not the
  # tables), their gradients back. A layer: q and out 2 x 32 x 32, k and v 2 x 32 x 2 x 8,
  # two norms 2 x 32, swiglu 3 x 32 x 64; 2 of the 4 on each stage, float32
  config.model.num_layers, config.model.pipeline_repeats = 4, 2
  result = analytic.plan(run_lib.resolve(config), 4)
  stacked = 2 * (2 * 32 * 32 + 2 * 32 * 16 + 2 * 32 + 3 * 32 * 64) * 4
  assert result['pipeline']['bubble'] == pytest.approx(1 / 9)
  assert result['pipeline']['boundary_bytes_per_step_per_device'] == 2 * 9 * 2048
  assert result['pipeline']['regroup_bytes_per_step_per_device'] == 2 * 0.5 * stacked
  assert 'circular, 2 rounds' in analytic.report(result)
  assert analytic.regroup_share(4, 1) == 0 and analytic.regroup_share(4, 2) == 0.75


def test_gemma3_27b_kv_cache_counts_local_layers_by_their_window():
  result = analytic.plan(run_lib.load(helpers.config_file('gemma3_27b', arg=None)), 1)
  layer_token = 2 * 16 * 128 * 2  # keys and values, 16 kv heads x 128, bf16
  assert result['kv_cache_bytes_per_token'] == 10 * layer_token  # the 10 global layers
  assert result['kv_cache_local'] == {'layers': 52, 'window': 1024, 'kind': 'local',
                                      'bytes_per_sequence': 52 * 1024 * layer_token}
  ring, full = result['kv_cache_bytes_per_sequence'][131_072]
  assert full == 62 * 131_072 * layer_token  # 62 GiB
  assert ring == (10 * 131_072 + 52 * 1024) * layer_token  # 10.4 GiB: 6x less
  ring, full = result['kv_cache_bytes_per_sequence'][32_768]
  assert (ring, full) == ((10 * 32_768 + 52 * 1024) * layer_token, 62 * 32_768 * layer_token)


def test_the_sweep_leaves_out_pipelines_of_patterned_layers():
  from zoo.plan import sweep  # pylint: disable=g-import-not-at-top
  config = helpers.load(helpers.config_file('gemma3_27b', arg=None))
  sizes = dict(data=1, fsdp=4, tensor=1, expert=1, context=1, stage=2)
  assert sweep._invalid(config, sizes, 1) == (
      'a pipeline of patterned layers (model.attention.pattern) is not built')
  assert sweep._invalid(config, dict(sizes, stage=1), 1) is None


def test_local_layers_count_attention_flops_over_their_window():
  config = helpers.load(helpers.config_file('gemma3_27b', arg=None))  # seq_len 4096
  HK, L, W = 32 * 128, 4096, 1024
  mean_local_keys = W - W * (W - 1) / (2 * L)  # 896.1: query i sees min(i, W) keys
  attention = 12 * HK * (10 * L / 2 + 52 * mean_local_keys)
  n_matmul = PUBLISHED['gemma3_27b']  # tied: the table counts once, as the output head
  assert counting.flops_per_token(config) == 6 * n_matmul + round(attention)
  config.data.seq_len = 1024  # a window as long as the sequence: plain causal
  assert counting.flops_per_token(config) == 6 * n_matmul + 6 * 62 * 1024 * HK


def test_chunked_layers_count_attention_flops_over_their_chunk():
  config = helpers.load(helpers.config_file('llama4_scout', arg=None), ['data.seq_len=32768'])
  HK, L, C = 40 * 128, 32768, 8192
  chunked = counting.flops_per_token(config)
  config.model.attention.chunk = 0  # the same layers counted as plain causal ones
  causal = counting.flops_per_token(config)
  # 36 of the 48 layers are C: each query sees C / 2 keys of its chunk, not L / 2
  assert causal - chunked == 12 * HK * 36 * (L // 2 - C // 2)


def test_a_chunked_layers_kv_cache_keeps_one_chunk():
  result = analytic.plan(run_lib.load(helpers.config_file('llama4_scout', arg=None)), 1)
  layer_token = 2 * 8 * 128 * 2  # keys and values, 8 kv heads x 128, bf16
  assert result['kv_cache_bytes_per_token'] == 12 * layer_token  # the 12 NoPE layers
  assert result['kv_cache_local'] == {'layers': 36, 'window': 8192, 'kind': 'chunked',
                                      'bytes_per_sequence': 36 * 8192 * layer_token}
  ring, full = result['kv_cache_bytes_per_sequence'][131_072]
  assert (ring, full) == ((12 * 131_072 + 36 * 8192) * layer_token, 48 * 131_072 * layer_token)


def test_qwen3_next_counts_its_linear_layers_state_and_flops_by_hand():
  result = analytic.plan(run_lib.load(helpers.config_file('qwen3_next_80b_a3b', arg=None)), 1)
  # as transformers counts them (meta-device Qwen3NextForCausalLM of config.json's shape)
  assert result['params_total'] == 79_674_391_296
  assert result['params_active_without_input_embedding'] == 3_563_764_480
  # the KV cache: the 12 gated-attention layers only, 2 kv heads x 256, bf16
  assert result['kv_cache_bytes_per_token'] == 12 * 2 * 2 * 256 * 2
  # each of the 36 linear layers: a float32 [32, 128, 128] state and the convolution's
  # last 3 inputs of q, k (16 x 128 each) and v (32 x 128), bf16, at any length
  per_layer = 32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2
  assert result['recurrent_state'] == {'layers': 36, 'bytes_per_sequence': 36 * per_layer}
  # FLOPs: 6 N + the 12 attention layers over L / 2 keys + the 36 linear layers' mixing
  # (64-token chunks: k.k, q.k, the solve's right sides, attend.u; the state read twice and
  # written; the blocked inverse)
  L, C, K = 4096, 64, 128
  delta = 6 * 36 * 32 * (C * (3 * K + 2 * K) + 3 * K * K + 2 * C * C / 3)
  assert result['flops_per_token'] == round(6 * 3_563_764_480 + 12 * 16 * 256 * 12 * L / 2 +
                                            delta)


def test_flops_by_hand_bert_attends_both_ways():
  config = helpers.load(helpers.config_file('bert_base', arg=None))  # the 512-token phase
  D, F, V, layers, L = 768, 3072, 30522, 12, 512
  block = 4 * D * D + 4 * D + 4 * D + 2 * D * F + F + D  # attention, norms, mlp (biases)
  # the tied table (the MLM output), its bias, the embedding norm, pooler, NSP, MLM transform
  n = V * D + V + 2 * D + layers * block + (D * D + D) + (2 * D + 2) + (D * D + 3 * D)
  attention = 12 * 12 * 64 * layers * L  # every query sees all L keys: 56.6M, not half
  assert counting.flops_per_token(config) == 6 * n + attention == 714_893_160


def test_flops_by_hand_t5_counts_each_stack_on_its_own_tokens():
  config = helpers.load(helpers.config_file('t5_base', arg=None))
  D, F, V, layers, H, K, S, T = 768, 3072, 32128, 12, 12, 64, 512, 114
  encoder = layers * (4 * D * D + 2 * D * F + 2 * D) + D + 32 * H  # and its bias table
  cross_kv = layers * 2 * D * D  # the cross-attention's keys and values: S encoder tokens
  decoder = layers * (4 * D * D + 2 * D * D + 2 * D * F + 3 * D) + D + 32 * H  # T tokens
  n = encoder + cross_kv + T / S * (decoder + V * D)  # per input token; the tied head on T
  keys = S * layers * S + T * layers * T / 2 + T * layers * S  # encoder, causal, cross
  want = round(6 * n) + round(12 * H * K * keys / S)
  assert counting.flops_per_token(config) == want == 830_674_683


def test_flops_by_hand_a_decoder_attends_causally():
  config = helpers.load(helpers.config_file('gpt_shakespeare', arg=None))
  D, F, V, layers, L = 256, 704, 4096, 4, 128
  block = 4 * D * D + 3 * D * F + 2 * D  # attention, SwiGLU, two RMSNorm scales
  n = layers * block + D + V * D  # the final norm, the untied head (the input table: gather)
  assert counting.flops_per_token(config) == 6 * n + 12 * 4 * 64 * layers * L // 2


def test_a_compile_that_runs_out_of_hbm_is_an_answer_not_a_traceback(monkeypatch):
  from zoo.plan import compiled  # pylint: disable=g-import-not-at-top
  from zoo.plan import sweep  # pylint: disable=g-import-not-at-top
  from zoo.plan import topology  # pylint: disable=g-import-not-at-top
  message = ('RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for '
             'HLO temporaries (241.33G) exceeds available HBM (95.74G).')  # qwen3_235b_a22b
  assert compiled._exhausted(message) == (241.33 * 2**30, 95.74 * 2**30)
  assert compiled._exhausted('RESOURCE_EXHAUSTED: something else') is None

  def out_of_hbm(*_, **__):
    raise compiled.DoesNotFit(241.33 * 2**30, 95.74 * 2**30)
  monkeypatch.setattr(compiled, 'compile_step', out_of_hbm)
  config = helpers.load(helpers.config_file('qwen3_8b', arg=None))
  tpu = topology.parse('v5p-512')
  rows = [{'mesh': dict(data=1, fsdp=256, tensor=1, expert=1, context=1, stage=1),
           'pipeline_microbatches': 0, 'pipeline_repeats': 1, 'invalid': None,
           'step_seconds': 1.0, 'per_device_bytes': 10 * 2**30, 'fits': True}]
  assert sweep.confirm(run_lib.resolve(config), rows, 1, None, tpu.chip) == 0
  assert rows[0]['compiled_fits'] is False and rows[0]['compiled_at_least']
  assert sweep.table(rows, tpu).splitlines()[-1].endswith(' yes       >241.33 NO')


def test_the_sweeps_compiles_walk_down_the_ranking_until_a_mesh_fits(monkeypatch):
  from zoo.plan import compiled  # pylint: disable=g-import-not-at-top
  from zoo.plan import suggest  # pylint: disable=g-import-not-at-top
  from zoo.plan import sweep  # pylint: disable=g-import-not-at-top
  from zoo.plan import topology  # pylint: disable=g-import-not-at-top
  tpu = topology.parse('v5p-8')
  hbm = tpu.chip.hbm_bytes
  row = lambda data, estimate: {
      'mesh': dict(data=data, fsdp=1, tensor=1, expert=1, context=1, stage=1),
      'pipeline_microbatches': 0, 'pipeline_repeats': 1, 'invalid': None,
      'step_seconds': float(data), 'per_device_bytes': estimate, 'fits': estimate <= hbm}
  # the compiler's bytes per mesh: the estimate is short for data 1, long for data 2
  compiled_bytes = {1: 2 * hbm, 2: 0.9 * hbm, 4: 0.5 * hbm, 8: 0.5 * hbm}
  rows = [row(1, 0.8 * hbm), row(2, 1.2 * hbm), row(4, 3 * hbm), row(8, 0.5 * hbm)]
  monkeypatch.setattr(compiled, 'compile_step', lambda run, *_, **__: {'per_device_bytes': {
      'total': compiled_bytes[run.config.mesh.data]}})
  config = helpers.load(helpers.config_file('gpt_shakespeare', arg=None))
  run = run_lib.resolve(config)
  assert sweep.confirm(run, rows, 1, None, tpu.chip) == 1
  # data 1 compiled and does not fit; data 2, estimated at 1.2 x HBM, compiled and fits;
  # then one fits: data 4 (3 x HBM) and 8 are not compiled
  assert [r.get('compiled_fits') for r in rows] == [False, True, None, None]
  assert suggest.best(run, tpu, rows).row is rows[1]  # the compiler's answer, not data 1
  shown = sweep.table(rows, tpu).splitlines()[2:]
  assert [line.split()[0] for line in shown[:3]] == ['1', '2', '8']  # with the estimate NO


def test_a_compiler_crash_on_one_mesh_is_a_line_and_the_next_mesh_is_compiled(monkeypatch):
  """libtpu stopped with an INTERNAL error on Kimi K2's data 4 x fsdp 16 x tensor 16
  (docs/contracts.md, Known problems): the sweep says so on that row and compiles the next."""
  from zoo.plan import compiled  # pylint: disable=g-import-not-at-top
  from zoo.plan import suggest  # pylint: disable=g-import-not-at-top
  from zoo.plan import sweep  # pylint: disable=g-import-not-at-top
  from zoo.plan import topology  # pylint: disable=g-import-not-at-top
  tpu = topology.parse('v5p-8')
  error = jax.errors.JaxRuntimeError(
      'INTERNAL: during context [post-optimization]: %bitcast.4017 = s32[384,1] bitcast(...)\n'
      'more')
  crash = compiled.CompilerFailed(error)
  assert str(crash).endswith('(a compiler bug; another mesh may compile): INTERNAL: during '
                             'context [post-optimization]: %bitcast.4017 = s32[384,1] '
                             'bitcast(...)')

  def compile_step(run, *_, **__):
    if run.config.mesh.data == 1:
      raise crash
    return {'per_device_bytes': {'total': 0.5 * tpu.chip.hbm_bytes}}
  monkeypatch.setattr(compiled, 'compile_step', compile_step)
  rows = [{'mesh': dict(data=d, fsdp=1, tensor=1, expert=1, context=1, stage=1),
           'pipeline_microbatches': 0, 'pipeline_repeats': 1, 'invalid': None,
           'step_seconds': float(d), 'per_device_bytes': 2**30, 'fits': True} for d in (1, 2)]
  run = run_lib.resolve(helpers.load(helpers.config_file('gpt_shakespeare', arg=None)))
  assert sweep.confirm(run, rows, 1, None, tpu.chip) == 1
  assert 'compile_failed' in rows[0] and rows[1]['compiled_fits']
  assert suggest.best(run, tpu, rows).row is rows[1]
  shown = sweep.table(rows, tpu).splitlines()[2:]
  assert shown[0].split()[0] == '1' and 'failed: the compiler failed' in shown[0]


def test_the_plan_says_what_the_group_limit_does_to_the_all_to_all():
  # DeepSeek-V3 on 64 expert shards: groups of 32 experts are blocks of 8 shards, a token
  # reaches at most 4 blocks (8 without the limit); on 4 shards, 2 groups to a shard: at
  # most 4 shards, not 8 -> all 4
  for shards, blocks, reach in ((64, 8, 8), (4, 0, 4)):
    config = helpers.load(helpers.config_file('deepseek_v3', arg=None),
                             ['mesh.data=1', f'mesh.expert={shards}', 'mesh.fsdp=4'])
    result = analytic.plan(run_lib.resolve(config), 4 * shards)
    assert result['moe']['moe_layers'] == 58  # 61 less the 3 dense
    assert result['moe']['group_limit'] == {
        'groups': 8, 'top_groups': 4, 'shards_per_group': blocks, 'groups_reached_at_most': 4,
        'groups_reached_at_most_without_limit': 8, 'shards_reached_at_most': reach}
  assert 'land in at most 4 of 8 groups' in analytic.report(result)


def test_the_sweep_table_shows_the_fastest_meshes_that_fit_and_counts_the_rest():
  from zoo.plan import sweep  # pylint: disable=g-import-not-at-top
  from zoo.plan import topology  # pylint: disable=g-import-not-at-top
  row = lambda data, seconds, fits=True, invalid=None: {
      'mesh': dict(data=data, fsdp=1, tensor=1, expert=1, context=1, stage=1),
      'pipeline_microbatches': 0, 'pipeline_repeats': 1, 'invalid': invalid,
      'step_seconds': seconds, 'per_device_bytes': 2**30, 'fits': fits}
  rows = [row(1, 1.0), row(2, 2.0), row(4, 3.0), row(8, 4.0, fits=False),
          row(16, 0, invalid='a reason'), row(32, 0, invalid='another')]
  tpu = topology.parse('v5p-8')
  lines = sweep.table(rows, tpu, top=2).splitlines()
  assert [line.split()[0] for line in lines[2:4]] == ['1', '2'] and len(lines) == 5
  assert lines[-1] == ('... 1 more fit (--plan_sweep_top=N), 1 do not fit, 2 cannot shard the '
                       'shape (--plan_sweep_all shows every mesh and why)')
  every = sweep.table(rows, tpu, everything=True).splitlines()
  assert len(every) == 2 + 6 and every[-1].endswith('skipped: another')


def test_with_remat_full_each_layer_keeps_its_input_alone():
  """The traced residuals (zoo/plan/residuals.py) by hand: with remat full a layer keeps
  its [L, D] input, in the compute dtype (and RoPE's few frequencies); on a ring of 2 a
  device's half of it; without remat a layer keeps more than that."""
  config = helpers.tiny_config(num_layers=3, remat='full')
  m, length = config.model, config.data.seq_len
  row = length * m.d_model * np.dtype(m.dtype).itemsize
  assert residuals.measure(config, 'cpu')['layers'] == pytest.approx(3 * row, rel=0.05)
  assert residuals.measure(config, 'cpu', context=2)['layers'] == pytest.approx(3 * row / 2,
                                                                                rel=0.05)
  assert residuals.measure(config, 'cpu')['layer'] > 2 * row


def test_a_tensor_shard_holds_a_layers_residual_stream_whole_and_not_the_losss_residuals():
  """XLA:TPU's peak at a rematerialised dense layer's backward on tensor 2, by hand: the
  layers' kept inputs (split over tensor between layers), and 0.8 of the layer's working
  set with its [tokens, D] values in the compute dtype whole on each shard (the rules split
  heads and F only) and its float32 [tokens, D] ones (the norms') recomputed; the loss's and
  final norm's residuals are freed before it."""
  config = helpers.tiny_config(num_layers=2, remat='full', dtype='bfloat16', mlp_dim=1024)
  config.mesh.update(data=2, tensor=2)
  run = run_lib.resolve(config)
  traced = residuals.measure(run.config, 'tpu')
  assert 0 < traced['layer_embed'] < traced['layer']
  assert 0 < traced['layer_float32'] < traced['layer'] - traced['layer_embed']
  assert traced['layers'] < traced['kept']  # the final norm's and the loss's residuals
  rows = config.train.batch_size / 2
  sizes = {a: 1 for a in sharding.MESH_AXES} | {'data': 2, 'tensor': 2}
  fit = memory.FITS['tpu']
  assert (fit.working, fit.float32) == (0.8, 0.0) and preflight.estimate(run, sizes, 'tpu')[
      'activations'] == pytest.approx(rows / 2 * (traced['layers'] + 0.8 * (
          traced['layer'] + traced['layer_embed'] - traced['layer_float32'])))


def test_a_float32_model_has_no_narrower_float32_values_to_recompute():
  config = helpers.tiny_config(num_layers=2, remat='full', dtype='float32')
  assert residuals.measure(config, 'tpu')['layer_float32'] == 0


def test_on_tensor_and_fsdp_a_tied_tables_float32_gradient_is_held_split_over_tensor_alone(
    monkeypatch):
  """XLA:TPU holds a tied table's float32 gradient, [vocab / tensor, D], through the
  backward on tensor > 1 (summed over fsdp at the end); on tensor 1, or untied, it does not:
  by hand, the 64 x 32 table's 8 KiB over tensor 2."""
  fit = memory.FITS['tpu']

  def held(tied, **mesh):
    config = helpers.tiny_config(num_layers=2, remat='full', dtype='bfloat16',
                                 tie_embeddings=tied)
    config.mesh.update(data=1, **mesh)
    run, sizes = run_lib.resolve(config), {a: 1 for a in sharding.MESH_AXES} | mesh
    out = []
    for share in (1.0, 0.0):
      monkeypatch.setitem(memory.FITS, 'tpu', dataclasses.replace(fit, tied_gradient=share))
      out.append(preflight.estimate(run, sizes, 'tpu')['activations'])
    return out[0] - out[1]

  assert fit.tied_gradient == 1.0
  assert held(True, fsdp=2, tensor=2) == pytest.approx(64 * 32 * 4 / 2)
  assert held(True, fsdp=4) == 0 and held(False, fsdp=2, tensor=2) == 0


def test_a_groups_working_set_is_its_largest_layer_not_the_groups_average():
  """A MoE group of 2 (a dense layer, then a MoE one): the layer working set is the MoE
  layer's alone, each of the group's layers added one at a time to a traced base of one
  group; the stack's per-layer share stays the group's average."""
  config = helpers.tiny_config(num_layers=4, remat='none')
  config.model.moe.update(num_experts=4, top_k=2, every=2)
  grown = [residuals._traced(config, [n], 'none', 'cpu')[0]  # pylint: disable=protected-access
           for n in (2, 3, 4)]
  dense, moe = grown[1] - grown[0], grown[2] - grown[1]
  assert moe > dense
  measured = residuals.measure(config, 'cpu')
  assert measured['layer'] == pytest.approx(moe)
  assert measured['layers'] == pytest.approx(4 * (dense + moe) / 2, rel=0.01)


def test_the_tpu_fit_holds_a_scanned_groups_deferred_weight_gradient_inputs(monkeypatch):
  """In a layer pattern of p layers, remat full, XLA:TPU's working set adds two [tokens, F]
  and six [tokens, D] arrays for each of the other p - 1 layers (memory.py _deferred), by
  hand, where a weight gradient is summed over up to 32 devices (32 data, or 32 data x 2
  tensor: 64 chips); over 64 (64 data: 64 chips) none."""
  config = helpers.tiny_config(num_layers=3, remat='full', mlp_dim=4096)
  config.model.attention.update(pattern='LLG', window=4, kernel='xla')
  run = run_lib.resolve(config)
  tpu = memory.FITS['tpu']

  def deferred(sizes):
    sizes = {a: sizes.get(a, 1) for a in sharding.MESH_AXES}
    with_it = preflight.estimate(run, sizes, 'tpu')['total']
    with monkeypatch.context() as patch:
      patch.setitem(memory.FITS, 'tpu', dataclasses.replace(tpu, deferred=(0, 0)))
      return with_it - preflight.estimate(run, sizes, 'tpu')['total']

  tokens = config.train.batch_size * config.data.seq_len / 32  # data over 32 devices
  by_hand = lambda tensor: ((3 - 1) * tokens * (2 * 4096 / tensor + 6 * config.model.d_model)
                            * np.dtype(config.model.dtype).itemsize)
  assert tpu.deferred == (2, 6) and deferred({'data': 32}) == pytest.approx(by_hand(1))
  assert deferred({'data': 32, 'tensor': 2}) == pytest.approx(by_hand(2))
  assert deferred({'data': 64}) == 0


def test_a_circular_pipeline_without_remat_keeps_each_iterations_picked_weights(monkeypatch):
  """Every iteration of a circular schedule picks its round's layers from the stage's
  parameters; without remat the backward keeps each pick (compute dtype, split like the
  parameters), by hand; with remat it picks them again, and one round picks the same."""
  monkeypatch.setattr(memory, '_pipeline_activations', lambda *args: 0.0)  # the picks alone
  config = helpers.tiny_config(num_layers=4, remat='none')
  config.train.batch_size, config.model.pipeline_microbatches = 8, 4
  config.mesh.data, config.mesh.stage = 2, 2

  def activations(**model):
    variant = config.copy_and_resolve_references()
    variant.model.update(model)
    run = run_lib.resolve(variant)
    return preflight.estimate(run, analytic.mesh_sizes_for(variant.mesh, 4), 'tpu')[
        'activations']

  # 2 rounds: 2 x 4 + 2 - 1 = 9 iterations, each one layer of the stage's 2 (4 layers of
  # q, out 32 x 32, k, v 32 x 16, two norms of 32, swiglu 3 x 32 x 64), in bfloat16
  layer = 2 * 32 * 32 + 2 * 32 * 16 + 2 * 32 + 3 * 32 * 64
  assert activations(pipeline_repeats=2, dtype='bfloat16') == pytest.approx(9 * layer * 2)
  assert activations(pipeline_repeats=2, remat='full') == 0
  assert activations(pipeline_repeats=1) == 0


def test_the_residuals_leave_out_what_the_weights_alone_give_and_keep_a_weight_shaped_activation():
  """sin(x @ w) with x, w both [8, 8]: the backward keeps cos(x @ w) (an activation, though
  shaped like w) and w's compute-dtype copy (made from w alone: the plan counts gathered
  weights itself); only the activation is counted."""
  f = lambda w, x: jnp.sum(jnp.sin(x @ w.astype(jnp.bfloat16)))
  kept = residuals._residuals(f, jnp.ones((8, 8), jnp.float32), jnp.ones((8, 8), jnp.bfloat16))
  assert [(a.shape, str(a.dtype)) for a in kept] == [((8, 8), 'bfloat16')]


def test_the_compiled_temporaries_are_what_the_buffer_assignment_placed():
  # a 4-layer scan of tanh(h @ w) keeps every layer's [N, D] float32 output for the
  # backward pass: the temporaries the compiler places hold those 4 x N x D floats at least
  layers, n, d = 4, 512, 128

  def loss(w, h):
    return jax.lax.scan(lambda h, w_l: (jnp.tanh(h @ w_l), None), h, w)[0].sum()
  lowered = jax.jit(jax.grad(loss)).lower(jnp.zeros((layers, d, d)), jnp.zeros((n, d)))
  step, placed = compiled.compile_placed(lowered)
  assert layers * n * d * 4 <= placed <= step.memory_analysis().temp_size_in_bytes
  bytes_ = compiled.memory_bytes(step.memory_analysis(), placed)
  assert bytes_['temporaries'] == placed and bytes_['arguments'] == (layers * d + n) * d * 4


@pytest.mark.parametrize('name,words,not_words', [
    ('gpt_shakespeare', 'seq_len/2 causal)', ('window', 'chunk', 'DeltaNet')),
    ('mistral_7b', "per query: a window's mean where local)", ('seq_len/2', 'DeltaNet')),
    ('llama4_scout', 'seq_len/2 causal, chunk/2 where chunked)', ('window', 'DeltaNet')),
    ('qwen3_next_80b_a3b', "seq_len/2 causal; + the delta rule's chunk matmuls on Gated "
                           'DeltaNet layers)', ('window', 'chunk/2')),
])
def test_the_flops_line_names_only_the_attention_the_model_has(name, words, not_words):
  line = next(l for l in analytic.report(analytic.plan(run_lib.resolve(helpers.smoke(name))))
              .splitlines() if l.startswith('training FLOPs/token'))
  assert line.endswith(words) and not any(w in line for w in not_words), line


def test_a_compiled_plan_labels_the_analytic_parts_apart_from_the_compilers(capsys):
  result = plan.run(run_lib.load(helpers.config_file('gpt_shakespeare')), compile_step=True)
  lines = capsys.readouterr().out.splitlines()
  analytic_line = next(l for l in lines if l.startswith('per device'))
  assert analytic_line.startswith('per device (analytic): params ')
  assert analytic_line.endswith("; the compiler's on the compiled train step line")
  assert 'arguments' not in analytic_line and 'temporaries' not in analytic_line
  compiled_line = next(l for l in lines if l.startswith('compiled train step: '))
  assert re.search(r'GiB per device \(arguments .*, outputs_not_aliased .*, temporaries .*, '
                   r'code .*; the memory model estimated', compiled_line), compiled_line
  analytic_total = result['analytic_bytes_per_device']['total']
  assert analytic_total == sum(v for k, v in result['analytic_bytes_per_device'].items()
                               if k != 'total')
  assert result['per_device_bytes']['total'] == sum(result['per_device_bytes'][k]
                                                    for k in analytic.COMPILED_PARTS)


def test_the_serving_line_counts_pages_per_device_by_hand(capsys):
  config = helpers.load(helpers.config_file('llama3_8b', arg=None),
                        ['mesh.data=1', 'mesh.tensor=8', 'serve.num_pages=1000',
                         'serve.page_size=16'])
  result = plan.run(run_lib.resolve(config), topology_name='h200-8')
  v = result['serving']
  page = 32 * (2 * 8 * 128 * 2 // 8) * 16  # layers x bf16 keys and values over tensor 8
  assert v['page_bytes_per_device'] == page and v['pool_bytes_per_device'] == 1000 * page
  weights = result['per_device_bytes']['params']
  assert v['weights_bytes_per_device'] == weights and v['state_bytes_per_device'] == 0
  hbm = topology.CHIPS['h200'].hbm_bytes
  assert v['pages_fit_per_device'] == int((hbm * 0.9 - weights) // page)
  assert 'serving (zoo.serve): a page of 16 tokens holds 0.2 MiB per device' in \
      capsys.readouterr().out
