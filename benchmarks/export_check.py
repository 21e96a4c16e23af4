"""Check an export against transformers: AutoTokenizer's ids and AutoModelFor*'s logits
against the zoo's (needs the `hf-check` extra: transformers and a CPU torch).

    python -m zoo.convert.export --config=configs/gpt_shakespeare.py --workdir=W --out=DIR
    python benchmarks/export_check.py --config=configs/gpt_shakespeare.py --workdir=W --out=DIR

Prints, per prompt, whether the ids agree; whether byte pieces decode alike; the largest
logit difference (float32); and, for a decoder or T5, greedy generation by both: the new
tokens, and where each stopped (the exported EOS id against the zoo's); then beam search by
both (4 beams, generate.beam_rules='transformers' against transformers' generate) for each
length penalty and min_new_tokens in BEAMS: the completions' lengths and whether they are
the same text. A classifier
(model.num_labels): its task's eval split through AutoTokenizer and
AutoModelForSequenceClassification against the zoo: ids, label logits, predictions.
"""

import argparse

import jax.numpy as jnp
import numpy as np
import torch
import transformers

from zoo import config as config_lib
from zoo import families
from zoo import platform
from zoo import run as run_lib
from zoo.convert import hf
from zoo.data import task as task_lib
from zoo.infer import run as infer_run
from zoo.train import runtime

PROMPTS = ['\nROMEO: leads with a newline', '  two spaces', 'literal <s> and </s> in a text',
           'ROMEO:\nBut, soft! what light through yonder window breaks?']
NEW_TOKENS = 96
BEAMS = [(alpha, least) for alpha in (0.0, 1.0) for least in (0, 8)]  # (length, min_new_tokens)
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
  runtime.size_label_head(config)
  tokenizer = runtime.tokenizer(config, args.workdir)
  auto = transformers.AutoTokenizer.from_pretrained(args.out)
  for text in PROMPTS:
    print(f'ids equal: {zoo_ids(config, tokenizer, text) == auto(text)["input_ids"]} '
          f'for {text!r}')
  if hasattr(tokenizer, 'processor'):  # SentencePiece: <0xE2> <0x31> <0x6D>
    ids = [tokenizer.processor.piece_to_id(f'<0x{b:02X}>') for b in (0xE2, 0x31, 0x6D)]
    print(f'byte pieces decode alike: {auto.decode(ids) == tokenizer.decode(ids)} '
          f'({auto.decode(ids)!r})')
  if config.model.num_labels:
    _classifier(config, args.workdir, args.out, auto)
    return
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
  if family != 'encoder':
    _generation(config, args.workdir, tokenizer, auto, model)


def _classifier(config, workdir, out, auto):
  """A classifier on its task's eval split: transformers from the texts (AutoTokenizer,
  AutoModelForSequenceClassification, right-padded batches) against the zoo's rows: the
  ids, the label logits and the predictions."""
  task = task_lib.open_task(config.data, workdir, config.model.num_labels)
  family = families.get(config.model)
  rows = [family.task_example(config.data.task.kind, e, task.tokenizer, config.data)
          for e in task.eval]
  records = task_lib.read_split(config.data.task, 'eval')
  fields = [f for f in ('text', 'text_pair') if f in records[0]]
  batch = {k: jnp.asarray(np.stack([r[k] for r in rows])) for k in rows[0] if k != 'labels'}
  ours = np.asarray(families.build(config.model).apply(
      {'params': hf.load(out)[1]}, batch)['label_logits'])
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      out, dtype=torch.float32).eval()
  encoded = auto(*[[r[f] for r in records] for f in fields], padding='max_length',
                 truncation=True, max_length=config.data.seq_len, return_tensors='pt')
  same_ids = all(list(e[:int(m.sum())]) == list(r['inputs'][:int(r['segment_ids'].sum())])
                 for e, m, r in zip(encoded['input_ids'].numpy(),
                                    encoded['attention_mask'].numpy(), rows))
  with torch.no_grad():
    theirs = model(**encoded).logits.numpy()
  print(f'{len(rows)} eval examples of {config.data.task.path}: ids equal {same_ids}; '
        f'AutoModelForSequenceClassification ({model.config.architectures[0]}, labels '
        f'{list(model.config.id2label.values())}): max |zoo - transformers| label logits '
        f'{np.abs(ours - theirs).max():.2e}; the same prediction for '
        f'{np.mean(ours.argmax(-1) == theirs.argmax(-1)):.1%}, accuracy '
        f'{np.mean(theirs.argmax(-1) == [r["label"] for r in records]):.1%}; transformers '
        f'{transformers.__version__}, torch {torch.__version__}')


def _generation(config, workdir, tokenizer, auto, model):
  """Greedy decoding of one prompt by the zoo and by transformers' generate."""
  prompt = 'ROMEO:'
  with config.unlocked():
    config.generate.update(max_new_tokens=NEW_TOKENS, temperature=0.0)
  ours = infer_run.run(run_lib.resolve(config), workdir, [prompt])[0]
  ids = auto(prompt, return_tensors='pt')
  with torch.no_grad():
    out = model.generate(**ids, max_new_tokens=NEW_TOKENS, do_sample=False)[0].numpy()
  new = out[1:] if config.model.family == 'encoder_decoder' else out[ids['input_ids'].shape[1]:]
  theirs = infer_run.completions(config, tokenizer, [new])[0]
  stop = list(new).index(tokenizer.eos_id) if tokenizer.eos_id in new else None
  print(f'generate: the same text {ours == theirs}; transformers stopped '
        f'{f"at EOS (id {tokenizer.eos_id}) after {stop} tokens" if stop is not None else f"at max_new_tokens={NEW_TOKENS}"}; '
        f'generation_config eos_token_id {model.generation_config.eos_token_id}')
  for alpha, least in BEAMS:
    _beams(config, workdir, tokenizer, auto, model, prompt, alpha, least)


def _beams(config, workdir, tokenizer, auto, model, prompt, alpha, least):
  """One prompt by beam search, the zoo under transformers' rules and transformers'
  generate, with length penalty `alpha` and min_new_tokens `least`."""
  new_tokens = 40
  with config.unlocked():
    config.generate.update(max_new_tokens=new_tokens, num_beams=4, length_alpha=alpha,
                           beam_rules='transformers', min_new_tokens=least)
  ours = infer_run.run(run_lib.resolve(config), workdir, [prompt])[0]
  ids = auto(prompt, return_tensors='pt')
  with torch.no_grad():
    out = model.generate(**ids, max_new_tokens=new_tokens, num_beams=4, do_sample=False,
                         length_penalty=alpha, min_new_tokens=least,
                         early_stopping=False)[0].numpy()
  new = out[1:] if config.model.family == 'encoder_decoder' else out[ids['input_ids'].shape[1]:]
  theirs = infer_run.completions(config, tokenizer, [new])[0]
  count = lambda text: len(tokenizer.encode([text])[0])
  print(f'beams 4, length_penalty {alpha}, min_new_tokens {least}: the same text '
        f'{ours == theirs}; zoo {count(ours)} tokens, transformers {count(theirs)}; '
        f'{theirs[:60]!r}')


if __name__ == '__main__':
  platform.apply()  # the CLI's platform workarounds (zoo/platform.py)
  main()
