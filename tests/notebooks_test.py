"""Every notebook's code cells run top to bottom in one namespace, as Jupyter would run them
(the notebooks keep no magics), from the repository root."""

import glob
import json
import os

import pytest
from tests.helpers import REPO

NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, 'notebooks', '*.ipynb')))


def test_there_are_notebooks():
  assert NOTEBOOKS


@pytest.mark.parametrize('path', NOTEBOOKS, ids=os.path.basename)
def test_the_notebook_runs(path, monkeypatch):
  monkeypatch.chdir(REPO)
  with open(path, encoding='utf-8') as f:
    cells = [c for c in json.load(f)['cells'] if c['cell_type'] == 'code']
  namespace = {'__name__': '__main__'}
  for number, cell in enumerate(cells):
    source = ''.join(cell['source'])
    code = compile(source, f'{os.path.basename(path)}[code cell {number}]', 'exec')
    exec(code, namespace)  # pylint: disable=exec-used
