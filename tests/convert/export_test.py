"""zoo.convert.export: a trained workdir as a Hugging Face directory whose weights are the
checkpoint's and whose tokenizer.json gives the zoo's ids (transformers itself is not a
test dependency; the README records a check with AutoTokenizer / AutoModelFor*)."""

import itertools

import numpy as np
import pytest
import tokenizers

from tests import helpers
from zoo import config as config_lib
from zoo import families
from zoo.convert import export
from zoo.convert import hf
from zoo.convert import hf_tokenizer
from zoo.data import readers
from zoo.data import tokenizer as tokenizer_lib
from zoo.train import loop
from zoo.train import runtime


def _documents(count, start=0):
  docs = readers.documents([helpers.EMBEDDED_CORPUS])
  return [text for text, _ in itertools.islice(docs, start, start + count)]


@pytest.mark.parametrize('kind', ['bpe', 'unigram'])
def test_a_sentencepiece_model_converts_to_a_tokenizer_json_with_the_same_ids(kind):
  zoo = tokenizer_lib.train(_documents(1500), 700, kind)
  converted = hf_tokenizer.from_sentencepiece(zoo.model_proto)
  texts = _documents(1500, start=1500) + [
      '<mask> first, then x <mask> y', '\nleads with a newline', '  two spaces lead',
      'caf\u00e9 \u2603 \U0001f642', 'tab\there  and   gaps ']
  assert [converted.encode(t).ids for t in texts] == zoo.encode(texts)
  assert converted.decode(converted.encode(texts[0]).ids) == texts[0]


def test_export_writes_the_checkpoint_weights_and_a_tokenizer_with_the_zoo_ids(tmp_path):
  config = helpers.smoke('gpt_shakespeare', 'train.steps=3', 'optim.warmup_steps=1')
  workdir, out = str(tmp_path / 'run'), str(tmp_path / 'hf')
  loop.train(config, workdir)
  assert export.export(config, workdir, out) == 3

  place = runtime.placement(config)
  state = runtime.model_state(config, place.mesh)
  _, variables = runtime.restore_variables(config, workdir, state, 'test')
  _, params = hf.load(out)
  ids = helpers.random_ids((2, 16), vocab=config.model.vocab_size)
  model = families.build(config.model)
  np.testing.assert_allclose(model.apply({'params': params}, {'inputs': ids}),
                             model.apply(variables, {'inputs': ids}), atol=1e-5, rtol=0)

  zoo = runtime.tokenizer(config, workdir)
  exported = tokenizers.Tokenizer.from_file(f'{out}/tokenizer.json')
  for text in _documents(200):  # a decoder's input: [BOS] text, as generation feeds it
    assert exported.encode(text).ids == list(zoo.document(zoo.encode([text])[0])[:-1])
  with pytest.raises(config_lib.ConfigError, match='--out=.* is not empty; export into a new'):
    export.export(config, workdir, out)
