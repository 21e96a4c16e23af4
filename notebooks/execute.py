"""Runs notebooks top to bottom in a fresh Jupyter kernel each and saves them with their
outputs and figures, so the repository shows what they show.

    python -m notebooks.execute                   # every notebook, saved in place
    python -m notebooks.execute shapes moe        # some of them, by name
    python -m notebooks.execute --check           # run them, save nothing (the tests do this)

Run from the repository root (the notebooks read configs/ from there). A notebook whose cell
fails is not saved, so the file keeps its last good outputs; the failing cell is named and
the exit code is 1. Timings are not recorded, so a re-run changes only what it printed.
"""

import argparse
import glob
import os
import sys
import time

import nbclient
import nbformat

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DIRECTORY)
CELL_TIMEOUT_SECONDS = 600


def paths(names=()):
  """The notebooks by name (shapes, moe, ...), or all of them."""
  found = {os.path.basename(p)[:-len('.ipynb')]: p
           for p in sorted(glob.glob(os.path.join(DIRECTORY, '*.ipynb')))}
  unknown = [n for n in names if n not in found]
  if unknown:
    raise ValueError(f'no notebook named {", ".join(unknown)} in notebooks/; '
                     f'choose from {", ".join(found)}')
  return [found[n] for n in names] if names else list(found.values())


def execute(path, env=None, parameters=None):
  """-> the notebook at `path` with every cell run in order, in a new kernel started in
  the repository root with environment `env` (default: this process's); raises nbclient's
  CellExecutionError naming the cell that failed. `parameters` ({name: value}) are set in
  a cell run right after the one tagged 'parameters' (papermill's convention), so a check
  can run a notebook smaller than it is saved."""
  notebook = nbformat.read(path, as_version=4)
  if parameters:
    tagged = [i for i, cell in enumerate(notebook.cells)
              if 'parameters' in cell.metadata.get('tags', ())]
    if not tagged:
      raise ValueError(f'{path} has no cell tagged parameters to set {sorted(parameters)} after')
    notebook.cells.insert(tagged[0] + 1, nbformat.v4.new_code_cell(
        '\n'.join(f'{name} = {value!r}' for name, value in parameters.items())))
  client = nbclient.NotebookClient(
      notebook, timeout=CELL_TIMEOUT_SECONDS, kernel_name='python3',
      resources={'metadata': {'path': ROOT}}, record_timing=False)
  client.execute(env=dict(os.environ if env is None else env))
  return notebook


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('names', nargs='*', help='notebooks to run (default: all)')
  parser.add_argument('--check', action='store_true', help='run them, save nothing')
  args = parser.parse_args(argv)
  try:
    chosen = paths(args.names)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  failed = []
  for path in chosen:
    start = time.perf_counter()
    try:
      notebook = execute(path)
    except nbclient.exceptions.CellExecutionError as e:
      failed.append(path)
      print(f'{os.path.relpath(path, ROOT)}: FAILED, not saved\n{e}', file=sys.stderr)
      continue
    if not args.check:
      nbformat.write(notebook, path)
    print(f'{os.path.relpath(path, ROOT)}: ran in {time.perf_counter() - start:.0f} s'
          + ('' if args.check else ', saved with its outputs'), flush=True)
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main())
