"""What may import what (docs/architecture.md): each package of zoo/ imports only packages
in the layers below its own, so there are no cycles and data flows one way."""

import ast
import pathlib

from tests.helpers import REPO

# Bottom to top; the same table as docs/architecture.md.
LAYERS = (
    ('errors', 'platform', 'progress'),
    ('cli', 'sharding', 'storage'),
    ('config', 'kernels'),
    ('collectives', 'muon'),
    ('models',),
    ('families',),
    ('phases', 'objectives'),
    ('presets', 'recipes', 'counting', 'data', 'optim'),
    ('run',),
    ('train',),
    ('infer', 'plan', 'convert'),
    ('post', 'serve'),
    ('launch', 'prepare', 'bench', 'harness'),
)


def _package(path):
  """zoo/train/loop.py -> 'train'; zoo/config.py -> 'config'; zoo/__init__.py -> None."""
  parts = path.relative_to(pathlib.Path(REPO, 'zoo')).with_suffix('').parts
  return None if parts == ('__init__',) else parts[0]


def _imports(path):
  """The zoo packages a file imports."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and (node.module or '').startswith('zoo'):
      module = node.module.split('.')
      found.update([module[1]] if len(module) > 1 else [a.name for a in node.names])
    elif isinstance(node, ast.Import):
      found.update(a.name.split('.')[1] for a in node.names if a.name.startswith('zoo.'))
  return found


def test_every_package_has_a_layer():
  packages = {_package(p) for p in pathlib.Path(REPO, 'zoo').rglob('*.py')} - {None}
  assert packages == {name for layer in LAYERS for name in layer}


def test_packages_import_only_the_layers_below_them():
  level = {name: i for i, layer in enumerate(LAYERS) for name in layer}
  upward = []
  for path in sorted(pathlib.Path(REPO, 'zoo').rglob('*.py')):
    package = _package(path)
    if package is None:
      continue
    for target in _imports(path) - {package}:
      if level[target] >= level[package]:
        upward.append(f'{path.relative_to(REPO)} ({package}) imports {target}')
  assert not upward, '\n'.join(upward)


def test_no_function_in_zoo_is_longer_than_80_lines():
  long = []
  for path in sorted(pathlib.Path(REPO, 'zoo').rglob('*.py')):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        lines = node.end_lineno - node.lineno + 1
        if lines > 80:
          long.append(f'{path.relative_to(REPO)}: {node.name} ({lines} lines)')
  assert not long, '\n'.join(long)


def test_the_config_schema_imports_no_model_code():
  """zoo/config keeps the schema, loading and range checks; what needs a family, a kernel or
  the model's dimensions is checked by zoo/run."""
  imported = set()
  for path in pathlib.Path(REPO, 'zoo', 'config').rglob('*.py'):
    imported |= _imports(path)
  assert not imported & {'models', 'families', 'kernels', 'phases', 'run'}
