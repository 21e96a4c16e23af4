"""Image tasks: DATA.TASK.PATH's train.jsonl and eval.jsonl, one example per line, or
data.task.path='sklearn:digits' (zoo/data/digits.py, whose lines carry both):
  image_classification  {"image": PATH, "label": CLASS}
  image_text            {"image": PATH, "text": TEXT} (a caption: image-text training)
PATH is relative to the task directory, or absolute.

Every image is opened and verified before anything compiles (one that pillow cannot read
is one line naming it); the pixels are made as examples are read (zoo/data/images.py:
decoded, resized to data.image_size with data.task.processor's filter, rescaled and
normalised), so the pipeline streams, shuffles and resumes an image task as a text one.
"""

import dataclasses
import os

import grain
from PIL import Image

from zoo.data import digits
from zoo.data import images
from zoo.errors import ConfigError

KIND = 'image_classification'
PAIRS = 'image_text'
KINDS = (KIND, PAIRS)


def task_directory(data_config, workdir):
  """data.task.path, or where the built-in digits are written."""
  if data_config.task.path == digits.SOURCE:
    return digits.write(workdir, data_config.eval_fraction, data_config.split_seed)
  return data_config.task.path


def check(record, kind, where):
  """One line's image field, and an image_text line's text (zoo/data/task.py checks an
  image_classification line's label as a class)."""
  reads = 'image, label' if kind == KIND else 'image, text'
  if not isinstance(record.get('image'), str) or not record['image']:
    raise ConfigError(f"{where}: no field 'image' (a path to the image, relative to "
                      f"data.task.path); data.task.kind={kind!r} reads {reads}")
  if kind == PAIRS and not (isinstance(record.get('text'), str) and record['text']):
    raise ConfigError(f"{where}: no field 'text' (the image's caption, a non-empty string); "
                      f"data.task.kind={kind!r} reads {reads}")


def processor(data_config):
  """data.task.processor's filter, mean and std, at data.image_size."""
  name, size = data_config.task.processor, data_config.image_size
  if name not in images.PROCESSORS:
    raise ConfigError(f'data.task.processor={name!r} is not one of '
                      f'{", ".join(map(repr, images.PROCESSORS))}')
  return dataclasses.replace(images.PROCESSORS[name], height=size, width=size)


def verified(directory, records, split_file):
  """-> the records with their images' full paths; an image that is missing or that pillow
  cannot read is a ConfigError naming it and the line."""
  out = []
  for number, record in records:
    path = os.path.join(directory, record['image'])
    try:
      with Image.open(path) as opened:
        opened.verify()
    except (OSError, ValueError) as e:
      raise ConfigError(f'{split_file}:{number}: image {path} cannot be read ({e}); give a '
                        'PNG, JPEG or another format pillow reads') from None
    out.append({**record, 'image': path})
  return out


def examples(records, data_config, texts=None):
  """A grain MapDataset of {'pixels': [Y, X, C] float32, 'label'}, or with `texts` (each
  record's text as int32 ids) {'pixels', 'text'}, the pixels made as read."""
  made = processor(data_config)
  channels = data_config.image_channels

  def example(index):
    record = records[index]
    image = images.decode(record['image'], channels=channels)
    known = {'label': record['label']} if texts is None else {'text': texts[index]}
    return {'pixels': images.pixels(image, made), **known}

  return grain.MapDataset.range(len(records)).map(example)
