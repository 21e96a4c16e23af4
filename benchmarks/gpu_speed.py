"""Benchmark: the zoo's speed on one NVIDIA GPU, each change measured (issue #65's numbers),
in one prepared script.

    python benchmarks/gpu_speed.py [--out=DIR] [--steps=5] [--only=NAME,...] [--smoke]

Every variant runs in a process of its own (its XLA flags, its memory and a failure stay
its own: a failed variant is a row with its error); the tables come last, the JSON of every
number in DIR/gpu_speed.json. The parts:

1. train: llama3_8b's shape cut to 2 layers at 16 x 4096, bfloat16, cuDNN attention, remat
   none (the setting of docs/performance.md's GPU table), then each change alone: XLA flags
   (cuBLAS for every GEMM instead of Triton's; the latency-hiding scheduler), remat 'dots'
   at batch 16 and 32; tokens/s, MFU (zoo/counting.py's FLOPs against the card's dense bf16
   peak, zoo/train/metrics.py), gain over the first row;
2. lean: llama3_8b whole (32 layers) on one card at 4 x 4096, remat full: LoRA rank 16 and
   Adafactor, each alone;
3. fp8: part 1's shape with model.quant.mode='fp8' (zoo/models/quant.py): tokens/s against
   part 1's first row; whether the compiled step's dots take f8 operands (its HLO); the
   losses of `--steps` steps on one batch beside bfloat16's;
4. decode: gpt2_xl and llama3_8b, greedy 32 + 128 tokens at batch 1, 8 and 32 (the loop one
   lax.while_loop: zoo/infer/generate.py), with XLA's default and with while loops in
   command buffers (CUDA graphs); tokens/s beside the HBM roofline: the card's bandwidth
   (zoo/plan/topology.py) over the bytes one token's step reads (the bfloat16 weights, the
   KV cache at the mean length);
5. plan: for llama3_8b (2 layers), gpt2_xl and qwen3_8b (2 layers) the plan's step time
   (its roofline at the card's peak) and the sweep's bytes (zoo/plan/memory.py, XLA:GPU's
   fit) against the measured step and the compiled step's bytes: part 1's runs.

--smoke runs the same parts at tiny shapes on whatever jax has (a CPU), to check the script
before a device is lent; its numbers mean nothing. On the offline GPU machine (the wheels of
../shared/device/README.md), in two calls of under 10 minutes each (FIRST by default, then
the rest):

    python3 benchmarks/gpu_speed.py --out=$OUT
    python3 benchmarks/gpu_speed.py --out=$OUT --only=lhs,dots,lora,adafactor,\
        decode-gpt2_xl-graphs,decode-llama3_8b-graphs
"""

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

os.environ.setdefault('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.92')  # each child's jax reads it
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 2**30
LLAMA_2L = ('llama3_8b', ['model.num_layers=2', 'data.seq_len=4096'])
CUBLAS = '--xla_gpu_enable_triton_gemm=false'
LHS = '--xla_gpu_enable_latency_hiding_scheduler=true'
GRAPHS = ('--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,'
          'CONDITIONAL --xla_gpu_graph_min_graph_size=1')
# name -> (part, config, overrides, batch, XLA flags); part 1's first row is the baseline
VARIANTS = {
    'bf16': ('train', *LLAMA_2L, 16, ''),
    'cublas': ('train', *LLAMA_2L, 16, CUBLAS),
    'lhs': ('train', *LLAMA_2L, 16, LHS),
    'dots': ('train', LLAMA_2L[0], [*LLAMA_2L[1], 'model.remat=dots'], 16, ''),
    'dots-b32': ('train', LLAMA_2L[0], [*LLAMA_2L[1], 'model.remat=dots'], 32, ''),
    'lora': ('train', 'llama3_8b', ['data.seq_len=4096', 'model.remat=full', 'train.lora.rank=16'],
             4, ''),
    'adafactor': ('train', 'llama3_8b', ['data.seq_len=4096', 'model.remat=full',
                                         'optim.name=adafactor', 'optim.eps=1e-08'], 4, ''),
    'fp8': ('fp8', LLAMA_2L[0], [*LLAMA_2L[1], 'model.quant.mode=fp8'], 16, ''),
    'gpt2_xl': ('train', 'gpt2_xl', ['data.seq_len=1024'], 8, ''),
    'qwen3_8b': ('train', 'qwen3_8b', ['model.num_layers=2', 'data.seq_len=4096'], 16, ''),
    'decode-gpt2_xl': ('decode', 'gpt2_xl', [], 1, ''),
    'decode-gpt2_xl-graphs': ('decode', 'gpt2_xl', [], 1, GRAPHS),
    'decode-llama3_8b': ('decode', 'llama3_8b', [], 1, ''),
    'decode-llama3_8b-graphs': ('decode', 'llama3_8b', [], 1, GRAPHS),
}
# the first call's variants: part 1's baseline and its likeliest gains, fp8, decoding, the plan
FIRST = ('bf16', 'cublas', 'dots-b32', 'fp8', 'gpt2_xl', 'qwen3_8b', 'decode-gpt2_xl',
         'decode-llama3_8b')
PLANNED = ('bf16', 'gpt2_xl', 'qwen3_8b')  # part 5's shapes
SAME_SHAPE = ('bf16', 'cublas', 'lhs', 'dots', 'dots-b32', 'fp8')  # gains over 'bf16'
DECODE_BATCHES = (1, 8, 32)
PROMPT, NEW = 32, 128
# --smoke: every config at this size
SMOKE = ['model.num_layers=2', 'model.d_model=64', 'model.num_heads=4', 'model.num_kv_heads=2',
         'model.head_dim=16', 'model.mlp_dim=128', 'model.vocab_size=512', 'data.seq_len=64',
         'model.max_length=256']


def worker(name, steps, smoke):
  """One variant in this process -> its numbers (a dict)."""
  import jax  # pylint: disable=g-import-not-at-top
  from zoo import platform  # pylint: disable=g-import-not-at-top
  platform.apply()
  part, config_name, overrides, batch, _ = VARIANTS[name]
  if smoke:
    overrides = [*overrides, *SMOKE]
    batch = min(batch, 4)
  overrides = [*overrides, f'train.batch_size={batch}', 'model.dtype=bfloat16',
               'model.attention.kernel=' + ('gpu' if jax.default_backend() == 'gpu' else 'xla')]
  if not any(o.startswith('model.remat=') for o in overrides):
    overrides.append('model.remat=none')
  device = {'device': f'{jax.devices()[0].device_kind}, jax {jax.__version__}'}
  if part == 'decode':
    return {**device, **_decode(config_name, overrides, smoke)}
  out = {**device, **_train(config_name, overrides, steps)}
  if part == 'fp8':
    out.update(_fp8_checks(config_name, overrides, steps))
  if name in PLANNED:
    out.update(_planned(config_name, overrides))
  return out


def _load(config_name, overrides):
  from zoo import run as run_lib  # pylint: disable=g-import-not-at-top
  return run_lib.load(f'configs/{config_name}.py', overrides)


def _train(config_name, overrides, steps):
  from zoo.bench import __main__ as bench  # pylint: disable=g-import-not-at-top
  z = bench.measure(_load(config_name, overrides), runs=1, steps=steps, decode_batches=[],
                    prompt_len=PROMPT, new_tokens=NEW, use_torch=False)['zoo']
  return {'tokens_per_sec': z['train_tokens_per_sec'], 'step_seconds': z['step_ms'] / 1e3,
          'mfu': z['mfu'], 'model_tflops': z['model_gflops'] / 1e3,
          'compiled_bytes': z['memory']['total'], 'compile_seconds': z['compile_seconds'],
          'first_loss': z['first_loss']}


def _fp8_checks(config_name, overrides, steps):
  """The compiled fp8 step's f8 dots, and the losses of `steps` steps on one batch with
  fp8 and bfloat16 matmuls from the same initial parameters."""
  from zoo.bench import jax_side  # pylint: disable=g-import-not-at-top
  losses, hlo = {}, ''
  for mode in ('fp8', 'none'):
    run = _load(config_name, [*overrides, f'model.quant.mode={mode}'])
    trainer = jax_side.Trainer(run, jax_side.random_batch(run.config))
    if mode == 'fp8':
      hlo = trainer.step_fn.as_text()
    losses[mode] = [trainer.first_loss] + [float(trainer.step()['loss'])
                                           for _ in range(steps - 1)]
  f8_lines = [line for line in hlo.splitlines() if 'f8e4m3' in line or 'f8e5m2' in line]
  return {'f8_dots': sum(('dot(' in l or 'gemm' in l or 'matmul' in l) for l in f8_lines),
          'f8_lines': len(f8_lines), 'losses_fp8': losses['fp8'],
          'losses_bf16': losses['none'],
          'loss_gap': max(abs(a - b) for a, b in zip(losses['fp8'], losses['none']))}


def _decode(config_name, overrides, smoke):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from zoo import counting  # pylint: disable=g-import-not-at-top
  from zoo.bench import jax_side  # pylint: disable=g-import-not-at-top
  from zoo import families  # pylint: disable=g-import-not-at-top
  from zoo.plan import analytic  # pylint: disable=g-import-not-at-top
  from zoo.plan import topology  # pylint: disable=g-import-not-at-top
  run = _load(config_name, overrides)
  m = run.config.model
  model = families.build(m, run.config.train.lora)
  # the weights in bfloat16, as they are read (an 8B model's float32 AdamW state would not
  # fit beside them: no train state is made)
  variables = jax.jit(lambda key: jax.tree.map(
      lambda x: x.astype(jnp.bfloat16) if x.dtype == jnp.float32 else x,
      model.init(key, families.example_batch(m, 1, 8))))(jax.random.PRNGKey(0))
  chip = topology.chip_of(jax.devices()[0]) or topology.CHIPS['h100']
  weights = counting.param_count(counting.abstract_params(run.config)) * 2
  kv_per_token = analytic.kv_cache(run.config, families.get(m).kv_cache_layers(m))[
      'kv_cache_bytes_per_token']  # every cached layer's, in the compute dtype
  out = {'weights_bytes': weights, 'bandwidth': chip.hbm_bandwidth, 'batches': {}}
  for b in DECODE_BATCHES if not smoke else (1, 2):
    decoder = jax_side.Decoder(model, variables, b, PROMPT, NEW)
    decoder.run()
    start = time.perf_counter()
    decoder.run()
    seconds = time.perf_counter() - start
    read = weights + b * (PROMPT + NEW / 2) * kv_per_token  # one step's bytes, mean length
    out['batches'][b] = {'tokens_per_sec': b * NEW / seconds,
                         'roofline_tokens_per_sec': b * chip.hbm_bandwidth / read,
                         'compile_seconds': decoder.compile_seconds}
  return out


def _planned(config_name, overrides):
  """The plan's step time on this card and the sweep's bytes (XLA:GPU's fit) for one device."""
  import jax  # pylint: disable=g-import-not-at-top
  from zoo import counting  # pylint: disable=g-import-not-at-top
  from zoo import sharding  # pylint: disable=g-import-not-at-top
  from zoo.plan import analytic  # pylint: disable=g-import-not-at-top
  from zoo.plan import sweep  # pylint: disable=g-import-not-at-top
  from zoo.plan import topology  # pylint: disable=g-import-not-at-top
  run = _load(config_name, overrides)
  chip = topology.chip_of(jax.devices()[0]) or topology.CHIPS['h100']
  sizes = {a: 1 for a in sharding.MESH_AXES}
  boxed = counting.abstract_params(run.config)
  base = analytic.plan(run, mesh_sizes=sizes, boxed=boxed)
  seconds, bytes_ = sweep.estimate(run.config, sizes, chip, base, boxed)
  return {'planned_seconds': seconds, 'planned_bytes': bytes_, 'planned_on': chip.generation}


def _spawn(name, args):
  """Runs one variant in a child with its XLA flags -> its numbers or {'error': ...}."""
  flags = VARIANTS[name][4]
  env = dict(os.environ, XLA_FLAGS=' '.join(filter(None, [os.environ.get('XLA_FLAGS'), flags])))
  path = os.path.join(args.out, f'gpu_speed_{name}.json')
  if os.path.exists(path):  # an earlier run's: not to be read as this one's
    os.remove(path)
  command = [sys.executable, os.path.abspath(__file__), f'--worker={name}',
             f'--steps={args.steps}', f'--out={args.out}'] + (['--smoke'] if args.smoke else [])
  start = time.perf_counter()
  print(f'== {name} (XLA_FLAGS={flags or "default"})', flush=True)
  done = subprocess.run(command, env=env, cwd=REPO, check=False)
  if done.returncode or not os.path.exists(path):
    result = {'error': f'exit {done.returncode} (its traceback above)'}
  else:
    with open(path, encoding='utf-8') as f:
      result = json.load(f)
  print(f'== {name}: {time.perf_counter() - start:.0f} s', flush=True)
  return result


def report(results):
  """The tables (markdown) of the numbers in `results` (name -> numbers)."""
  devices = sorted({r['device'] for r in results.values() if 'device' in r})
  lines = [f'on {" and ".join(devices) or "no device (every variant failed)"}']
  base = results.get('bf16', {})
  lines.append('| variant | XLA flags | batch | tokens/s | step s | MFU | gain | GiB compiled |')
  lines.append('|---|---|---|---|---|---|---|---|')
  for name, (part, _, overrides, batch, flags) in VARIANTS.items():
    r = results.get(name)
    if r is None or part == 'decode':
      continue
    if 'error' in r:
      lines.append(f'| {name} | {flags or "-"} | {batch} | {r["error"]} |')
      continue
    gain = (r['tokens_per_sec'] / base['tokens_per_sec']
            if name in SAME_SHAPE and 'tokens_per_sec' in base else None)
    lines.append(f'| {name} | {flags or "-"} | {batch} | {r["tokens_per_sec"]:,.0f} | '
                 f'{r["step_seconds"]:.3f} | {(r["mfu"] or 0):.1%} | '
                 f'{"-" if gain is None else f"{gain:.2f}x"} | '
                 f'{r["compiled_bytes"] / GIB:.1f} |')
  fp8 = results.get('fp8', {})
  if 'f8_lines' in fp8:
    lines.append(f'\nfp8: {fp8["f8_dots"]} dots/GEMMs of {fp8["f8_lines"]} HLO lines with f8 '
                 f'types; losses fp8 {fp8["losses_fp8"]} against bf16 {fp8["losses_bf16"]} '
                 f'(largest gap {fp8["loss_gap"]:.4f})')
  lines.append('\n| decode | batch | tokens/s | HBM roofline tokens/s | of the roofline |')
  lines.append('|---|---|---|---|---|')
  for name, r in results.items():
    if VARIANTS[name][0] != 'decode':
      continue
    if 'error' in r:
      lines.append(f'| {name} | {r["error"]} |')
      continue
    for b, d in r['batches'].items():
      lines.append(f'| {name} | {b} | {d["tokens_per_sec"]:,.0f} | '
                   f'{d["roofline_tokens_per_sec"]:,.0f} | '
                   f'{d["tokens_per_sec"] / d["roofline_tokens_per_sec"]:.0%} |')
  lines.append('\n| shape | planned step s | measured step s | ratio | sweep GiB | compiled GiB '
               '| ratio |')
  lines.append('|---|---|---|---|---|---|---|')
  for name in PLANNED:
    r = results.get(name, {})
    if 'planned_seconds' in r:
      lines.append(f'| {name} | {r["planned_seconds"]:.3f} | {r["step_seconds"]:.3f} | '
                   f'{r["planned_seconds"] / r["step_seconds"]:.2f} | '
                   f'{r["planned_bytes"] / GIB:.1f} | {r["compiled_bytes"] / GIB:.1f} | '
                   f'{r["planned_bytes"] / r["compiled_bytes"]:.2f} |')
  return '\n'.join(lines)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--out', default=os.environ.get('OUT', '.'))
  parser.add_argument('--steps', type=int, default=5)
  parser.add_argument('--only', default='', help='variants, comma-separated (default: '
                      f'{",".join(FIRST)}): ' + ', '.join(VARIANTS))
  parser.add_argument('--smoke', action='store_true')
  parser.add_argument('--worker', default='', help=argparse.SUPPRESS)
  args = parser.parse_args()
  names = [n for n in args.only.split(',') if n] or list(FIRST)
  unknown = [n for n in names + ([args.worker] if args.worker else []) if n not in VARIANTS]
  if unknown:
    parser.error(f'--only: unknown variants {unknown}; they are {", ".join(VARIANTS)}')
  os.makedirs(args.out, exist_ok=True)
  if args.worker:
    os.chdir(REPO)
    sys.path.insert(0, REPO)
    try:
      result = worker(args.worker, args.steps, args.smoke)
    except Exception:  # pylint: disable=broad-except
      traceback.print_exc()
      sys.exit(1)
    with open(os.path.join(args.out, f'gpu_speed_{args.worker}.json'), 'w',
              encoding='utf-8') as f:
      json.dump(result, f, default=str)
    return
  results = {name: _spawn(name, args) for name in names}
  with open(os.path.join(args.out, 'gpu_speed.json'), 'w', encoding='utf-8') as f:
    json.dump(results, f, indent=1, default=str)
  print('\ncommand: python3 benchmarks/gpu_speed.py ' + ' '.join(sys.argv[1:]))
  print(report(results), flush=True)


if __name__ == '__main__':
  main()
