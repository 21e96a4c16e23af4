"""Experiment: router load and dropped tokens over a short training run, with and without
the load-balancing loss (Switch, alpha = 0.01 vs 0).

    JAX_PLATFORMS=cpu python benchmarks/moe_balance.py [--config=configs/mixtral_8x7b.py:smoke]
        [--steps=150] [--capacity_factor=1.25] [--workdir=/tmp/zoo_moe_balance]

Trains the config twice on the embedded corpus (router z-loss off in both, to isolate the
balance term) and prints, every log_every steps, the largest share of the tokens that
choose any one expert in each MoE layer (k/E is perfectly balanced, 1 = every token), the
share of (token, choice) pairs dropped past capacity, and the balance loss (1 = uniform).
"""

import argparse
import os
import shutil

from zoo import config as config_lib
from zoo.train import loop
from zoo.train import metrics as metrics_lib


def run(spec, steps, capacity_factor, balance, workdir):
  shutil.rmtree(workdir, ignore_errors=True)
  config = config_lib.load(spec, [
      f'train.steps={steps}', 'train.log_every=10', f'train.eval_every={steps}',
      f'train.checkpoint_every={steps}', f'model.moe.capacity_factor={capacity_factor}',
      f'model.moe.balance_loss={balance}', 'model.moe.z_loss=0', 'optim.warmup_steps=10'])
  loop.train(config, workdir)
  return config, [r for r in metrics_lib.read(workdir) if 'moe_load' in r]


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/mixtral_8x7b.py:smoke')
  parser.add_argument('--steps', type=int, default=150)
  parser.add_argument('--capacity_factor', type=float, default=1.25)
  parser.add_argument('--workdir', default='/tmp/zoo_moe_balance')
  args = parser.parse_args()
  results = {}
  for balance in (0.01, 0.0):
    results[balance] = run(args.config, args.steps, args.capacity_factor, balance,
                           os.path.join(args.workdir, f'balance_{balance}'))
  config = results[0.01][0]
  experts = config.model.moe.num_experts
  print(f'\n{args.config}: {experts} experts, top-{config.model.moe.top_k}, capacity factor '
        f'{args.capacity_factor}; largest share of tokens choosing one expert, per MoE layer '
        f'(balanced = {config.model.moe.top_k / experts:.3f})')
  print(f'{"step":>5} | {"with balance loss 0.01":^38} | {"without":^38}')
  for with_row, without_row in zip(results[0.01][1], results[0.0][1]):
    cells = []
    for row in (with_row, without_row):
      shares = ' '.join(f'{max(layer):.2f}' for layer in row['moe_load'])
      cells.append(f'max {shares:<11} drop {row["moe_dropped_fraction"]:.3f} '
                   f'bal {row["moe_aux_loss"]:.2f}')
    print(f'{with_row["step"]:>5} | {cells[0]:<38} | {cells[1]:<38}')
  final = {b: results[b][1][-1] for b in results}
  print(f'final loss: with {final[0.01]["loss"]:.4f}, without {final[0.0]["loss"]:.4f}')


if __name__ == '__main__':
  main()
