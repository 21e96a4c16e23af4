"""SigLIP so400m/14 at 384: two shape-optimised towers (Alabdulmohsin et al. 2023) of 27
layers, d_model 1152, 16 heads, MLP 4304, patches of 14 at 384 x 384 and captions of 64
tokens: 877,960,498 parameters (vision 428,225,600, text 449,734,896, the temperature and
bias 2). The tower Gemma 3 and PaliGemma 2 read images with (Gemma 3 at 896 x 896).

    python -m zoo.launch --config=configs/siglip_so400m14.py --mode=plan
    python -m zoo.launch --config=configs/siglip_so400m14.py:smoke --workdir=/tmp/zoo/so400m

Source: google/siglip-so400m-patch14-384 config.json (SiglipModel: the count above);
Zhai et al. 2023 (the loss and recipe).
"""

from zoo import config as config_lib
from zoo import presets


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 27  # each tower
  m.d_model = 1152
  m.num_heads = 16  # head_dim 72
  m.mlp_dim = 4304
  presets.siglip(c, image_size=384, patch_size=14)
  m.dtype = 'bfloat16'  # compute; params stay float32
  c.train.batch_size = 32_768  # pairs (Zhai et al. 2023, Sec. 4.1)
  return presets.variant(c, arg)
