"""Benchmark: the plan's memory model against the TPU compiler over the calibration grid
(zoo/plan/calibration.py: decoders, MoE with and without an expert axis, MLA, T5, umT5 and
T5Gemma with flash_bias, encoders; pipeline and context axes; remat none and full; 512 to
32k tokens), each point AOT-compiled for its v5p slice through libtpu on this machine.

    JAX_PLATFORMS=cpu python benchmarks/plan_calibration.py [--only=NAME,...]
        [--results=/tmp/zoo_plan_calibration.json] [--recompile]

Prints a markdown table (estimate, compiled GiB per chip, their ratio, compile seconds) and
how many points lie within 0.85-1.15. The compiler's bytes are kept in --results, so a run
after a change to the model re-estimates every point in seconds and compiles only new
points (--recompile compiles all again: after a change to the step itself). A point that
fails to compile for another reason than memory shows its error in the table.
"""

import argparse
import json
import os

from zoo import platform
from zoo.plan import calibration

GIB = 2**30


def _row(point, result):
  if 'error' in result:
    return f'| {point.name} | {point.describe()} | | | error: {result["error"]} | |'
  estimate, compiled = result['estimate']['total'], result['compiled']['total']
  more = '> ' if result['compiled'].get('at_least') else ''
  return (f'| {point.name} | {point.describe()} | {estimate / GIB:.2f} | '
          f'{more}{compiled / GIB:.2f} | {estimate / compiled:.2f} | {result["seconds"]:.0f} |')


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--only', default='', help='comma-separated point names')
  parser.add_argument('--results', default='/tmp/zoo_plan_calibration.json')
  parser.add_argument('--recompile', action='store_true')
  args = parser.parse_args()
  names = args.only.split(',') if args.only else list(calibration.BY_NAME)
  unknown = [n for n in names if n not in calibration.BY_NAME]
  if unknown:
    parser.error(f'--only: unknown points {unknown}; the grid: {list(calibration.BY_NAME)}')
  saved = {}
  if os.path.exists(args.results) and not args.recompile:
    with open(args.results, encoding='utf-8') as f:
      saved = json.load(f)
  print('| point | config, slice, mesh | estimate GiB | compiled GiB | ratio | compile s |')
  print('|---|---|---|---|---|---|', flush=True)
  ratios = []
  for name in names:
    point = calibration.BY_NAME[name]
    try:
      result = calibration.measure(point, saved.get(name))
    except Exception as e:  # pylint: disable=broad-except  # the table says which
      result = {'error': str(e).splitlines()[0][:200]}
    if 'error' not in result:
      saved[name] = result
      with open(args.results, 'w', encoding='utf-8') as f:
        json.dump(saved, f, indent=1)
      ratios.append(result['estimate']['total'] / result['compiled']['total'])
    print(_row(point, result), flush=True)
  within = sum(0.85 <= r <= 1.15 for r in ratios)
  print(f'\n{within} of {len(ratios)} points within 0.85-1.15, the lowest ratio '
        f'{min(ratios, default=float("nan")):.2f}, the highest {max(ratios, default=float("nan")):.2f}')


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
