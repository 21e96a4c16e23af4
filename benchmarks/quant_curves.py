"""Quantized training beside bf16: the loss curves of runs that differ only in
model.quant.mode, in one figure, and each run's final eval loss against the bf16 run's.

    for q in none int8 fp8; do
      python -m zoo.launch --config=configs/gpt_shakespeare.py --workdir=runs/gpt_$q \\
          --config.model.dtype=bfloat16 --config.model.quant.mode=$q
      python -m zoo.launch --config=configs/t5_small.py:smoke --workdir=runs/t5_$q \\
          --config.train.steps=300 --config.train.eval_every=100 \\
          --config.model.dtype=bfloat16 --config.model.quant.mode=$q
    done
    python benchmarks/quant_curves.py --runs=runs --out=docs/quant_loss.png

Reads RUNS/{gpt,t5}_{none,int8,fp8}/metrics.jsonl; needs matplotlib (the `notebooks` extra).
"""

import argparse
import json
import os

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

JOBS = {'gpt': 'default job (gpt_shakespeare)', 't5': 't5_small:smoke, 300 steps'}
MODES = {'none': 'bf16', 'int8': 'int8', 'fp8': 'fp8 (e4m3, gradients e5m2)'}


def rows(path):
  with open(os.path.join(path, 'metrics.jsonl'), encoding='utf-8') as f:
    return [json.loads(line) for line in f]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--runs', required=True, help='the directory holding the six workdirs')
  parser.add_argument('--out', required=True, help='the figure (.png)')
  args = parser.parse_args()
  figure, axes = plt.subplots(2, len(JOBS), figsize=(11, 6.5), sharex='col',
                              height_ratios=(2, 1))
  print('| job | precision | final eval loss | / bf16 |')
  print('|---|---|---|---|')
  for column, (job, title) in enumerate(JOBS.items()):
    curves, base = {}, None
    for mode, label in MODES.items():
      r = rows(os.path.join(args.runs, f'{job}_{mode}'))
      curves[mode] = {x['step']: x['loss'] for x in r if 'loss' in x}
      final = [x['eval_loss'] for x in r if 'eval_loss' in x][-1]
      base = final if base is None else base
      steps = sorted(curves[mode])
      axes[0, column].plot(steps, [curves[mode][s] for s in steps], label=label, lw=1)
      if mode != 'none':  # the gap to bf16 at each logged step
        axes[1, column].plot(steps, [curves[mode][s] - curves['none'][s] for s in steps],
                             label=label, lw=1, color=f'C{list(MODES).index(mode)}')
      print(f'| {job} | {label} | {final:.4f} | {final / base:.4f} |')
    axes[0, column].set(title=title, ylabel='train loss')
    axes[0, column].set_ylim(top=min(axes[0, column].get_ylim()[1], 8))
    axes[0, column].legend()
    axes[1, column].axhline(0, color='C0', lw=0.8)
    axes[1, column].set(xlabel='step', ylabel='train loss - bf16')
  figure.tight_layout()
  figure.savefig(args.out, dpi=90)
  print(f'wrote {args.out}')


if __name__ == '__main__':
  main()
