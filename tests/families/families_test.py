"""The family registry: one module per family, and nothing else that looks at the name."""

import pathlib
import re
import types

import jax
import numpy as np
import pytest

from tests import helpers
from tests.helpers import REPO
from zoo import config as config_lib
from zoo.config import schema
from zoo import families
from zoo import run as run_lib
from zoo import sharding
from zoo.data import pipeline
from zoo.data import tokenizer as tokenizer_lib
from zoo.families import decoder
from zoo.plan import compiled

SMOKES = {'causal_lm': 'gpt_shakespeare', 'mlm': 'bert_base', 'span_corruption': 't5_small'}


@pytest.fixture(scope='module')
def tokens_and_tokenizer():
  documents = helpers.shakespeare(600)
  tokenizer = tokenizer_lib.train(documents, 400, 'bpe')
  return helpers.tokenize(documents, tokenizer), tokenizer


@pytest.mark.parametrize('objective', sorted(SMOKES))
def test_batch_spec_is_what_the_pipeline_yields_and_what_plan_mode_compiles(
    objective, tokens_and_tokenizer):
  config = helpers.load(helpers.config_file(SMOKES[objective]))
  assert config.data.objective == objective
  spec = families.batch_spec(config)
  tokens, tokenizer = tokens_and_tokenizer
  for train in (True, False):
    batch = next(iter(pipeline.make_dataset(tokens, config.data, spec, train=train,
                                            tokenizer=tokenizer)))
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == spec
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  lowered_batch = compiled.lower(run_lib.resolve(config), mesh).args_info[0][1]
  assert {k: (a.shape, np.dtype(a.dtype)) for k, a in lowered_batch.items()} == spec


def test_every_objective_is_trained_by_exactly_one_family():
  owners = [o for f in families.FAMILIES.values() for o in f.OBJECTIVES]
  assert sorted(owners) == sorted(schema.OBJECTIVES)


# A switch on the family outside zoo/families: model.family compared or used as a key, or a
# dict keyed by the family names.
_SWITCH = re.compile(
    r"""(\.family|\.NAME)\s*(==|!=|\bin\b|\])"""  # model.family == ..., family.NAME != ...
    r"""|(^|[{,])\s*['"](decoder|encoder|encoder_decoder)['"]\s*:""")  # {'decoder': ...}


def test_nothing_outside_the_registry_switches_on_the_family_name():
  found = []
  for path in sorted(pathlib.Path(REPO, 'zoo').rglob('*.py')):
    if 'families' in path.parts:
      continue
    for number, line in enumerate(path.read_text().splitlines(), 1):
      if _SWITCH.search(line):
        found.append(f'{path.relative_to(REPO)}:{number}: {line.strip()}')
  assert not found, '\n'.join(found)


def test_an_unknown_family_is_one_config_error_naming_the_known_ones():
  config = helpers.tiny_config()
  config.model.family = 'decoder_only'
  with pytest.raises(config_lib.ConfigError, match="model.family='decoder_only' is not one of "
                     "'decoder', 'encoder', 'encoder_decoder'"):
    helpers.validate(config)


def test_a_new_family_is_one_module_and_one_registry_line(monkeypatch):
  toy = types.ModuleType('toy')
  toy.__dict__.update({k: v for k, v in vars(decoder).items() if not k.startswith('__')})
  toy.NAME = 'toy'
  monkeypatch.setitem(families.FAMILIES, 'toy', toy)  # the registry line
  config = helpers.tiny_config()
  config.model.family = 'toy'
  helpers.validate(config)
  model = families.build(config.model)
  variables = jax.jit(model.init)(jax.random.PRNGKey(0), families.example_batch(config.model, 2, 8))
  batch = {k: np.ones(shape, dtype) for k, (shape, dtype) in
           families.batch_spec(config, 2).items()}
  loss = families.loss_fn(model, config)(variables, batch)
  assert np.isfinite(loss.total) and families.total_layers(config.model) == 2
