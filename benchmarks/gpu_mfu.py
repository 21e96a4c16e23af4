"""Benchmark and checks: the zoo on one NVIDIA GPU, in one prepared script.

    python benchmarks/gpu_mfu.py [--out=DIR] [--steps=5]

Correctness first, then speed; each part runs on its own (a failure is printed with its
traceback and the next part runs) and the tables come last:

1. attention: the 'gpu' kernel (cuDNN) and 'xla' in bfloat16, each against XLA in float32 on
   the same inputs (packed rows; causal; bidirectional and causal with a T5-style bias
   [1, H, L, S]; padding; the T5 smoke's shapes; a length of 64 mod 128), forward and the
   gradients of q, k, v and the bias: ||x - ref|| / ||ref||; with padding, cuDNN is also
   given the raw segment mask, whose empty rows its backward turns into NaN
   (docs/contracts.md, Known problems);
2. T5 smoke steps: configs/t5_base.py:smoke in bfloat16, 5 train steps with each kernel on
   the same batches (the tests' family batches: padding rows, uneven loss weights); then
   `python -m zoo.launch` trains it with the 'gpu' kernel, data pipeline and checkpoints;
3. MoE: configs/mixtral_8x7b.py:smoke in float32 (matmuls at full precision), dropless
   (ragged dot) against the capacity path with room for every token (capacity factor =
   experts / top-k): the losses of 3 steps;
4. MFU: llama3_8b's shape cut to 2 layers (1.49B, the 128k vocabulary included) at 4096 and
   gpt2_xl at 1024, bfloat16, cuDNN attention, at the batches below (chosen from the sweep's
   memory model: docs/performance.md); tokens/s and MFU by zoo/counting.py's convention
   against the peak in zoo/train/metrics.py, the MLP matmul alone beside it; the compiled
   step's bytes beside the plan's (state) and the sweep's (whole step) estimates;
5. generation: gpt2_xl, greedy, 32 prompt + 128 new tokens at batch 1 and 8.

Reproduce on a GPU machine: `pip install -e '.[gpu]'` (or, offline, the wheels of
../shared/device/README.md), then the command above. JSON of every number: --out/gpu.json.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

os.environ.setdefault('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.92')  # before jax starts
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # tests.helpers' batches and train steps

# pylint: disable=g-import-not-at-top,wrong-import-position
import jax
import jax.numpy as jnp
import numpy as np

from zoo import config as config_lib
from zoo import counting
from zoo import kernels
from zoo import platform
from zoo import run as run_lib
from zoo.bench import __main__ as bench
from zoo.bench import jax_side
from zoo.kernels import mask as mask_lib
from zoo.plan import analytic
from zoo.plan import preflight

GIB = 2**30
# (config, overrides, batch): the largest power-of-two batch whose sweep estimate (remat
# none, cuDNN attention) leaves a quarter of an H200 free, gpt2_xl's halved after the larger
# one did not fit (docs/performance.md, GPU)
MFU_RUNS = (
    ('llama3_8b', ['model.num_layers=2', 'data.seq_len=4096'], 16),
    ('gpt2_xl', ['data.seq_len=1024'], 8),
)
DECODE_BATCHES = (1, 8)


def relative_error(x, ref):
  x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
  return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


# (case, causal, heads, kv heads, head dim, with a bias, query length, key length, padding
# queries, padding keys): the last four are the T5 smoke's shapes and a length of 64 mod 128
ATTENTION_CASES = (
    ('causal, GQA 8/2, K 128, L 1024', True, 8, 2, 128, False, 1024, 1024, 0, 0),
    ('bidirectional + bias, K 64, L 1024', False, 8, 8, 64, True, 1024, 1024, 0, 0),
    ('causal + bias, K 64, L 1024', True, 8, 8, 64, True, 1024, 1024, 0, 0),
    ('T5 smoke encoder: + bias, K 16, L 64, padding', False, 4, 4, 16, True, 64, 64, 9, 9),
    ('T5 smoke decoder: causal + bias, K 16, L 14, padding', True, 4, 4, 16, True, 14, 14, 3,
     3),
    ('cross: K 16, 14 x 64, padding queries', False, 4, 4, 16, False, 14, 64, 3, 0),
    ('causal, K 128, L 576, padding', True, 8, 8, 128, False, 576, 576, 40, 40),
)


def _segments(B, L, padding):
  ids = np.ones((B, L), np.int32)
  ids[1, L // 3:] = 2  # row 1: two packed documents
  if padding:
    ids[1, L - padding:] = 0  # and padding at its end
  return ids


def check_attention():
  """-> rows of (case, kernel, NaN found, error of out / dq / dk / dv / dbias against XLA in
  float32): ||x - ref|| / ||ref||, padding queries' outputs left out (they reach no loss:
  their cotangent is 0). 'cudnn, raw mask' passes the segment mask with its padding rows
  empty, as the zoo did before zoo/kernels/gpu.keys_of."""
  rng = np.random.default_rng(0)
  B = 2
  rows = []
  for (case, causal, heads, kv_heads, head_dim, with_bias, L, S, q_pad,
       kv_pad) in ATTENTION_CASES:
    q_ids, kv_ids = _segments(B, L, q_pad), _segments(B, S, kv_pad)
    mask = mask_lib.Mask(jnp.asarray(q_ids), jnp.asarray(kv_ids), causal=causal)
    args = [rng.standard_normal(s).astype(np.float32) for s in (
        (B, L, heads, head_dim), (B, S, kv_heads, head_dim), (B, S, kv_heads, head_dim))]
    args.append(rng.standard_normal((1, heads, L, S)).astype(np.float32) if with_bias
                else None)
    real = (q_ids > 0)[:, :, None, None]
    cotangent = rng.standard_normal((B, L, heads, head_dim)).astype(np.float32) * real

    def run(kernel, dtype, args=args, mask=mask, cotangent=cotangent):
      def f(q, k, v, bias):
        if kernel == 'cudnn, raw mask':
          return jax.nn.dot_product_attention(
              q, k, v, bias=bias, is_causal=mask.causal, implementation='cudnn',
              mask=mask_lib.segment_mask(mask.q_segment_ids, mask.kv_segment_ids))
        return kernels.attention(q, k, v, mask, bias=bias, kernel=kernel)
      cast = [None if a is None else jnp.asarray(a, dtype) for a in args]
      out, vjp = jax.vjp(f, *cast)
      return [out * real, *vjp(jnp.asarray(cotangent, dtype))]

    reference = run('xla', jnp.float32)
    for kernel in ('gpu', 'xla') + (('cudnn, raw mask',) if q_pad else ()):
      try:
        got = run(kernel, jnp.bfloat16)
      except Exception as e:  # pylint: disable=broad-except
        rows.append((case, kernel, f'{type(e).__name__}: {str(e)[:200]}', []))
        continue
      nan = any(bool(np.isnan(np.asarray(g, np.float32)).any()) for g in got if g is not None)
      rows.append((case, kernel, nan, [None if r is None else relative_error(g, r)
                                       for g, r in zip(got, reference)]))
  return rows


def t5_smoke_steps(out_dir):
  """-> ({kernel: [(loss, grad norm) of each step]}, the CLI run's last lines, its exit
  status)."""
  from tests import helpers
  losses = {}
  for kernel in ('gpu', 'xla'):
    config = config_lib.load('configs/t5_base.py:smoke', [
        'model.dtype=bfloat16', f'model.attention.kernel={kernel}'])
    rows, _, _ = helpers.train_steps(config, {'data': 1}, 5)
    losses[kernel] = [(round(float(r['loss']), 4), round(float(r['grad_norm']), 4))
                      for r in rows]
  workdir = tempfile.mkdtemp(prefix='t5_gpu_')
  command = [sys.executable, '-m', 'zoo.launch', '--config=configs/t5_base.py:smoke',
             '--config.model.dtype=bfloat16', '--config.model.attention.kernel=gpu',
             '--config.train.steps=20', f'--workdir={workdir}']
  env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE='false')  # this process holds the rest
  done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=150,
                        check=False, env=env)
  with open(os.path.join(out_dir, 't5_launch.log'), 'w', encoding='utf-8') as f:
    f.write(done.stdout + done.stderr)
  return losses, (done.stdout + done.stderr).strip().splitlines()[-3:], done.returncode


def moe_paths():
  """-> {path: [losses of 3 steps], ...} of mixtral's smoke shape, dropless and capacity."""
  out = {}
  for name, factor in (('dropless', 0.0), ('capacity', 8 / 2)):
    config = config_lib.load('configs/mixtral_8x7b.py:smoke', [
        f'model.moe.capacity_factor={factor}', 'train.batch_size=4'])
    with jax.default_matmul_precision('highest'):
      trainer = jax_side.Trainer(run_lib.resolve(config), jax_side.random_batch(config))
      metrics = [trainer.step() for _ in range(2)]
    out[name] = [trainer.first_loss] + [float(m['loss']) for m in metrics]
    out[f'{name} metrics with "drop"'] = {k: float(np.mean(v)) for m in metrics[-1:]
                                          for k, v in m.items() if 'drop' in k}
  return out


def mfu(name, overrides, batch, steps, decode_batches):
  config = config_lib.load(f'configs/{name}.py', [
      *overrides, f'train.batch_size={batch}', 'model.remat=none', 'model.dtype=bfloat16',
      'model.attention.kernel=gpu'])
  sizes = analytic.mesh_sizes_for(config.mesh, 1)
  results = bench.measure(run_lib.resolve(config), runs=1, steps=steps,
                          decode_batches=list(decode_batches),
                          prompt_len=32, new_tokens=128, use_torch=False)
  z = results['zoo']
  return {
      'config': name, 'params': counting.param_count(counting.abstract_params(config)),
      'seq_len': config.data.seq_len, 'batch': batch,
      'flops_per_token': counting.flops_per_token(config),
      'tokens_per_sec': z['train_tokens_per_sec'], 'step_ms': z['step_ms'], 'mfu': z['mfu'],
      'model_tflops': z['model_gflops'] / 1e3, 'matmul_tflops': z['matmul_gflops'] / 1e3,
      'compile_seconds': z['compile_seconds'], 'first_loss': z['first_loss'],
      'compiled_bytes': z['memory']['total'],
      'plan_state_bytes': analytic.plan(run_lib.resolve(config), 1)['per_device_bytes']['total'],
      'sweep_bytes': preflight.estimate(run_lib.resolve(config), sizes, 'gpu')['total'],
      **{f'decode_b{b}': z[f'decode_tokens_per_sec_b{b}'] for b in decode_batches}}


def versions():
  import flax
  import jaxlib
  import optax
  import orbax.checkpoint as ocp
  device = jax.devices()[0]
  out = {'device': device.device_kind, 'jax': jax.__version__,
         'jaxlib': jaxlib.__version__,
         'flax': flax.__version__, 'optax': optax.__version__, 'orbax': ocp.__version__,
         'memory_limit_gib': (device.memory_stats() or {}).get('bytes_limit', 0) / GIB}
  try:
    from jax._src.lib import cuda_versions  # pylint: disable=protected-access
    out['cuda'] = cuda_versions.cuda_runtime_get_version()
    out['cudnn'] = cuda_versions.cudnn_get_version()
  except Exception as e:  # pylint: disable=broad-except
    out['cuda'] = f'? ({type(e).__name__})'
  return out


def part(results, name, fn, *args):
  start = time.perf_counter()
  print(f'== {name}', flush=True)
  try:
    results[name] = fn(*args)
  except Exception:  # pylint: disable=broad-except
    traceback.print_exc()
    results[name] = {'error': traceback.format_exc().strip().splitlines()[-1]}
  print(f'== {name}: {time.perf_counter() - start:.0f} s; {results[name]}', flush=True)


def report(results):
  print('\n' + ' '.join(f'{k} {v}' for k, v in results['versions'].items()))
  attention = results['attention']
  if isinstance(attention, list):
    print('| attention case | kernel | NaN | out | dq | dk | dv | dbias |  (||x - f32|| / '
          '||f32||)')
    for case, kernel, nan, errors in attention:
      print(f'| {case} | {kernel} | {nan} | ' + ' | '.join(
          '-' if e is None else f'{e:.1e}' for e in errors) + ' |')
  for key in ('t5', 'moe'):
    print(f'{key}: {results[key]}')
  print('| config | params | seq | batch | tokens/s | step s | MFU | model TFLOP/s | matmul '
        'alone TFLOP/s | compiled GiB | plan state GiB | sweep GiB | compile s |')
  for run in results['mfu']:
    if 'error' in run:
      print(f'| {run["config"]} | {run["error"]} |')
      continue
    print(f'| {run["config"]} | {run["params"] / 1e9:.2f}B | {run["seq_len"]} | '
          f'{run["batch"]} | {run["tokens_per_sec"]:,.0f} | {run["step_ms"] / 1e3:.3f} | '
          f'{run["mfu"] or 0:.1%} | {run["model_tflops"]:.0f} | {run["matmul_tflops"]:.0f} | '
          f'{run["compiled_bytes"] / GIB:.1f} | {run["plan_state_bytes"] / GIB:.1f} | '
          f'{run["sweep_bytes"] / GIB:.1f} | {run["compile_seconds"]:.0f} |')
    for b in DECODE_BATCHES:
      if f'decode_b{b}' in run:
        print(f'  generation, batch {b}: {run[f"decode_b{b}"]:,.0f} tokens/s')


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--out', default=os.environ.get('OUT', '.'))
  parser.add_argument('--steps', type=int, default=5)
  args = parser.parse_args()
  os.chdir(REPO)
  results = {}
  part(results, 'versions', versions)
  part(results, 'attention', check_attention)
  results['mfu'] = []
  for name, overrides, batch in MFU_RUNS:
    decode = DECODE_BATCHES if name == 'gpt2_xl' else ()
    part(results, name, mfu, name, overrides, batch, args.steps, decode)
    results['mfu'].append({'config': name, **results.pop(name)})
  part(results, 't5', t5_smoke_steps, args.out)
  part(results, 'moe', moe_paths)
  with open(os.path.join(args.out, 'gpu.json'), 'w', encoding='utf-8') as f:
    json.dump(results, f, indent=1, default=str)
  report(results)


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
