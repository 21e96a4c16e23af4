"""Benchmark: the mesh sweep's analytic per-device memory against the TPU compiler's, for the
meshes it ranks first and any named (AOT for the slice on this machine; needs libtpu).

    JAX_PLATFORMS=cpu python benchmarks/sweep_memory.py [--config=configs/llama3_8b.py]
        [--topology=v5p-128] [--top=3] [--mesh=1,16,4,1 ...] [--config.FIELD=VALUE ...]

Default: llama3_8b at batch 256 x 4096 with full remat (--config.train.batch_size=256
--config.model.remat=full, as notebooks/sharding.ipynb). Prints, for the `top` fastest
meshes that fit by the estimate (and each --mesh=data,fsdp,tensor,expert), the analytic
bytes, the compiled bytes and their ratio.
"""

import argparse
import sys

import jax

from zoo import config as config_lib
from zoo import platform
from zoo import run as run_lib
from zoo.cli import split_overrides
from zoo.plan import sweep
from zoo.plan import topology

DEFAULT_OVERRIDES = ('train.batch_size=256', 'model.remat=full')


def main():
  overrides, argv = split_overrides(sys.argv[1:])
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/llama3_8b.py')
  parser.add_argument('--topology', default='v5p-128')
  parser.add_argument('--top', type=int, default=3)
  parser.add_argument('--mesh', action='append', default=[],
                      help='data,fsdp,tensor,expert to compile besides the top (repeatable)')
  args = parser.parse_args(argv)
  overrides = overrides or list(DEFAULT_OVERRIDES)
  tpu_slice = topology.parse(args.topology)
  config = config_lib.load(args.config, overrides)
  ranked = [r for r in sweep.sweep(run_lib.resolve(config), tpu_slice) if not r['invalid']]
  named = [dict(zip(('data', 'fsdp', 'tensor', 'expert'), map(int, m.split(','))))
           for m in args.mesh]
  best = [r for r in ranked if r['fits']][:args.top]
  rows = best + [r for r in ranked if r['mesh'] in named and r not in best]
  print(f'{args.config} {" ".join(overrides)} on {args.topology}: per-device GiB')
  print(f'{"data":>5} {"fsdp":>5} {"tensor":>6} {"expert":>6} {"analytic":>9} {"compiled":>9} '
        f'{"ratio":>6}')
  devices = topology.devices(tpu_slice)
  for row in rows:
    with jax.default_matmul_precision('default'):
      sweep.confirm(run_lib.resolve(config), [row], 1, devices, tpu_slice.chip,
                    margin=float('inf'))  # the named meshes, whatever the estimate
    mesh, estimate, total = row['mesh'], row['per_device_bytes'], row['compiled_bytes']
    print(f'{mesh["data"]:>5} {mesh["fsdp"]:>5} {mesh["tensor"]:>6} {mesh["expert"]:>6} '
          f'{estimate / 2**30:>9.2f} {total / 2**30:>9.2f} {estimate / total:>6.2f}', flush=True)

if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
