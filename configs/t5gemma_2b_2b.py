"""T5Gemma 2B-2B: Gemma 2 2B's blocks in a 26-layer encoder and a 26-layer decoder (local
4096-token windows alternating with global attention, two-sided in the encoder), d_model
2304, 8 heads sharing 4, head_dim 256, logits soft-capped (attention 50, output 30).

    python -m zoo.launch --config=configs/t5gemma_2b_2b.py --mode=plan
    python -m zoo.launch --config=configs/t5gemma_2b_2b.py:smoke --workdir=/tmp/zoo/t5gemma

Source: Zhang et al. 2025, "Encoder-Decoder Gemma: Improving the Quality-Efficiency
Trade-Off via Adaptation" (the first T5Gemma); google/t5gemma-2b-2b-ul2 config.json (the
defaults of transformers' T5GemmaModuleConfig are this size): 2 x 2,614,341,888 parameters
(Gemma 2 2B's, embeddings included) plus the decoder's cross-attention (368,169,984):
5,596,853,760, as transformers counts the class.
The paper adapts pretrained Gemma 2 checkpoints (start from one with zoo.convert.hf); trained
from scratch here, span corruption and Llama 2's optimizer settings stand in.
"""

from zoo import config as config_lib
from zoo import presets
from zoo import recipes


def get_config(arg=None):
  c = config_lib.base()
  m = c.model
  m.vocab_size = 256_000
  m.num_encoder_layers = 26
  m.num_decoder_layers = 26
  m.d_model = 2304
  m.num_heads = 8
  m.num_kv_heads = 4
  m.head_dim = 256
  m.mlp_dim = 9216
  presets.t5gemma(c)
  m.rope_theta = 10_000.0
  a = m.attention
  a.pattern, a.window = 'LG', 4096  # local first, then global, in both stacks
  a.query_scale = 256.0  # query_pre_attn_scalar
  a.softcap, m.final_softcap = 50.0, 30.0
  recipes.llama(c, learning_rate=3e-4, tokens=2e12)
  return presets.variant(c, arg)
