"""The vision default job: a small ViT classifying scikit-learn's handwritten digits.

    python -m zoo.launch --config=configs/vit_digits.py --workdir=/tmp/zoo/vit_digits
    python -m zoo.launch --config=configs/vit_digits.py:smoke --workdir=/tmp/zoo/vit_smoke

The 1,797 grey 8 x 8 digits (zoo/data/digits.py) read as image files, resized to 16 x 16,
a quarter of them held out; 16 patches of 4 x 4 pixels and a class token through four
pre-norm blocks. Runs offline on a 2-core CPU in minutes (docs/performance.md has its time
and held-out accuracy).
"""

from zoo import config as config_lib
from zoo import presets


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 4
  m.d_model = 128
  m.num_heads = 4  # head_dim 32
  m.mlp_dim = 256
  presets.vit(c, image_size=16, patch_size=4, num_labels=10)
  m.vision.channels = 1  # the digits are grey
  m.dropout_rate = 0.1

  c.data.task.path = 'sklearn:digits'
  c.data.eval_fraction = 0.25  # 449 held-out images
  c.train.steps = 1500
  c.train.batch_size = 64  # images
  c.train.log_every = 50
  c.train.eval_every = 500
  c.train.eval_batches = 0  # every held-out image
  c.train.checkpoint_every = 500
  c.optim.learning_rate = 1e-3
  c.optim.warmup_steps = 100
  c.optim.weight_decay = 0.05
  c.train.spike.action = 'off'  # a train loss near 0 makes every small rise a 'spike'
  return presets.variant(c, arg)
