"""A small Gemma-3-style decoder that reads images: it writes the caption of each of
scikit-learn's handwritten digits ('a handwritten seven') after seeing the image.

    python -m zoo.launch --config=configs/gemma3_digits.py --workdir=/tmp/zoo/gemma3_digits
    python -m zoo.launch --config=configs/gemma3_digits.py:smoke --workdir=/tmp/zoo/g3_smoke

Gemma 3's layout at toy size (zoo/models/multimodal.py): a SigLIP tower of two blocks over
16 patches of 4 x 4 pixels (the digits resized to 16 x 16), averaged to 4 tokens per image,
normed and projected into a decoder of four Gemma 3 blocks (local, local, local, global),
where the image's tokens attend each other both ways. A row is [BOS], the image's tokens,
the caption and [EOS], the loss on the caption. The eval rows' caption_accuracy is the
share of held-out images whose caption greedy decoding would write exactly (every caption
token the most likely one), which names the digit. Runs on a 2-core CPU in minutes
(docs/performance.md has its numbers).
"""

from zoo import config as config_lib
from zoo import presets


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 512  # a tokenizer trained on the captions, and the image token on top
  m.num_layers = 4
  m.d_model = 128
  m.num_heads = 4
  m.num_kv_heads = 2
  m.head_dim = 32
  m.mlp_dim = 256
  presets.gemma(c, version=3, max_length=64)
  m.attention.pattern, m.attention.window = 'LLLG', 8
  m.attention.kernel = 'xla'  # an image's tokens attend each other both ways
  m.vision.update(image_size=16, patch_size=4, channels=1, position='learned', pool='none')
  m.multimodal.update(tokens_per_image=4, image_token_id=511, d_model=64, num_layers=2,
                      num_heads=2, mlp_dim=128)

  d = c.data
  d.seq_len = 16  # [BOS], 4 image tokens, a caption of a few pieces, [EOS]
  d.reserved_ids = 1  # the image token, above the tokenizer's pieces
  d.task.kind, d.task.path, d.task.processor = 'image_text', 'sklearn:digits', 'siglip'
  d.eval_fraction = 0.25  # 449 held-out images
  t = c.train
  t.steps = 600
  t.batch_size = 64
  t.log_every = 50
  t.eval_every = 200
  t.eval_batches = 0  # every held-out image
  t.checkpoint_every = 200
  o = c.optim
  o.learning_rate, o.warmup_steps, o.weight_decay = 2e-3, 50, 0.01
  t.spike.action = 'off'  # a loss near 0 makes every small rise a 'spike'
  return presets.variant(c, arg)
