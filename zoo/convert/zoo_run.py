"""A zoo export carries its run: FILE beside the Hugging Face files holds the run's resolved
config (WORKDIR/config.json), and importing the directory back (zoo.convert.hf) starts from
it, so the import trains and evaluates as the run did (its data, batch, eval batches,
recipe) instead of with config.base()'s defaults. transformers ignores the file.

What the export changed is changed in the imported config too: the adapters are merged into
the weights (train.lora off), and the weights and tokenizer are the imported ones
(train.init_params and data.tokenizer.path, set by the import).
"""

import json
import os

import flax.linen as nn
import jax

from zoo import config as config_lib
from zoo import counting
from zoo.train import run_config

FILE = 'zoo_config.json'


def write(config, directory):
  with open(os.path.join(directory, FILE), 'w', encoding='utf-8') as f:
    json.dump(run_config.as_dict(config), f, indent=2)


def imported(hf_dir, config, params):
  """-> (the config an import of `hf_dir` trains with, what it came from in words): the
  exported run's (FILE) when the directory has one, else `config` (read from config.json).
  A run whose model gives other parameter shapes than the weights (its FILE edited, or
  the weights) keeps config.json's model fields."""
  path = os.path.join(hf_dir, FILE)
  if not os.path.isfile(path):
    return config, 'config.json'
  with open(path, encoding='utf-8') as f:
    run = run_config.over_base(json.load(f))
  with run.unlocked():
    run.train.lora = config_lib.base().train.lora  # merged into the exported kernels
    run.train.init_params, run.data.tokenizer.path = '', ''  # the import sets them
  if _shapes(nn.unbox(counting.abstract_params(run))) == _shapes(params):
    return run, f'the exported run ({FILE})'
  with run.unlocked():
    run.model = config.model
  return run, (f'the exported run ({FILE}), its model fields from config.json (those of {FILE} '
               'give other parameter shapes than the weights)')


def _shapes(tree):
  return jax.tree.map(lambda x: tuple(x.shape), tree)
