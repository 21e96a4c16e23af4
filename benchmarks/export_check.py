"""Check an export against transformers: AutoTokenizer's ids and AutoModelFor*'s logits
against the zoo's (needs the `hf-check` extra: transformers and a CPU torch).

    python -m zoo.convert.export --config=configs/gpt_shakespeare.py --workdir=W --out=DIR
    python benchmarks/export_check.py --config=configs/gpt_shakespeare.py --workdir=W --out=DIR

Prints, per prompt, whether the ids agree, then the largest logit difference (float32).
"""

import argparse

import jax.numpy as jnp
import numpy as np
import torch
import transformers

from zoo import config as config_lib
from zoo import families
from zoo.convert import hf
from zoo.train import runtime

PROMPTS = ['\nROMEO: leads with a newline', '  two spaces',
           'ROMEO:\nBut, soft! what light through yonder window breaks?']
_AUTO = {'decoder': transformers.AutoModelForCausalLM, 'encoder': transformers.AutoModelForMaskedLM,
         'encoder_decoder': transformers.AutoModelForSeq2SeqLM}


def zoo_ids(config, tokenizer, text):
  """The ids the zoo feeds its model for a text (families' INPUT_SPECIALS around it)."""
  specials = families.get(config.model).INPUT_SPECIALS
  head = [tokenizer.bos_id] if 'bos' in specials and tokenizer.bos_id is not None else []
  return [*head, *tokenizer.encode([text])[0], *([tokenizer.eos_id] if 'eos' in specials else [])]


def main():
  parser = argparse.ArgumentParser()
  for flag in ('--config', '--workdir', '--out'):
    parser.add_argument(flag, required=True)
  args, overrides = parser.parse_known_args()
  config = config_lib.load(args.config, [o.removeprefix('--config.') for o in overrides])
  tokenizer = runtime.tokenizer(config, args.workdir)
  auto = transformers.AutoTokenizer.from_pretrained(args.out)
  for text in PROMPTS:
    print(f'ids equal: {zoo_ids(config, tokenizer, text) == auto(text)["input_ids"]} '
          f'for {text!r}')
  family = config.model.family
  model = _AUTO[family].from_pretrained(args.out, dtype=torch.float32).eval()
  ids = np.asarray([auto(PROMPTS[-1])['input_ids']])
  decoder = np.asarray([[0, *ids[0, :5]]])
  with torch.no_grad():
    extra = {'decoder_input_ids': torch.tensor(decoder)} if family == 'encoder_decoder' else {}
    theirs = model(torch.tensor(ids), **extra).logits.numpy()
  batch = {'inputs': jnp.asarray(ids)}
  if family == 'encoder_decoder':
    batch = {'encoder_inputs': jnp.asarray(ids), 'decoder_inputs': jnp.asarray(decoder)}
  elif family == 'encoder':
    batch.update(token_type_ids=jnp.zeros_like(batch['inputs']),
                 segment_ids=jnp.ones_like(batch['inputs']),
                 positions=jnp.arange(ids.shape[1])[None])
  out = families.build(config.model).apply({'params': hf.load(args.out)[1]}, batch)
  ours = np.asarray(out['logits'] if isinstance(out, dict) else out)
  print(f'{_AUTO[family].__name__}: max |zoo - transformers| logits '
        f'{np.abs(ours - theirs).max():.2e} (largest logit {np.abs(theirs).max():.2f}); '
        f'transformers {transformers.__version__}, torch {torch.__version__}')


if __name__ == '__main__':
  main()
