"""Experiment: router load and dropped tokens over a short training run, balanced by the
Switch loss (alpha = 0.01), by the auxiliary-loss-free selection bias (Wang et al. 2024;
no balance loss), or not at all.

    JAX_PLATFORMS=cpu python benchmarks/moe_balance.py [--config=configs/mixtral_8x7b.py:smoke]
        [--steps=150] [--capacity_factor=1.25] [--bias_rate=0.001]
        [--workdir=/tmp/zoo_moe_balance]

Trains the config three times on the embedded corpus (router z-loss off in all, to isolate
the balancing) and prints, every log_every steps, the largest share of the tokens that
choose any one expert in each MoE layer (k/E is perfectly balanced, 1 = every token), the
share of (token, choice) pairs dropped past capacity, and the balance loss (1 = uniform;
logged in every arm, added to the training loss only in the first).
"""

import argparse
import os
import shutil

from zoo import config as config_lib
from zoo import platform
from zoo import run as run_lib
from zoo.train import loop
from zoo.train import metrics as metrics_lib


def run(spec, steps, capacity_factor, balance, bias_rate, workdir):
  shutil.rmtree(workdir, ignore_errors=True)
  config = config_lib.load(spec, [
      f'train.steps={steps}', 'train.log_every=10', f'train.eval_every={steps}',
      f'train.checkpoint_every={steps}', f'model.moe.capacity_factor={capacity_factor}',
      f'model.moe.balance_loss={balance}', f'model.moe.bias_update_rate={bias_rate}',
      'model.moe.z_loss=0', 'optim.warmup_steps=10'])
  loop.train(run_lib.resolve(config), workdir)
  return config, [r for r in metrics_lib.read(workdir) if 'moe_load' in r]


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--config', default='configs/mixtral_8x7b.py:smoke')
  parser.add_argument('--steps', type=int, default=150)
  parser.add_argument('--capacity_factor', type=float, default=1.25)
  parser.add_argument('--bias_rate', type=float, default=0.001)
  parser.add_argument('--workdir', default='/tmp/zoo_moe_balance')
  args = parser.parse_args()
  arms = {'balance loss 0.01': (0.01, 0.0), f'bias rate {args.bias_rate}': (0.0, args.bias_rate),
          'neither': (0.0, 0.0)}
  results = {name: run(args.config, args.steps, args.capacity_factor, balance, rate,
                       os.path.join(args.workdir, f'balance_{balance}_bias_{rate}'))
             for name, (balance, rate) in arms.items()}
  config = next(iter(results.values()))[0]
  experts = config.model.moe.num_experts
  print(f'\n{args.config}: {experts} experts, top-{config.model.moe.top_k}, capacity factor '
        f'{args.capacity_factor}; largest share of tokens choosing one expert, per MoE layer '
        f'(balanced = {config.model.moe.top_k / experts:.3f})')
  print(f'{"step":>5} | ' + ' | '.join(f'{name:^38}' for name in arms))
  for rows in zip(*(rows for _, rows in results.values())):
    cells = []
    for row in rows:
      shares = ' '.join(f'{max(layer):.2f}' for layer in row['moe_load'])
      cells.append(f'max {shares:<11} drop {row["moe_dropped_fraction"]:.3f} '
                   f'bal {row["moe_aux_loss"]:.2f}')
    print(f'{rows[0]["step"]:>5} | ' + ' | '.join(f'{cell:<38}' for cell in cells))
  print('final loss: ' + ', '.join(f'{name} {rows[-1]["loss"]:.4f}'
                                   for name, (_, rows) in results.items()))


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
