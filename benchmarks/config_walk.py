"""The files a run's config walks through, from the launcher to the first train step.

Runs `python -m zoo.launch --config=CONFIG` in this process (2 steps, a fresh workdir) with
a profile hook that records every call into zoo/ whose arguments hold the loaded config
(with --sections: or one of its sections, config.model, config.train, ...) or the run
resolved from it (zoo/run), until the loop is about to run its first step
(zoo/train/faults.py: before_step). The config is recognised from the moment
zoo.config.load returns it (load's own checks are not counted); copies the rooms make (a
phase's config, a frozen model config) are not followed: the count is of the rooms the
config itself reaches.

    python benchmarks/config_walk.py [--config=configs/gpt_shakespeare.py:smoke] [--sections]
"""

import argparse
import os
import sys
import tempfile

import ml_collections


def _sections(config):
  """ids of the config and of every ConfigDict inside it."""
  out = {id(config)}
  for value in config.values():
    if isinstance(value, ml_collections.ConfigDict):
      out |= _sections(value)
  return out


def walk(spec, sections=False):
  import zoo  # pylint: disable=g-import-not-at-top
  from zoo import config as config_lib  # pylint: disable=g-import-not-at-top
  from zoo import launch  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(zoo.__file__)))
  held, files, done = set(), {}, []
  load = config_lib.load

  def watched_load(*args, **kwargs):
    config = load(*args, **kwargs)
    held.update(_sections(config) if sections else {id(config)})
    return config
  config_lib.load = watched_load

  def hook(frame, event, _):
    if event != 'call' or done:
      return
    path = frame.f_code.co_filename
    if not path.startswith(root + os.sep) or os.sep + 'zoo' + os.sep not in path:
      return
    if frame.f_code.co_name == 'before_step' and path.endswith('faults.py'):
      done.append(True)
      return
    for value in frame.f_locals.values():
      if id(value) in held or id(getattr(value, 'config', None)) in held:
        if getattr(value, 'config', None) is not None:
          held.add(id(value))  # the Run
        files.setdefault(os.path.relpath(path, root), frame.f_code.co_name)
        return

  workdir = tempfile.mkdtemp()
  sys.argv = ['zoo.launch', f'--config={spec}', f'--workdir={workdir}',
              '--config.train.steps=2', '--config.optim.warmup_steps=1']
  sys.setprofile(hook)
  try:
    launch.main()
  except SystemExit:
    pass
  finally:
    sys.setprofile(None)
  return files


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', default='configs/gpt_shakespeare.py:smoke')
  parser.add_argument('--sections', action='store_true',
                      help='count a call that holds one of the config\'s sections too')
  args = parser.parse_args()
  files = walk(args.config, args.sections)
  print(f'python benchmarks/config_walk.py --config={args.config}'
        + (' --sections' if args.sections else ''))
  print(f'{len(files)} files hold the config{" or a section of it" if args.sections else ""} '
        '(or its run) between the launcher and the first train step:')
  for path, function in sorted(files.items()):
    print(f'  {path}  (first: {function})')


if __name__ == '__main__':
  main()
