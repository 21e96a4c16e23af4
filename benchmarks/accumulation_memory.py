"""Compiled per-device bytes of a train step on a TPU slice, by train.microbatches and
with the chunked loss on and off (ahead of time through libtpu; no TPU needed).

    python benchmarks/accumulation_memory.py                      # llama3_8b on v5p-128
    python benchmarks/accumulation_memory.py --config=configs/llama3_8b.py \\
        --topology=v5p-128 --microbatches=1,2,4,8 --overrides=train.batch_size=256

Prints one row per variant: microbatches, loss chunk length, per-device total and
temporaries (GiB) as the compiler places them (zoo/plan/compiled.py), and compile
seconds.
"""

import argparse
import time

import jax

from zoo import config as config_lib
from zoo import platform
from zoo import run as run_lib
from zoo import sharding
from zoo.families import loss as loss_lib
from zoo.plan import compiled
from zoo.plan import topology


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/llama3_8b.py')
  parser.add_argument('--topology', default='v5p-128')
  parser.add_argument('--microbatches', default='1,2,4,8')
  parser.add_argument('--overrides', default='train.batch_size=256,data.seq_len=4096,'
                      'model.remat=full,mesh.data=1,mesh.fsdp=-1')
  args = parser.parse_args()
  tpu_slice = topology.parse(args.topology)
  devices = topology.devices(tpu_slice)
  base = [o for o in args.overrides.split(',') if o]
  variants = [(int(k), -1) for k in args.microbatches.split(',')] + [(1, 0)]
  print(f'{args.config} on {args.topology} ({len(devices)} chips), {" ".join(base)}; '
        f'jax {jax.__version__}')
  print(f'{"microbatches":>12} {"loss chunk":>10} {"total GiB":>10} {"temps GiB":>10} '
        f'{"compile s":>9}')
  for k, chunk in variants:
    config = config_lib.load(args.config, [*base, f'train.microbatches={k}',
                                           f'train.loss_chunk_len={chunk}'])
    mesh = sharding.make_mesh(config.mesh, devices)
    try:
      sharding.check_divisible(config, dict(mesh.shape))
    except config_lib.ConfigError as e:
      print(f'{k:>12} {"":>10} {e}', flush=True)
      continue
    start = time.time()
    placed = compiled.compile_step(run_lib.resolve(config), devices,
                                   scan_corrected_cost=False)['per_device_bytes']
    seconds = time.time() - start
    length = loss_lib.chunk_len(config, config.data.seq_len)
    print(f'{k:>12} {length or "off":>10} {placed["total"] / 2**30:>10.2f} '
          f'{placed["temporaries"] / 2**30:>10.2f} {seconds:>9.0f}', flush=True)


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
