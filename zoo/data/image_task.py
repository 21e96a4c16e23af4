"""Image classification tasks (data.task.kind='image_classification'): DATA.TASK.PATH's
train.jsonl and eval.jsonl, one {"image": PATH, "label": CLASS} per line (PATH relative to
the task directory, or absolute), or data.task.path='sklearn:digits' (zoo/data/digits.py).

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


def task_directory(data_config, workdir):
  """data.task.path, or where the built-in digits are written."""
  if data_config.task.path == digits.SOURCE:
    return digits.write(workdir, data_config.eval_fraction, data_config.split_seed)
  return data_config.task.path


def check(record, where):
  """One line's image field (zoo/data/task.py checks its label as a class)."""
  if not isinstance(record.get('image'), str) or not record['image']:
    raise ConfigError(f"{where}: no field 'image' (a path to the image, relative to "
                      "data.task.path); data.task.kind='image_classification' reads image, "
                      'label')


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


def examples(records, data_config):
  """A grain MapDataset of {'pixels': [Y, X, C] float32, 'label'}, made as read."""
  made = processor(data_config)
  channels = data_config.image_channels

  def example(record):
    image = images.decode(record['image'], channels=channels)
    return {'pixels': images.pixels(image, made), 'label': record['label']}

  return grain.MapDataset.source(records).map(example)
