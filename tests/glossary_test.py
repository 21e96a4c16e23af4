"""docs/glossary.md is true of the code: every module's `Glossary:` line uses letters of the
global table, each in its global meaning or in a scoped meaning the glossary lists for
that module, and every listed scoped meaning is declared where the glossary says."""

import glob
import io
import os
import re
import tokenize

from tests.helpers import REPO

GLOSSARY = open(os.path.join(REPO, 'docs', 'glossary.md'), encoding='utf-8').read()
GLOBAL = dict(re.findall(r'^\| ([A-Z]) \| (?!zoo/)(.+?) \| .+? \|$', GLOSSARY, re.M))
SCOPED = {(module, letter): meaning for letter, module, meaning in
          re.findall(r'^\| ([A-Z]) \| (zoo/\S+\.py) \| (.+?) \|$', GLOSSARY, re.M)}
_FILLER = {'the', 'of', 'a', 'an', 'per', 'and', 'or', 'in', 'on', 'to', 'its', 'for', 'x',
           'by'}


def _declared():
  """{(module, letter): meaning} from every zoo module's docstring `Glossary:` line."""
  found = {}
  for path in sorted(glob.glob(os.path.join(REPO, 'zoo', '**', '*.py'), recursive=True)):
    text = open(path, encoding='utf-8').read()
    line = re.search(r'Glossary: (.+?)\.?(?:\n\n|\n"""|$)', text, re.S)
    if not line:
      continue
    module = os.path.relpath(path, REPO)
    for entry in re.split(r', (?=[A-Za-z] )', ' '.join(line.group(1).split())):
      letter, _, meaning = entry.partition(' ')
      if letter.isupper():
        found[module, letter] = meaning
  return found


def _words(text):
  return set(re.findall(r'[a-z_]+', text.lower())) - _FILLER


DECLARED = _declared()


def test_the_glossary_tables_parse():
  assert len(GLOBAL) >= 20 and len(SCOPED) >= 1 and len(DECLARED) >= 50


def test_every_declared_letter_is_in_the_glossary():
  assert sorted({l for _, l in DECLARED} - set(GLOBAL)) == []


def test_a_letter_means_its_global_meaning_unless_the_glossary_scopes_it():
  unlisted = [f'{module}: {letter} {meaning!r} (glossary: {GLOBAL[letter]!r})'
              for (module, letter), meaning in DECLARED.items()
              if (module, letter) not in SCOPED and letter in GLOBAL
              and not _words(meaning) & _words(GLOBAL[letter])]
  assert unlisted == []


def test_every_scoped_meaning_is_declared_in_its_module_as_listed():
  assert {key: DECLARED.get(key) for key in SCOPED} == SCOPED


_SHAPED = re.compile(r'^[a-z][a-z0-9]*(?:_[a-z0-9]+)*_([0-9]*[A-Z][A-Z0-9]*)$')


def test_every_letter_of_a_shaped_name_is_in_its_modules_glossary():
  """q_BLHK, drafts_K, ...: each shape letter an identifier carries is declared by its
  module's `Glossary:` line, so it means there what the line (and this glossary) says."""
  undeclared = []
  for path in sorted(glob.glob(os.path.join(REPO, 'zoo', '**', '*.py'), recursive=True)):
    module = os.path.relpath(path, REPO)
    declared = {letter for m, letter in DECLARED if m == module}
    source = open(path, encoding='utf-8').read()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
      shaped = token.type == tokenize.NAME and _SHAPED.match(token.string)
      if shaped and set(filter(str.isalpha, shaped.group(1))) - declared:
        undeclared.append(f'{module}:{token.start[0]}: {token.string}')
  assert undeclared == []
