"""Benchmark: MFU of a 1B-8B decoder on one GPU, bfloat16, sequence 4096, cuDNN attention.

    python benchmarks/gpu_mfu.py [--layers=8] [--batch=8] [--steps=10]

Prepared for a GPU machine (`pip install -e '.[gpu]'`, or the zoo's wheels brought to an
offline one). First a correctness check: a small bfloat16 decoder's loss and gradient norm with
cuDNN attention (model.attention.kernel='gpu') against XLA's attention on the same weights
and batch. Then llama3_8b's shape with --layers layers (8 layers: 2.8B parameters, the 128k
vocabulary included; 32 = the full 8B, which with float32 AdamW state needs ~130 GB) trains
--steps steps at batch --batch x 4096, remat 'dots', and the table gives tokens/s, step time
and MFU against the device's dense bf16 peak (zoo/train/metrics.py: 989 TFLOP/s on H100/H200).
"""

import argparse

import jax
import numpy as np

from zoo import config as config_lib
from zoo import counting
from zoo import platform
from zoo.bench import __main__ as bench
from zoo.bench import jax_side


def check_cudnn():
  """-> (loss, grad norm) with kernel 'gpu' and 'xla' on the same small bf16 model."""
  base = ['model.num_layers=2', 'model.d_model=256', 'model.num_heads=4',
          'model.num_kv_heads=2', 'model.mlp_dim=512', 'model.vocab_size=1024',
          'data.seq_len=512', 'train.batch_size=4', 'model.dtype=bfloat16']
  out = {}
  for kernel in ('gpu', 'xla'):
    config = config_lib.load('configs/llama3_8b.py', [*base, f'model.attention.kernel={kernel}'])
    trainer = jax_side.Trainer(config, jax_side.random_batch(config))
    metrics = trainer.step()
    out[kernel] = (trainer.first_loss, float(metrics['grad_norm']))
  return out


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--layers', type=int, default=8)
  parser.add_argument('--batch', type=int, default=8)
  parser.add_argument('--steps', type=int, default=10)
  args = parser.parse_args()
  print(f'devices: {jax.devices()}')
  checked = check_cudnn()
  print(f'cuDNN vs XLA attention, first loss and grad norm: {checked}')
  (loss_gpu, norm_gpu), (loss_xla, norm_xla) = checked['gpu'], checked['xla']
  if not (np.isclose(loss_gpu, loss_xla, rtol=2e-2) and np.isclose(norm_gpu, norm_xla,
                                                                   rtol=5e-2)):
    raise SystemExit('cuDNN attention disagrees with XLA attention; not measuring')
  config = config_lib.load('configs/llama3_8b.py', [
      f'model.num_layers={args.layers}', 'data.seq_len=4096', f'train.batch_size={args.batch}',
      'model.remat=dots', 'model.attention.kernel=gpu', 'model.dtype=bfloat16'])
  results = bench.measure(config, runs=1, steps=args.steps, decode_batches=[], prompt_len=1,
                          new_tokens=1, use_torch=False)
  z = results['zoo']
  params = counting.param_count(counting.abstract_params(config))
  mfu = 'n/a (unknown peak)' if z['mfu'] is None else f'{z["mfu"]:.1%}'
  print('| config | params | seq | batch | attention | tokens/s | step s | MFU |')
  print(f'| llama3_8b, {args.layers} layers | {params / 1e9:.2f}B | 4096 | {args.batch} | '
        f'cuDNN | {z["train_tokens_per_sec"]:,.0f} | {z["step_ms"] / 1e3:.3f} | {mfu} |')

if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
