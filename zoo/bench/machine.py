"""What the bench ran on, in words. On CPUs the zoo / PyTorch ratio follows the CPU model
(its matmul libraries: docs/performance.md), so the table's header names the model, its
family and model numbers, the cores this process may use and the vector extensions the
libraries choose kernels by; accelerators give jax's device kind."""

import os
import platform

# x86 extensions that decide which matmul kernels XLA (YNNPACK, oneDNN) and MKL pick
VECTOR_FLAGS = ('avx2', 'avx512f', 'avx512_bf16', 'amx_tile')


def describe_cpu(cpuinfo, cores):
  """/proc/cpuinfo's text and a core count -> e.g. 'AMD EPYC (family 25 model 17, 2 cores,
  avx2 avx512f avx512_bf16)'. The first processor's fields stand for all."""
  fields = {}
  for line in cpuinfo.splitlines():
    key, sep, value = line.partition(':')
    if sep and key.strip() not in fields:
      fields[key.strip()] = value.strip()
  name = fields.get('model name') or platform.processor() or 'unknown CPU'
  details = []
  if 'cpu family' in fields:
    details.append(f'family {fields["cpu family"]} model {fields.get("model", "?")}')
  details.append(f'{cores} core' + ('' if cores == 1 else 's'))
  flags = set(fields.get('flags', '').split())
  vector = [f for f in VECTOR_FLAGS if f in flags]
  if vector:
    details.append(' '.join(vector))
  return f'{name} ({", ".join(details)})'


def describe(device):
  """A jax device -> 'cpu: <describe_cpu>' on CPUs, else its device kind."""
  if device.platform != 'cpu':
    return device.device_kind
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      cpuinfo = f.read()
  except OSError:  # not Linux
    cpuinfo = ''
  cores = (len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity')
           else os.cpu_count())
  return f'cpu: {describe_cpu(cpuinfo, cores)}'
