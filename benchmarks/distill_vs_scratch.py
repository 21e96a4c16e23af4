"""A small student distilled from the default job against the same student from scratch:
equal steps, tokens and data, the final eval loss of each.

    python benchmarks/distill_vs_scratch.py --runs=runs/distill

The teacher is the default job (`configs/gpt_shakespeare.py`, 5.3M parameters), trained
into RUNS/teacher unless --teacher names a finished run of it; the student is the default
job at a quarter of its width and half its depth. A finished run is read, not rerun.
Prints the table docs/performance.md holds.
"""

import argparse
import os
import platform
import subprocess
import sys

from zoo.train import metrics

STUDENT = ['--config.model.d_model=128', '--config.model.num_layers=2',
           '--config.model.num_heads=2', '--config.model.num_kv_heads=2',
           '--config.model.mlp_dim=352']
STUDENTS = {
    'from scratch': [],
    'distilled (weight 0.5, whole vocabulary)': ['--config.train.teacher.weight=0.5'],
    'distilled (weight 1, the teacher\'s top 64)': ['--config.train.teacher.weight=1.0',
                                                   '--config.train.teacher.top_k=64'],
    'distilled (weight 0.5, the teacher\'s top 64)': ['--config.train.teacher.weight=0.5',
                                                     '--config.train.teacher.top_k=64'],
}


def launch(workdir, overrides):
  subprocess.run([sys.executable, '-m', 'zoo.launch', '--config=configs/gpt_shakespeare.py',
                  f'--workdir={workdir}', *overrides], check=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--runs', required=True, help='a directory for the workdirs')
  parser.add_argument('--teacher', help='a finished default-job run (else RUNS/teacher)')
  args = parser.parse_args()
  teacher = args.teacher or os.path.join(args.runs, 'teacher')
  if metrics.finished_eval_loss(teacher) is None:
    launch(teacher, [])
  rows = [('teacher (the default job)', metrics.finished_eval_loss(teacher))]
  for k, (name, overrides) in enumerate(STUDENTS.items()):
    workdir = os.path.join(args.runs, f'student_{k}')
    if metrics.finished_eval_loss(workdir) is None:
      teach = [f'--config.train.teacher.workdir={teacher}'] if overrides else []
      launch(workdir, [*STUDENT, *teach, *overrides])
    rows.append((name, metrics.finished_eval_loss(workdir)))
  print(f'gpt_shakespeare, 300 steps x 32 x 128 tokens, on {platform.processor() or "CPU"} '
        f'({os.cpu_count()} cores); student: d_model 128, 2 layers\n')
  print('| run | final eval loss |')
  print('|---|---|')
  for name, loss in rows:
    print(f'| {name} | {loss:.4f} |')


if __name__ == '__main__':
  main()
