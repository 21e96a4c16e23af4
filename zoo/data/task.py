"""Fine-tuning tasks (data.task): DATA.TASK.PATH/train.jsonl and eval.jsonl, one JSON
object per line, read whole, checked and tokenized once, before anything compiles.

The fields each data.task.kind reads (others are ignored):
  classification     text, text_pair (optional), label: an integer class 0, 1, ...
  regression         text, text_pair (optional), label: a number
  text_to_text       inputs, targets
  prompt_completion  prompt, completion; choices (optional): the candidate completions
                     multiple-choice accuracy scores (default: every distinct completion
                     of the split)
  chat, preference   conversations rendered by a chat template (zoo/data/chat_task.py)
  image_classification  image (a path), label (zoo/data/image_task.py; no tokenizer)
  image_text         image (a path), text (its caption; zoo/data/image_task.py)
A task is tokenized with the run's tokenizer (data.tokenizer.path: the pretrained
checkpoint's; else one trained on the train split's text and cached in WORKDIR/tokenizer).
The family turns each tokenized example into a model row (its `task_example`), and the
pipeline streams them (zoo/data/pipeline.py: make_task_rows), so a task streams, shuffles
and resumes exactly as a pretraining corpus does.
"""

import dataclasses
import json
import math
from typing import Any

import grain
import ml_collections

from zoo import storage
from zoo.data import chat
from zoo.data import chat_task
from zoo.data import digits
from zoo.data import image_task
from zoo.data import tokenizer as tokenizer_lib
from zoo.errors import ConfigError

SPLITS = ('train', 'eval')
FIELDS = {  # kind -> (required text fields, optional text fields); + label where headed
    'classification': (('text',), ('text_pair',)),
    'regression': (('text',), ('text_pair',)),
    'text_to_text': (('inputs', 'targets'), ()),
    'prompt_completion': (('prompt', 'completion'), ()),
}
HEADED = ('classification', 'regression', image_task.KIND)  # kinds a label head reads
GENERATED = ('text_to_text', 'prompt_completion')  # kinds whose outputs are generated text
PACKED = GENERATED + ('chat',)  # kinds whose rows pack several examples


@dataclasses.dataclass(frozen=True)
class Task:
  """A task as the run reads it; shaped like zoo/data/corpus.Corpus, so training and eval
  take either."""
  kind: str
  tokenizer: Any
  train: grain.MapDataset  # tokenized examples: {field: int32 ids, 'label': number}
  eval: grain.MapDataset
  records: dict  # split -> the examples as read (text), for generated-output metrics
  num_labels: int  # classification: classes; regression: 1; else 0
  sources: tuple = ()
  skipped: dict = dataclasses.field(default_factory=dict)  # split -> too long, left out
  template: Any = None  # a conversation kind's chat template (zoo/data/chat.py)

  def train_documents(self):
    return len(self.train)


def split_path(task_config, split):
  return storage.join(task_config.path, f'{split}.jsonl')


def read_split(task_config, split):
  """-> the split's examples (dicts), each checked for its kind's fields; a bad line is a
  ConfigError naming the file and the line."""
  return [record for _, record in read_numbered(task_config, split)]


def read_numbered(task_config, split):
  """-> [(line number, example)] of the split, each checked as read_split says."""
  path = split_path(task_config, split)
  if not storage.isfile(path):
    raise ConfigError(f'data.task.path={task_config.path!r} has no {split}.jsonl; put the '
                      f'{split} split there, one JSON object per line')
  records = []
  for number, line in enumerate(storage.read_text(path).splitlines(), 1):
    if not line.strip():
      continue
    where = f'{path}:{number}'
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise ConfigError(f'{where}: not a JSON object ({e.msg}); write one object per '
                        'line') from None
    if not isinstance(record, dict):
      raise ConfigError(f'{where}: not a JSON object; write one object per line')
    if task_config.kind in chat_task.KINDS:
      chat_task.check(record, task_config.kind, where)
    elif task_config.kind in image_task.KINDS:
      image_task.check(record, task_config.kind, where)
      if task_config.kind == image_task.KIND:
        _check_label(record.get('label'), 'classification', where)
    else:
      _check_fields(record, task_config.kind, where)
    records.append((number, record))
  if not records:
    raise ConfigError(f'{path} holds no examples; data.task needs a non-empty {split} split')
  return records


def _check_fields(record, kind, where):
  required, optional = FIELDS[kind]
  for field in required + (('label',) if kind in HEADED else ()):
    if field not in record:
      raise ConfigError(f'{where}: no field {field!r}; data.task.kind={kind!r} reads '
                        f'{", ".join(required)}' + (', label' if kind in HEADED else ''))
  for field in required + optional:
    if field in record and not isinstance(record[field], str):
      raise ConfigError(f'{where}: field {field!r} must be a string, got '
                        f'{type(record[field]).__name__}')
  if 'choices' in record and kind == 'prompt_completion' and not (
      isinstance(record['choices'], list) and record['choices'] and
      all(isinstance(c, str) for c in record['choices']) and
      record['completion'] in record['choices']):
    raise ConfigError(f'{where}: field choices must be a list of strings holding the '
                      'completion')
  _check_label(record.get('label'), kind, where)


def _check_label(label, kind, where):
  if kind == 'classification' and (isinstance(label, bool) or not isinstance(label, int)
                                   or label < 0):
    raise ConfigError(f'{where}: label {label!r} is not a class; classification labels are '
                      'integers 0, 1, ... (map names to ids when writing the file)')
  if kind == 'regression' and (isinstance(label, bool) or not isinstance(label, (int, float))
                               or not math.isfinite(label)):
    raise ConfigError(f'{where}: label {label!r} is not a finite number, which regression '
                      'needs')


def num_labels(kind, records, model_labels, task_config):
  """The head's size: model.num_labels, else (classification) the train split's largest
  label + 1; every label of every split must fit it."""
  if kind == 'regression':
    return 1
  if kind not in ('classification', image_task.KIND):
    return 0
  size = model_labels or 1 + max(r['label'] for r in records['train'])
  if size < 2:
    raise ConfigError(f"{split_path(task_config, 'train')}: every label is 0; a classifier "
                      'needs examples of two classes or more')
  for split in SPLITS:
    for number, record in enumerate(records[split], 1):
      if record['label'] >= size:
        source = (f'model.num_labels={model_labels}' if model_labels else
                  f"the train split's labels 0..{size - 1}")
        raise ConfigError(f'{split_path(task_config, split)}: example {number} has label '
                          f'{record["label"]}, which a head of {size} classes ({source}) '
                          'cannot hold; set model.num_labels to the class count')
  return size


def label_count(data_config):
  """The head's size for data.task as training resolves it (model.num_labels = 0: from the
  task's labels), for what reads no tokens (plan mode)."""
  task = data_config.task
  if task.path == digits.SOURCE:
    return digits.CLASSES
  return num_labels(task.kind, {split: read_split(task, split) for split in SPLITS}, 0, task)


def _texts(records, kind):
  if kind in chat_task.KINDS:
    return [text for r in records for text in chat_task.texts(r, kind)]
  required, optional = FIELDS[kind]
  return [r[f] for r in records for f in required + optional if f in r]


def tokenized(records, kind, tokenizer):
  """Each example's text fields as int32 ids (no special tokens), the label kept."""
  required, optional = FIELDS[kind]
  fields = [f for f in required + optional if any(f in r for r in records)]
  ids = {f: tokenizer.encode([r.get(f, '') for r in records]) for f in fields}
  return [{**{f: ids[f][i] for f in fields},
           **({'label': r['label']} if kind in HEADED else {})}
          for i, r in enumerate(records)]


def open_task(data_config, workdir, model_labels, new_tokens=0):
  """-> Task for data.task, with the tokenizer it reads (trained on the train split's
  text when neither data.tokenizer.path nor WORKDIR/tokenizer has one; for a conversation
  kind, with the default template's turn markers as whole pieces). new_tokens: what each
  prompt of a 'prompts' task leaves room for."""
  task = data_config.task
  if task.kind in chat_task.KINDS:
    return _open_conversations(data_config, workdir, new_tokens)
  if task.kind in image_task.KINDS:
    return _open_images(data_config, workdir, model_labels)
  records = {split: read_split(task, split) for split in SPLITS}
  size = num_labels(task.kind, records, model_labels, task)
  path = tokenizer_lib.load_or_train(data_config.tokenizer, workdir,
                                     lambda: _texts(records['train'], task.kind))
  tokenizer = tokenizer_lib.load(path)
  examples = {split: grain.MapDataset.source(tokenized(records[split], task.kind, tokenizer))
              for split in SPLITS}
  return Task(task.kind, tokenizer, examples['train'], examples['eval'], records, size)


def _open_images(data_config, workdir, model_labels):
  """An image task: each split's images verified, their pixels made as read
  (zoo/data/image_task.py); image_text's captions tokenized once (the tokenizer trained on
  the train split's captions where the run names none), image_classification's no
  tokenizer."""
  kind = data_config.task.kind
  if not data_config.task.path:
    raise ConfigError(f"data.task.kind='{kind}' needs data.task.path: a directory "
                      f'holding train.jsonl and eval.jsonl, or {digits.SOURCE!r}')
  image_task.processor(data_config)  # a name it does not know: before anything is written
  task = ml_collections.ConfigDict(data_config.task.to_dict())
  task.path = image_task.task_directory(data_config, workdir)
  records = {split: image_task.verified(task.path, read_numbered(task, split),
                                        split_path(task, split)) for split in SPLITS}
  size = num_labels(task.kind, records, model_labels, task)
  tokenizer, texts = None, {split: None for split in SPLITS}
  if kind == image_task.PAIRS:
    path = tokenizer_lib.load_or_train(data_config.tokenizer, workdir,
                                       lambda: [r['text'] for r in records['train']])
    tokenizer = tokenizer_lib.load(path)
    texts = {split: tokenizer.encode([r['text'] for r in records[split]]) for split in SPLITS}
  examples = {split: image_task.examples(records[split], data_config, texts[split])
              for split in SPLITS}
  return Task(task.kind, tokenizer, examples['train'], examples['eval'], records, size)


def _open_conversations(data_config, workdir, new_tokens):
  task = data_config.task
  numbered = {split: read_numbered(task, split) for split in SPLITS}
  records = {split: [r for _, r in numbered[split]] for split in SPLITS}
  path = tokenizer_lib.load_or_train(data_config.tokenizer, workdir,
                                     lambda: _texts(records['train'], task.kind),
                                     chat.TURN_MARKERS)
  tokenizer = tokenizer_lib.load(path)
  template = chat.for_run(task.template, path, tokenizer)
  examples, skipped = {}, {}
  for split in SPLITS:
    made, skipped[split] = chat_task.tokenized(numbered[split], task.kind, template, tokenizer,
                                               data_config, split_path(task, split),
                                               new_tokens)
    if not made:
      raise ConfigError(f'{split_path(task, split)}: every conversation is over '
                        f'data.seq_len={data_config.seq_len} tokens; raise data.seq_len')
    examples[split] = grain.MapDataset.source(made)
  return Task(task.kind, tokenizer, examples['train'], examples['eval'], records, 0,
              skipped=skipped, template=template)
