"""Images to the pixels a vision tower reads: decoded with pillow, resized, rescaled and
normalised as the checkpoint's Hugging Face image processor does it (its PIL backend), so
the same image gives the same pixels; channels last, [Y, X, C] float32.

Glossary: Y image rows, X image columns, C channels.
"""

import dataclasses
import io
import os

import numpy as np
from PIL import Image

from zoo.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Processor:
  """One image processor's settings (a preprocessor_config.json's)."""
  height: int
  width: int
  resample: int  # PIL's filter: 2 bilinear, 3 bicubic
  mean: tuple = (0.5, 0.5, 0.5)
  std: tuple = (0.5, 0.5, 0.5)
  scale: float = 1 / 255


# the published processors' settings at their towers' resolutions (each model's
# preprocessor_config.json): SigLIP resizes bicubic, Gemma 3's SigLIP tower and ViT bilinear
PROCESSORS = {
    'siglip': Processor(224, 224, Image.Resampling.BICUBIC),
    'siglip_384': Processor(384, 384, Image.Resampling.BICUBIC),
    'gemma3': Processor(896, 896, Image.Resampling.BILINEAR),
    'vit': Processor(224, 224, Image.Resampling.BILINEAR),
}


def decode(source, name=None, channels=3):
  """A file path or the bytes of an encoded image -> a PIL image, RGB (channels 3) or grey
  (1); an image pillow cannot read is a ConfigError naming it."""
  name = name or (source if isinstance(source, (str, os.PathLike)) else 'an image')
  try:
    opened = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
    opened.load()
  except (OSError, ValueError) as e:
    raise ConfigError(f'{name}: pillow cannot decode it as an image ({e}); give a PNG, JPEG '
                      'or another format pillow reads') from None
  return opened.convert({3: 'RGB', 1: 'L'}[channels])


def pixels(image, processor):
  """An RGB (or grey) PIL image -> [Y, X, C] float32: resized to the processor's size with
  its filter, then x scale, then (x - mean) / std, each step as transformers takes it (a
  grey image: the first channel's mean and std)."""
  resized = image.resize((processor.width, processor.height), resample=processor.resample)
  values = np.asarray(resized).astype(np.float64)
  rescaled_YXC = (values.reshape(*values.shape[:2], -1) * processor.scale).astype(np.float32)
  C = rescaled_YXC.shape[-1]
  return ((rescaled_YXC - np.asarray(processor.mean[:C], np.float32)) /
          np.asarray(processor.std[:C], np.float32))
