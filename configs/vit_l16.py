"""ViT-L/16: 24 layers, d_model 1024, 16 heads, patches of 16 at 224 x 224, an ImageNet-1k
head: 304,326,632 parameters.

    python -m zoo.launch --config=configs/vit_l16.py --mode=plan
    python -m zoo.launch --config=configs/vit_l16.py:smoke --workdir=/tmp/zoo/vit_l16

Source: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", Table 1 (ViT-Large);
google/vit-large-patch16-224 config.json (ViTForImageClassification: the count above).
"""

from zoo import config as config_lib
from zoo import presets


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 24
  m.d_model = 1024
  m.num_heads = 16  # head_dim 64
  m.mlp_dim = 4096  # 4 * d_model
  presets.vit(c, image_size=224, patch_size=16, num_labels=1000)  # ImageNet-1k's classes
  m.dtype = 'bfloat16'  # compute; params stay float32
  return presets.variant(c, arg)
