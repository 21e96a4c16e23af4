"""Image pixels (zoo/data/images.py) equal transformers' image processors' (their PIL
backend) for real images, and an image pillow cannot read is one line naming it."""

import io

import matplotlib.cbook
import numpy as np
import pytest
import transformers
from PIL import Image

from zoo.data import images
from zoo.errors import ConfigError


def _photo():
  """A real photograph (matplotlib's sample), 512 x 600, RGB."""
  with matplotlib.cbook.get_sample_data('grace_hopper.jpg') as f:
    return Image.open(io.BytesIO(f.read()))


def _scan():
  """A handwritten digit from scikit-learn's scans, 8 x 8 greys, as a grey PNG's bytes."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digit = datasets.load_digits().images[7] * (255 / 16)
  encoded = io.BytesIO()
  Image.fromarray(digit.astype(np.uint8)).save(encoded, format='PNG')
  return encoded.getvalue()


@pytest.mark.parametrize('name,reference', [
    ('siglip', transformers.SiglipImageProcessorPil),
    ('vit', transformers.ViTImageProcessorPil),
    ('gemma3', transformers.Gemma3ImageProcessorPil)])
def test_pixels_equal_the_hugging_face_processors(name, reference):
  processor = images.PROCESSORS[name]
  theirs = reference(size={'height': processor.height, 'width': processor.width})
  for image in (_photo(), images.decode(_scan())):
    want = theirs(images=image, return_tensors='np')['pixel_values'][0].transpose(1, 2, 0)
    got = images.pixels(images.decode(_to_bytes(image)), processor)
    assert got.shape == (processor.height, processor.width, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def _to_bytes(image):
  encoded = io.BytesIO()
  image.save(encoded, format='PNG')
  return encoded.getvalue()


def test_an_image_that_does_not_decode_is_one_line_naming_it(tmp_path):
  broken = tmp_path / 'broken.png'
  broken.write_bytes(b'\x89PNG not really')
  with pytest.raises(ConfigError, match=r'broken\.png: pillow cannot decode it as an image'):
    images.decode(str(broken))
  with pytest.raises(ConfigError) as error:
    images.decode(b'nothing')
  assert '\n' not in str(error.value)
