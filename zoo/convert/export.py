"""Export a trained workdir as a Hugging Face directory:

    python -m zoo.convert.export --workdir=W --out=DIR [--config=configs/NAME.py] [--config.x=v]

reads the run's own W/config.json (what it trained with, overrides included) unless
--config names another, and writes DIR/config.json + model.safetensors (the newest
checkpoint's parameters, through zoo.convert.hf.save) and the run's tokenizer as
tokenizer.json + tokenizer_config.json (zoo/convert/hf_tokenizer.py), so transformers'
AutoTokenizer and AutoModelForCausalLM / AutoModelForMaskedLM / AutoModelForSeq2SeqLM load
it; a train.lora run's adapters are merged into the kernels (W + a b alpha / rank), so it
loads as a plain model. config.json and generation_config.json carry the tokenizer's
special-token ids (generation stops at the zoo's EOS), and tokenizer_config.json the run's
data.seq_len (model_max_length), which an import reads back. A run on conversations (a chat,
preference or prompts task) writes its chat template as chat_template.jinja, so
apply_chat_template gives the ids it trained on. DIR must be new or empty
(nothing is overwritten); bad input is one line, exit code 2.
"""

import os
import sys

import jax

from zoo import config as config_lib
from zoo import platform
from zoo import storage
from zoo.cli import split_overrides
from zoo.convert import hf
from zoo.convert import hf_tokenizer
from zoo.convert import zoo_run
from zoo.data import chat
from zoo.data import chat_task
from zoo.data import corpus as corpus_lib
from zoo.models import lora
from zoo.train import run_config
from zoo.train import runtime


def export(run, workdir, out):
  """The resolved run's (zoo/run) newest checkpoint in `workdir`, exported to `out` -> the
  step exported. The model is restored onto this machine's devices."""
  config = run.config
  if storage.listdir(out):
    raise config_lib.ConfigError(f'--out={out} is not empty; export into a new directory '
                                 '(nothing is overwritten)')
  runtime.check_restorable(config, workdir, 'zoo.convert.export')
  runtime.size_label_head(config)
  place = runtime.placement(run)
  state = runtime.model_state(run, place.mesh)
  runtime.check_same_model(config, workdir, state)  # before its tokenizer is looked for
  tokenizer_path = corpus_lib.tokenizer_path(config.data, workdir)
  tokenizer = runtime.tokenizer(config, workdir)  # readable and fits the model, or one line
  if config.model.num_labels and run.family.LABEL_TOKEN == 'last' and (
      tokenizer.pad_id == tokenizer.eos_id):
    raise config_lib.ConfigError(
        f"the tokenizer's pad id is its EOS ({tokenizer.eos_id}): transformers reads a "
        "decoder classifier's last token that is not the pad id, and the zoo's rows end "
        'with EOS, so the two would read different tokens; export a run whose tokenizer has '
        'a pad token of its own (the zoo trains its tokenizers with one)')
  step, variables = runtime.restore_variables(config, workdir, state, 'zoo.convert.export')
  params = jax.device_get(variables['params'])
  if config.train.lora.rank:  # the adapters folded into the kernels they sit beside
    params = lora.merge(params, config.train.lora.alpha / config.train.lora.rank)
  files = storage.Mirror(out)  # written locally, then copied when --out is in a bucket
  hf.save(config, params, files.local)
  d, family = config.data, run.family
  special = hf_tokenizer.write(
      tokenizer_path, files.local,
      family.LABEL_SPECIALS if config.model.num_labels else family.INPUT_SPECIALS,
      config_lib.text_length(d),
      d.num_sentinels if d.objective == 'span_corruption' else 0,
      token_types=config.model.type_vocab_size > 0)
  hf.set_token_ids(files.local, special)
  if d.task.kind in chat_task.KINDS:
    template = chat.for_run(d.task.template, tokenizer_path, tokenizer)
    with open(os.path.join(files.local, chat.FILE), 'w', encoding='utf-8') as f:
      f.write(template.source)
  zoo_run.write(config, files.local)  # the run itself, for an import back (zoo/convert/zoo_run.py)
  files.close()
  return step


def main():
  import argparse  # pylint: disable=g-import-not-at-top
  overrides, argv = split_overrides(sys.argv[1:])
  parser = argparse.ArgumentParser(description='Export a workdir as a Hugging Face directory.')
  parser.add_argument('--config', help="configs/NAME.py[:arg]; default: the run's own "
                      'WORKDIR/config.json (what it trained with, overrides included)')
  parser.add_argument('--workdir', required=True, help='the run (its newest checkpoint)')
  parser.add_argument('--out', required=True, help='a new directory')
  args = parser.parse_args(argv)
  try:
    run = run_config.resolve(args.workdir, args.config, overrides)
    step = export(run, args.workdir, args.out)
  except (config_lib.ConfigError, hf.ConvertError) as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  print(f'exported step {step} of {args.workdir} to {args.out}: config.json, '
        f'model.safetensors, tokenizer.json, tokenizer_config.json, {zoo_run.FILE}')


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
