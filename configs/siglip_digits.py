"""Image-text training offline: a small SigLIP pairing scikit-learn's handwritten digits with
their captions ('a handwritten seven').

    python -m zoo.launch --config=configs/siglip_digits.py --workdir=/tmp/zoo/siglip_digits
    python -m zoo.launch --config=configs/siglip_digits.py:smoke --workdir=/tmp/zoo/siglip_smoke

The 1,797 grey 8 x 8 digits (zoo/data/digits.py) resized to 16 x 16, a quarter held out; a
vision tower over 16 patches of 4 x 4 pixels with attention pooling and a text tower over
captions of 8 tokens, two pre-norm blocks each, trained by SigLIP's sigmoid loss. The eval
rows' retrieval accuracy is zero-shot classification: each held-out image against the
batch's captions. Runs on a 2-core CPU in minutes (docs/performance.md has its numbers).
"""

from zoo import config as config_lib
from zoo import presets


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.num_layers = 2  # each tower
  m.d_model = 128
  m.num_heads = 4  # head_dim 32
  m.mlp_dim = 256
  presets.siglip(c, image_size=16, patch_size=4)
  m.vision.channels = 1  # the digits are grey
  m.max_length = 8  # a caption's pieces, EOS and padding
  m.vocab_size = 512  # a tokenizer trained on the captions: bytes and a few words

  d = c.data
  d.task.path = 'sklearn:digits'
  d.eval_fraction = 0.25  # 449 held-out pairs
  d.tokenizer.vocab_size = 512
  t = c.train
  t.steps = 600
  t.batch_size = 64  # pairs
  t.log_every = 50
  t.eval_every = 200
  t.eval_batches = 0  # every held-out pair
  t.checkpoint_every = 200
  c.optim.learning_rate = 1e-3
  c.optim.warmup_steps = 50
  c.optim.weight_decay = 0.0001  # the paper's 1e-4 (Sec. 4.1)
  t.spike.action = 'off'  # a loss near 0 makes every small rise a 'spike'
  return presets.variant(c, arg)
