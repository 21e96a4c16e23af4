"""SigLIP base/16: two towers of 12 layers, d_model 768, 12 heads, patches of 16 at
224 x 224 and captions of 64 tokens: 203,155,970 parameters (vision 92,884,224, text
110,271,744, the temperature and bias 2).

    python -m zoo.launch --config=configs/siglip_base16.py --mode=plan
    python -m zoo.launch --config=configs/siglip_base16.py --config.data.task.path=DIR
    python -m zoo.launch --config=configs/siglip_base16.py:smoke --workdir=/tmp/zoo/siglip

DIR holds train.jsonl and eval.jsonl of {"image": PATH, "text": CAPTION}
(zoo/data/task.py). Source: Zhai et al. 2023, "Sigmoid Loss for Language Image
Pre-Training" (B/16); google/siglip-base-patch16-224 config.json (SiglipModel: the count
above).
"""

from zoo import config as config_lib
from zoo import presets


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 12  # each tower
  m.d_model = 768
  m.num_heads = 12  # head_dim 64
  m.mlp_dim = 3072  # 4 * d_model
  presets.siglip(c, image_size=224, patch_size=16)
  m.dtype = 'bfloat16'  # compute; params stay float32
  c.train.batch_size = 32_768  # pairs: the paper's batch (Sec. 4.1)
  return presets.variant(c, arg)
