"""Benchmark: per-device memory of a decoder train step against sequence length, splash vs
XLA attention, from the TPU compiler (AOT for a TPU slice on this machine; needs libtpu).

    JAX_PLATFORMS=cpu python benchmarks/attention_memory.py [--topology=v5p-8]
        [--lengths=1024,2048,4096,8192] [--batch=8]

The model: Llama-style, d_model 1024, 8 heads of 128, 4 layers, vocab 32000, bfloat16
compute, no remat (so the XLA path keeps its [B, H, L, L] probabilities for the backward
pass), fsdp over all chips, `batch` sequences of each length. Prints, per length and kernel,
the compiler's per-device total and temporaries, and the ratio to the shortest length.
"""

import argparse

from zoo import config as config_lib
from zoo.plan import compiled
from zoo.plan import topology


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--topology', default='v5p-8')
  parser.add_argument('--lengths', default='1024,2048,4096,8192')
  parser.add_argument('--batch', type=int, default=8)
  args = parser.parse_args()
  tpu_slice = topology.parse(args.topology)
  devices = topology.devices(tpu_slice)
  lengths = [int(x) for x in args.lengths.split(',')]
  print(f'decoder train step on {args.topology} ({tpu_slice.chips} chips), batch {args.batch}, '
        'per-device bytes from the TPU compiler')
  print(f'{"length":>7} {"kernel":>7} {"total GiB":>10} {"temp GiB":>9} {"x shortest":>11} '
        f'{"compile s":>10}')
  for kernel in ('splash', 'xla'):
    first = None
    for length in lengths:
      config = config_lib.load('configs/llama3_8b.py:smoke', [
          'model.d_model=1024', 'model.num_heads=8', 'model.num_kv_heads=8',
          'model.head_dim=128', 'model.mlp_dim=2816', 'model.num_layers=4',
          'model.vocab_size=32000', 'model.dtype=bfloat16', f'model.max_length={length}',
          f'data.seq_len={length}', f'train.batch_size={args.batch}', 'mesh.data=1',
          'mesh.fsdp=-1', f'model.attention.kernel={kernel}'])
      out = compiled.compile_step(config, devices, scan_corrected_cost=False)
      total = out['per_device_bytes']['total']
      first = first or total
      print(f'{length:>7} {kernel:>7} {total / 2**30:>10.2f} '
            f'{out["per_device_bytes"]["temporaries"] / 2**30:>9.2f} {total / first:>11.2f} '
            f'{out["compile_seconds"]:>10.1f}', flush=True)


if __name__ == '__main__':
  main()
