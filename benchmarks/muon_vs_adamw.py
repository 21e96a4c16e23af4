"""Muon against AdamW on the default job: equal steps and tokens, each at 3 learning rates,
the final eval loss of each and the best of each optimizer.

    python benchmarks/muon_vs_adamw.py --runs=runs/muon_vs_adamw

Runs `python -m zoo.launch --config=configs/gpt_shakespeare.py` six times (one workdir
each under RUNS: a finished run is read, not rerun) and prints the table that
docs/performance.md holds. Muon's update is scaled to AdamW's RMS (optim.muon.update_rms),
so both sweep the same rates.
"""

import argparse
import json
import os
import platform
import subprocess
import sys

OPTIMIZERS = ('adamw', 'muon')
LEARNING_RATES = (1e-3, 3e-3, 1e-2)  # the default job's 3e-3, a factor ~3 either side


def final_eval_loss(workdir):
  """The last eval loss of a finished run, or None."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return None
  with open(path, encoding='utf-8') as f:
    rows = [json.loads(line) for line in f]
  if not any(r.get('event') == 'end' for r in rows):
    return None
  return [r['eval_loss'] for r in rows if 'eval_loss' in r][-1], rows


def run(workdir, optimizer, learning_rate):
  subprocess.run([sys.executable, '-m', 'zoo.launch', '--config=configs/gpt_shakespeare.py',
                  f'--workdir={workdir}', f'--config.optim.name={optimizer}',
                  f'--config.optim.learning_rate={learning_rate}'], check=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--runs', required=True, help='a directory for the six workdirs')
  args = parser.parse_args()
  results = {}
  for optimizer in OPTIMIZERS:
    for rate in LEARNING_RATES:
      workdir = os.path.join(args.runs, f'{optimizer}_{rate:g}')
      if final_eval_loss(workdir) is None:
        run(workdir, optimizer, rate)
      loss, rows = final_eval_loss(workdir)
      end = [r for r in rows if r.get('event') == 'end'][-1]
      results[optimizer, rate] = loss, end['time_step'] / end['step'] * 1e3
  print(f'gpt_shakespeare, 300 steps x 32 x 128 tokens, on {platform.processor() or "CPU"} '
        f'({os.cpu_count()} cores)\n')
  print('| optimizer | learning rate | final eval loss | ms/step |')
  print('|---|---|---|---|')
  for (optimizer, rate), (loss, ms) in results.items():
    print(f'| {optimizer} | {rate:g} | {loss:.4f} | {ms:.0f} |')
  best = {o: min(results[o, r][0] for r in LEARNING_RATES) for o in OPTIMIZERS}
  print('\nbest: ' + ', '.join(f'{o} {loss:.4f}' for o, loss in best.items()) +
        f"; muon / adamw {best['muon'] / best['adamw']:.4f}")


if __name__ == '__main__':
  main()
