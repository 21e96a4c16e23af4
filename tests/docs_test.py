"""The docs say what the code does: every field of the config schema is in
docs/contracts.md's schema, the launcher's exit codes are docs/reliability.md's table,
paths named in docstrings and comments exist, and the plans the docs quote are what the
sweep answers today (zoo/plan/suggest.py)."""

import ast
import os
import pathlib
import re
import shlex

from tests.helpers import REPO
from zoo import config as config_lib
from zoo import run as run_lib
from zoo.plan import suggest
from zoo.plan import topology
from zoo.train import watchdog


def _doc(name):
  return open(os.path.join(REPO, 'docs', name), encoding='utf-8').read()


def _leaves(config, prefix=''):
  for key, value in config.items():
    if hasattr(value, 'items'):
      yield from _leaves(value, f'{prefix}{key}.')
    else:
      yield prefix + key


def _documented_fields():
  """{'model.attention.kernel', 'model.rope_scaling.*', ...}: what the schema section's
  bullets name, each bullet's names relative to the group its first name opens."""
  section = _doc('contracts.md').split('## Config schema', 1)[1].split('\n## ', 1)[0]
  names = set()
  for bullet in re.split(r'\n- ', section)[1:]:
    spans = [' '.join(s.split()) for s in re.findall(r'`([^`]+)`', bullet)]
    group = spans[0].split('.')[0]
    for span in spans:
      braces = re.fullmatch(r'([\w.]+)\.\{([\w, ]+)\}', span)
      found = ([f'{braces.group(1)}.{n.strip()}' for n in braces.group(2).split(',')]
               if braces else [span] if re.fullmatch(r'[\w.]+(\.\*)?', span) else [])
      names.update(n if n.startswith(group + '.') else f'{group}.{n}' for n in found)
  return names


def test_every_schema_field_is_in_the_contracts_schema():
  documented = _documented_fields()
  wildcards = tuple(n[:-1] for n in documented if n.endswith('.*'))
  missing = [f for f in _leaves(config_lib.base())
             if f not in documented and not f.startswith(wildcards)]
  assert missing == []


def test_the_launchers_exit_codes_are_the_reliability_table():
  # read, not imported: zoo.launch defines absl flags another test's module may have too
  source = open(os.path.join(REPO, 'zoo', 'launch.py'), encoding='utf-8').read()
  said = ast.get_docstring(ast.parse(source)).split('Exit codes', 1)[1].split('\n\n', 1)[0]
  in_docstring = {int(n) for n in re.findall(r'(?<![\w.])(\d+) ', said)}
  table = _doc('reliability.md').split('## Exit codes', 1)[1].split('\n## ', 1)[0]
  in_table = {int(n) for n in re.findall(r'^\| (\d+) \|', table, re.M)}
  assert in_docstring == in_table and watchdog.EXIT_HANG in in_table


def test_paths_named_in_the_code_exist():
  """A comment or docstring naming zoo/, docs/, tests/ or benchmarks/ files names files
  that exist (configs/NAME.py-style patterns aside)."""
  named = re.compile(r'(?<![\w/])((?:zoo|tests|docs|benchmarks)/[\w/.-]+\.(?:py|md))')
  stale = []
  for path in sorted(pathlib.Path(REPO, 'zoo').rglob('*.py')):
    for number, line in enumerate(path.read_text(encoding='utf-8').splitlines(), 1):
      stale += [f'{path.relative_to(REPO)}:{number}: {name}' for name in named.findall(line)
                if 'NAME' not in name and not pathlib.Path(REPO, name).exists()]
  assert stale == []


def _plan_commands(text):
  """The `python -m zoo.launch ... --mode=plan` commands of an indented block in `text` ->
  [(config, topology, overrides)]."""
  joined = text.replace('\\\n', ' ')
  found = []
  for line in joined.splitlines():
    line = re.sub(r'^\s*(JAX_PLATFORMS=\w+ )?', '', line)
    if not line.startswith('python -m zoo.launch ') or '--mode=plan' not in line:
      continue
    words = shlex.split(line)
    flags = dict(w[2:].split('=', 1) for w in words[3:] if w.startswith('--') and '=' in w)
    found.append((flags['config'], flags.get('plan_topology'),
                  [f'{k[len("config."):]}={v}' for k, v in flags.items()
                   if k.startswith('config.')]))
  return found


def test_the_recipes_plan_row_is_what_its_commands_print():
  text = _doc('recipes.md')
  row = next(line for line in text.splitlines() if line.startswith('| plan |'))
  commands = _plan_commands(text)
  assert len(commands) == 4
  want = [suggest.describe(suggest.best(run_lib.load(config, overrides),
                                        topology.parse(name)))
          for config, name, overrides in commands]
  assert row == '| plan | ' + ' | '.join(want) + ' |'


def test_the_readme_and_the_preflight_suggest_the_same_slice_for_t5():
  answer = suggest.smallest(run_lib.load('configs/t5_base.py', []))
  readme = open(os.path.join(REPO, 'README.md'), encoding='utf-8').read()
  [(config, name, _)] = [c for c in _plan_commands(readme) if 't5_base' in c[0]]
  assert name == answer.tpu_slice.name
  assert suggest.describe(answer) in ' '.join(readme.split())
  assert suggest.describe(answer) in ' '.join(_doc('plan.md').split())  # the sample error
