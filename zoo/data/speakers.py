"""The worked fine-tuning task: who of the embedded corpus's most frequent speakers says a
speech, built deterministically from tiny Shakespeare in the three forms data.task reads.

    python -m zoo.data.speakers --out=runs/speakers_task

writes OUT/classification (text, label: BERT), OUT/text_to_text (inputs, targets: T5) and
OUT/prompt_completion (prompt, completion: decoders), each with train.jsonl and
eval.jsonl, and OUT/README.txt with the label names and counts. A document of the corpus
is 'NAME:\\nspeech'; the speeches of the `speakers` most frequent names are the examples,
labelled by rank (0 = the most frequent); every `eval_every`-th of them (in corpus order)
is held out.
"""

import argparse
import collections
import json
import os

from zoo.data import corpus as corpus_lib
from zoo.data import readers

SPEAKERS = 4
EVAL_EVERY = 5
PROMPT_END = '\nSpoken by: '  # the decoder's prompt: the speech, then this


def speeches(path=None):
  """[(speaker, speech)] of a corpus file (default: the embedded one) in order (documents
  'NAME:' newline speech)."""
  out = []
  for text, _ in readers.documents([path or corpus_lib.embedded_corpus()]):
    name, _, speech = text.strip().partition('\n')
    if name.endswith(':') and speech.strip():
      out.append((name[:-1], speech.strip()))
  return out


def build(speakers=SPEAKERS, eval_every=EVAL_EVERY, path=None):
  """-> (names by rank, {split: [(label, speech)]})."""
  pairs = speeches(path)
  counts = collections.Counter(name for name, _ in pairs)
  names = [name for name, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:speakers]]
  rank = {name: k for k, name in enumerate(names)}
  chosen = [(rank[name], speech) for name, speech in pairs if name in rank]
  splits = {'train': [], 'eval': []}
  for i, example in enumerate(chosen):
    splits['eval' if i % eval_every == eval_every - 1 else 'train'].append(example)
  return names, splits


def forms(names, label, speech):
  """One example in each form."""
  return {'classification': {'text': speech, 'label': label},
          'text_to_text': {'inputs': f'speaker: {speech}', 'targets': names[label]},
          'prompt_completion': {'prompt': speech + PROMPT_END, 'completion': names[label]}}


def write(out, speakers=SPEAKERS, eval_every=EVAL_EVERY):
  names, splits = build(speakers, eval_every)
  for form in ('classification', 'text_to_text', 'prompt_completion'):
    os.makedirs(os.path.join(out, form), exist_ok=True)
    for split, examples in splits.items():
      with open(os.path.join(out, form, f'{split}.jsonl'), 'w') as f:
        for label, speech in examples:
          f.write(json.dumps(forms(names, label, speech)[form]) + '\n')
  lines = [f'{k} {name}: train {sum(l == k for l, _ in splits["train"])}, eval '
           f'{sum(l == k for l, _ in splits["eval"])}' for k, name in enumerate(names)]
  majority = max(sum(l == k for l, _ in splits['eval']) for k in range(len(names)))
  lines.append(f'majority-class eval accuracy: {majority / len(splits["eval"]):.4f}')
  with open(os.path.join(out, 'README.txt'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  return lines


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', default='runs/speakers_task')
  parser.add_argument('--speakers', type=int, default=SPEAKERS)
  parser.add_argument('--eval_every', type=int, default=EVAL_EVERY)
  args = parser.parse_args(argv)
  print('\n'.join(write(args.out, args.speakers, args.eval_every)))
  print(f'wrote {args.out}/{{classification,text_to_text,prompt_completion}}/'
        '{train,eval}.jsonl')


if __name__ == '__main__':
  main()
