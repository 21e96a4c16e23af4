"""The default job: a small pre-norm decoder (RoPE, RMSNorm, SwiGLU) on tiny Shakespeare.

    python -m zoo.launch --config=configs/gpt_shakespeare.py --workdir=/tmp/zoo/gpt
    python -m zoo.launch --config=configs/gpt_shakespeare.py:smoke --workdir=/tmp/zoo/smoke
    python -m zoo.launch --config=configs/gpt_shakespeare.py:muon --workdir=/tmp/zoo/muon

5,310,720 parameters with a 4096-piece BPE vocabulary; sized to finish 300 steps in minutes
on a 2-core CPU (docs/performance.md has the latest time and losses).
"""

from zoo import config as config_lib
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.family = 'decoder'
  m.vocab_size = 4096  # BPE pieces, trained on the corpus on first use
  m.d_model = 256
  m.num_layers = 4
  m.num_heads = 4  # head_dim 64
  m.num_kv_heads = 4
  m.mlp_dim = 704  # SwiGLU: 3 * d * f ~ the 8 * d^2 of a 4x GELU MLP
  m.activation = 'swiglu'
  m.norm = 'rmsnorm'
  m.norm_position = 'pre'
  m.position = 'rope'
  m.max_length = 1024
  m.scan_unroll = 4  # the layer loop unrolled: ~10% faster on CPUs (zoo/config.py)
  m.dropout_rate = 0.0

  c.data.seq_len = 128  # documents (speeches) average ~45 pieces; packing fills the rows
  c.train.steps = 300
  c.train.batch_size = 32  # 4096 tokens per step
  c.train.log_every = 10
  c.train.eval_every = 100
  c.train.eval_batches = 0  # the whole held-out split (~17k tokens)
  c.train.checkpoint_every = 100
  c.optim.learning_rate = 3e-3
  c.optim.warmup_steps = 30
  c.optim.weight_decay = 0.1

  if arg == 'smoke':
    m.vocab_size = 512
    m.d_model = 64
    m.num_layers = 2
    m.num_heads = 4
    m.num_kv_heads = 2
    m.mlp_dim = 128
    c.data.seq_len = 64
    c.train.steps = 6
    c.train.batch_size = 8
    c.train.log_every = 1
    c.train.eval_every = 3
    c.train.eval_batches = 2
    c.train.checkpoint_every = 3
    c.optim.warmup_steps = 2
  elif arg == 'muon':  # Moonlight's Muon at the best of its rates here (docs/performance.md)
    recipes.moonlight_muon(c, learning_rate=1e-2)
    c.optim.muon.adamw_rate = 0.3  # the AdamW leaves at 3e-3, AdamW's own best here
  elif arg:
    raise ValueError(f'unknown variant {arg!r} of gpt_shakespeare; use :smoke, :muon or nothing')
  return c
