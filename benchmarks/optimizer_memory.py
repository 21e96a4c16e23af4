"""Benchmark: each optimizer's bytes per chip and collectives in a TPU train step, AOT
(needs libtpu): llama3_8b cut to 16 layers on v5p-32, fsdp 16, batch 16 x 4096.

    JAX_PLATFORMS=cpu python benchmarks/optimizer_memory.py

Prints, for AdamW and Muon (its iteration moved to whole matrices, optim.muon.gather=True,
and left sharded), the arguments and temporaries the compiler places per chip and the
all-to-alls, all-gathers and all-reduces in the compiled step's HLO.
"""

import re

import jax

from zoo import config as config_lib
from zoo import platform
from zoo import run as run_lib
from zoo import sharding
from zoo.plan import compiled
from zoo.plan import topology

SHAPE = ['model.num_layers=16', 'train.batch_size=16', 'mesh.data=1', 'mesh.fsdp=16']
OPTIMIZERS = {'adamw': ['optim.name=adamw'],
              'muon (gather=True)': ['optim.name=muon', 'optim.muon.gather=True'],
              'muon (gather=False)': ['optim.name=muon', 'optim.muon.gather=False']}


def _collectives(hlo_text, op):
  """How many `op` instructions (synchronous or async starts) the HLO text holds."""
  return len(re.findall(rf'= [^ ]+ {op}(-start)?\(', hlo_text))


def main():
  devices = topology.devices(topology.parse('v5p-32'))
  print('llama3_8b, 16 layers, v5p-32, fsdp 16, batch 16 x 4096: GiB per chip as placed')
  print(f'{"optimizer":>20} {"arguments":>10} {"temporaries":>12} {"all-to-all":>11} '
        f'{"all-gather":>11} {"all-reduce":>11}')
  for name, overrides in OPTIMIZERS.items():
    run = run_lib.resolve(config_lib.load('configs/llama3_8b.py', SHAPE + overrides))
    mesh = sharding.make_mesh(run.config.mesh, devices)
    with jax.default_matmul_precision('default'):
      step, placed = compiled.compile_placed(compiled.lower(run, mesh))
    held = compiled.memory_bytes(step.memory_analysis(), placed)
    text = step.as_text()
    print(f'{name:>20} {held["arguments"] / 2**30:>10.2f} {held["temporaries"] / 2**30:>12.2f} '
          + ' '.join(f'{_collectives(text, op):>11}'
                     for op in ('all-to-all', 'all-gather', 'all-reduce')), flush=True)


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
