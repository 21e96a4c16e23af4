"""scikit-learn's digits as an image task (data.task.path='sklearn:digits'): 1,797 grey
8 x 8 images of handwritten digits 0-9 (the UCI optical-recognition set, 16 levels of
grey), which ship inside scikit-learn, written once as PNG files and the train.jsonl /
eval.jsonl that name them, so they are read as any image task is: each line holds the
image, its label (image_classification) and a caption naming the digit (image_text).

Glossary: Y image rows, X image columns.
"""

import json
import os

import numpy as np
from PIL import Image

from zoo import config as config_lib
from zoo.errors import ConfigError

SOURCE = config_lib.DIGITS
CLASSES = 10
NAMES = ('zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine')


def caption(label):
  """The text paired with a digit's image: 'a handwritten seven'."""
  return f'a handwritten {NAMES[label]}'


def directory(workdir):
  return os.path.join(workdir, 'digits')


def write(workdir, eval_fraction, split_seed):
  """-> the task directory WORKDIR/digits: images/NNNN.png (grey, 0..16 scaled to 0..255)
  and the two splits, eval_fraction of the images held out by a permutation of split_seed.
  Kept as it is when it holds this split already."""
  out = directory(workdir)
  manifest = {'source': SOURCE, 'eval_fraction': eval_fraction, 'split_seed': split_seed,
              'fields': ['image', 'label', 'text']}
  manifest_path = os.path.join(out, 'manifest.json')
  if os.path.isfile(manifest_path):
    with open(manifest_path) as f:
      if json.load(f) == manifest:
        return out
  try:
    from sklearn import datasets  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ConfigError(f"data.task.path={SOURCE!r} reads scikit-learn's copy of the digits; "
                      "pip install 'zoo[tasks]' (scikit-learn)") from None
  digits = datasets.load_digits()
  os.makedirs(os.path.join(out, 'images'), exist_ok=True)
  records = []
  for i, (image_YX, label) in enumerate(zip(digits.images, digits.target)):
    name = f'images/{i:04d}.png'
    grey_YX = np.round(image_YX * 255 / 16).astype(np.uint8)
    Image.fromarray(grey_YX).save(os.path.join(out, name))
    records.append({'image': name, 'label': int(label), 'text': caption(int(label))})
  order = np.random.default_rng(split_seed).permutation(len(records))
  held = max(1, round(eval_fraction * len(records)))
  splits = {'eval': sorted(order[:held]), 'train': sorted(order[held:])}
  for split, indices in splits.items():
    with open(os.path.join(out, f'{split}.jsonl'), 'w') as f:
      f.writelines(json.dumps(records[i]) + '\n' for i in indices)
  with open(manifest_path, 'w') as f:  # last: a directory without it is written again
    json.dump(manifest, f)
  return out
