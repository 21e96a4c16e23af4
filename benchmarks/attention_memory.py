"""Benchmark: per-device memory of a train step against sequence length, a Pallas kernel vs
XLA attention, from the TPU compiler (AOT for a TPU slice on this machine; needs libtpu).

    JAX_PLATFORMS=cpu python benchmarks/attention_memory.py [--model=decoder|t5]
        [--topology=v5p-8] [--lengths=...] [--batch=8]

decoder (splash vs xla, lengths 1024,2048,4096,8192): Llama-style, d_model 1024, 8 heads of
128, 4 layers, vocab 32000, no remat (so the XLA path keeps its [B, H, L, L] probabilities
for the backward pass).
t5 (flash_bias vs xla, lengths 512,2048,8192): t5_v1_1_base as published (12 + 12 layers,
12 heads of 64, relative position bias), decoder length = input length / 4.
Both in bfloat16 with fsdp over all chips and `batch` sequences. Prints, per length and
kernel, the bytes per device the compiler places (total and temporaries) and the ratio to
the shortest length; a step that cannot fit prints the bytes the compiler needed at least.
"""

import argparse

import jax

from zoo import config as config_lib
from zoo import platform
from zoo import run as run_lib
from zoo.plan import compiled
from zoo.plan import topology

MODELS = {
    'decoder': ('configs/llama3_8b.py:smoke', ('splash', 'xla'), '1024,2048,4096,8192', lambda n: [
        'model.d_model=1024', 'model.num_heads=8', 'model.num_kv_heads=8', 'model.head_dim=128',
        'model.mlp_dim=2816', 'model.num_layers=4', 'model.vocab_size=32000',
        f'model.max_length={n}']),
    't5': ('configs/t5_v1_1_base.py', ('flash_bias', 'xla'), '512,2048,8192',
           lambda n: [f'data.target_seq_len={n // 4}']),
}


def _measure(config, devices):
  """-> (total bytes, temporaries bytes, compile seconds), or (None, the bytes the compiler
  needed at least, None) when the step does not fit."""
  try:
    out = compiled.compile_step(run_lib.resolve(config), devices, scan_corrected_cost=False)
  except compiled.DoesNotFit as e:
    return None, e.needed, None
  bytes_ = out['per_device_bytes']
  return bytes_['total'], bytes_['temporaries'], out['compile_seconds']


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--model', default='decoder', choices=sorted(MODELS))
  parser.add_argument('--topology', default='v5p-8')
  parser.add_argument('--lengths', default='')
  parser.add_argument('--batch', type=int, default=8)
  args = parser.parse_args()
  config_file, kernels, lengths, shape = MODELS[args.model]
  tpu_slice = topology.parse(args.topology)
  devices = topology.devices(tpu_slice)
  lengths = [int(x) for x in (args.lengths or lengths).split(',')]
  print(f'{args.model} train step on {args.topology} ({tpu_slice.chips} chips), batch '
        f'{args.batch}, per-device bytes from the TPU compiler')
  print(f'{"length":>7} {"kernel":>10} {"total GiB":>10} {"temp GiB":>9} {"x shortest":>11} '
        f'{"compile s":>10}')
  for kernel in kernels:
    first = None
    for length in lengths:
      config = config_lib.load(config_file, [
          *shape(length), 'model.dtype=bfloat16', f'data.seq_len={length}',
          f'train.batch_size={args.batch}', 'mesh.data=1', 'mesh.fsdp=-1',
          f'model.attention.kernel={kernel}'])
      with jax.default_matmul_precision('default'):
        total, temporaries, seconds = _measure(config, devices)
      if total is None:
        print(f'{length:>7} {kernel:>10} does not fit: the compiler needs at least '
              f'{temporaries / 2**30:.2f} GiB', flush=True)
        continue
      first = first or total
      print(f'{length:>7} {kernel:>10} {total / 2**30:>10.2f} {temporaries / 2**30:>9.2f} '
            f'{total / first:>11.2f} {seconds:>10.1f}', flush=True)


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
