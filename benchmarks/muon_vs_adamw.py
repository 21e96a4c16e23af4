"""Muon against AdamW on the default job: equal steps and tokens, each at 3 learning rates
around its best, the eval loss of each at steps 100, 200 and 300.

    python benchmarks/muon_vs_adamw.py --runs=runs/muon_vs_adamw

Runs `python -m zoo.launch --config=configs/gpt_shakespeare.py` seven times (one workdir
each under RUNS: a finished run is read, not rerun) and prints the table that
docs/performance.md holds. Muon's update is scaled to AdamW's RMS (optim.muon.update_rms),
yet on this small model and short run it wants a rate about 3x AdamW's: each optimizer
sweeps 3 rates a factor ~3 apart around its best; Muon's best rate runs once more with its
AdamW leaves (embeddings, norms, head) at AdamW's best rate (optim.muon.adamw_rate).
"""

import argparse
import os
import platform
import subprocess
import sys

from zoo.train import metrics

RUNS = [('adamw', 1e-3, 1.0), ('adamw', 3e-3, 1.0), ('adamw', 1e-2, 1.0),
        ('muon', 3e-3, 1.0), ('muon', 1e-2, 1.0), ('muon', 3e-2, 1.0),
        ('muon', 1e-2, 0.3)]  # (optim.name, learning_rate, optim.muon.adamw_rate)
STEPS = (100, 200, 300)


def launch(workdir, optimizer, learning_rate, adamw_rate):
  overrides = [f'--config.optim.muon.adamw_rate={adamw_rate}'] if adamw_rate != 1 else []
  subprocess.run([sys.executable, '-m', 'zoo.launch', '--config=configs/gpt_shakespeare.py',
                  f'--workdir={workdir}', f'--config.optim.name={optimizer}',
                  f'--config.optim.learning_rate={learning_rate}', *overrides], check=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--runs', required=True, help='a directory for the workdirs')
  args = parser.parse_args()
  print(f'gpt_shakespeare, 300 steps x 32 x 128 tokens, on {platform.processor() or "CPU"} '
        f'({os.cpu_count()} cores)\n')
  print('| optimizer | learning rate | AdamW leaves\' rate (learning rate x '
        '`optim.muon.adamw_rate`) | ' +
        ' | '.join(f'eval loss at {s}' for s in STEPS) + ' |')
  print('|---|---|---|' + '---|' * len(STEPS))
  for optimizer, rate, adamw_rate in RUNS:
    workdir = os.path.join(args.runs, f'{optimizer}_{rate:g}' +
                           (f'_adamw{adamw_rate:g}' if adamw_rate != 1 else ''))
    if metrics.finished_eval_loss(workdir) is None:
      launch(workdir, optimizer, rate, adamw_rate)
    losses = {r['step']: r['eval_loss'] for r in metrics.read(workdir) if 'eval_loss' in r}
    own = f'{rate * adamw_rate:g}' if optimizer == 'muon' else '-'
    print(f'| {optimizer} | {rate:g} | {own} | ' +
          ' | '.join(f'{losses[s]:.4f}' for s in STEPS) + ' |')


if __name__ == '__main__':
  main()
