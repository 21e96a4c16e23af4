"""Every notebook runs top to bottom in a Jupyter kernel, as `python -m notebooks.execute`
runs it for a reader (the MoE one with fewer train steps), and draws its figures; the saved
files keep their outputs."""

import os

import nbformat
import pytest

from notebooks import execute
from tests.helpers import REPO

FIGURES = {'moe': 2, 'post_training': 2, 'shapes': 2, 'sharding': 2, 'tour': 0,
           'training': 2, 'vision': 2}  # images each draws
# run here smaller than saved (the same cells): fewer steps, a smaller slice, lengths, depth
SMALLER = {'moe': {'STEPS': 20}, 'vision': {
    'STEPS': 30, 'WORKDIR': 'runs/notebook_vision_check'}, 'post_training': {
    'LARGEST': 9, 'SFT_STEPS': 8, 'DPO_STEPS': 4, 'GRPO_STEPS': 4,
    'WORKDIR': 'runs/notebook_post_training_check'}, 'sharding': {
    'SLICE_NAME': 'v5p-32', 'LENGTHS': (1024, 4096),
    'OVERRIDES': ['train.batch_size=64', 'data.seq_len=1024', 'model.remat=full',
                  'model.num_layers=2']}}
# the sharding notebook's TPU compiles, as tests/conftest.py's low_effort sets them
LOW_EFFORT = {'JAX_EXEC_TIME_OPTIMIZATION_EFFORT': '-1'}
SMALLER_SAYS = {'moe': 'at step 20', 'sharding': 'sweep on v5p-32'}  # ... as its outputs show
NOTEBOOKS = execute.paths()
name_of = lambda path: os.path.basename(path)[:-len('.ipynb')]


def _figures(notebook):
  return sum('image/png' in output.get('data', {})
             for cell in notebook.cells if cell.cell_type == 'code' for output in cell.outputs)


def test_every_notebook_is_listed_with_its_figures():
  assert sorted(map(name_of, NOTEBOOKS)) == sorted(FIGURES)


@pytest.mark.parametrize('path', NOTEBOOKS, ids=name_of)
def test_the_notebook_runs_and_draws_its_figures(path):
  # the kernel sees one CPU device, as a reader's laptop does, not the suite's eight (and
  # compiles as the suite does: tests/conftest.py)
  flags = os.environ['XLA_FLAGS'].replace('--xla_force_host_platform_device_count=8', '')
  name = name_of(path)
  env = {**os.environ, 'XLA_FLAGS': flags.strip(),
         **(LOW_EFFORT if name == 'sharding' else {})}
  notebook = execute.execute(path, env=env, parameters=SMALLER.get(name))
  assert _figures(notebook) == FIGURES[name]
  if name in SMALLER_SAYS:
    text = ''.join(o.get('text', '') for cell in notebook.cells if cell.cell_type == 'code'
                   for o in cell.outputs)
    assert SMALLER_SAYS[name] in text


@pytest.mark.parametrize('path', NOTEBOOKS, ids=name_of)
def test_the_saved_notebook_keeps_its_outputs_and_figures(path):
  notebook = nbformat.read(path, as_version=4)
  code = [cell for cell in notebook.cells if cell.cell_type == 'code']
  assert code and all(cell.execution_count for cell in code), 'saved without running it'
  assert sum(bool(cell.outputs) for cell in code) >= len(code) // 2
  assert not [o for cell in code for o in cell.outputs if o.output_type == 'error']
  assert _figures(notebook) == FIGURES[name_of(path)]


def test_the_readme_links_every_notebook():
  with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
    readme = f.read()
  assert [p for p in NOTEBOOKS if f'notebooks/{os.path.basename(p)}' not in readme] == []


def test_parameters_need_a_cell_tagged_for_them():
  with pytest.raises(ValueError, match=r'tour.ipynb has no cell tagged parameters to set '
                                       r"\['STEPS'\]"):
    execute.execute(os.path.join(execute.DIRECTORY, 'tour.ipynb'), parameters={'STEPS': 1})


def test_an_unknown_notebook_is_one_line_and_exit_2(capsys):
  assert execute.main(['shape']) == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and 'no notebook named shape' in err and 'shapes' in err
