"""The worked fine-tuning example: who of tiny Shakespeare's four most frequent speakers
says a speech (zoo/data/speakers.py), for each family pretrained on the embedded corpus,
then fine-tuned from that checkpoint and, for comparison, from random initialisation.

    python -m zoo.data.speakers --out=runs/speakers_task
    python -m zoo.launch --config=configs/finetune/speakers.py:bert_pretrain
    python -m zoo.launch --config=configs/finetune/speakers.py:bert \
        --workdir=runs/speakers_bert_scratch
    python -m zoo.launch --config=configs/finetune/speakers.py:bert \
        --workdir=runs/speakers_bert_pretrained \
        --config.train.init_params=runs/speakers_bert_pretrain
(the same with t5 and gpt). Variants: FAMILY_pretrain trains FAMILY's objective on the
corpus (mlm, span corruption, causal LM); FAMILY fine-tunes on the task in FAMILY's form
(classification, text_to_text, prompt_completion), reading the pretraining run's tokenizer
either way, so scratch and pretrained see the same pieces. docs/finetune.md has the
table and the times.
"""

from zoo import config as config_lib

TASK = 'runs/speakers_task'
FORMS = {'bert': 'classification', 't5': 'text_to_text', 'gpt': 'prompt_completion'}


def _shape(c, family):
  m = c.model
  m.vocab_size, m.d_model, m.num_heads, m.mlp_dim, m.max_length = 2048, 128, 4, 512, 256
  m.dtype = 'float32'
  if family == 'bert':  # post-LayerNorm, GELU, learned positions, tied MLM head
    m.family, m.num_layers, m.type_vocab_size = 'encoder', 4, 2
    m.activation, m.norm, m.norm_eps, m.norm_position = 'gelu', 'layernorm', 1e-12, 'post'
    m.position, m.use_bias, m.tie_embeddings, m.embedding_norm = 'learned', True, True, True
    m.embed_init_std, m.kernel_init_std = 0.02, 0.02
    m.nsp_head = True  # pretraining: next-sentence prediction too, as BERT did (it trains
    # the pooler the classifier reads)
    c.data.objective = 'mlm'
  elif family == 't5':  # T5 v1.1: pre-RMSNorm, GEGLU, relative position bias
    m.family, m.num_layers, m.num_encoder_layers, m.num_decoder_layers = (
        'encoder_decoder', 0, 3, 3)
    m.activation, m.norm, m.position, m.use_bias = 'geglu', 'rmsnorm', 't5_bias', False
    m.head_dim = 32
    c.data.objective, c.data.reserved_ids, c.data.num_sentinels = 'span_corruption', 32, 32
    c.data.target_seq_len = 32
  else:  # Llama-style decoder
    m.family, m.num_layers, m.num_kv_heads = 'decoder', 4, 4
    m.activation, m.norm, m.position = 'swiglu', 'rmsnorm', 'rope'
    m.mlp_dim = 352
    c.data.objective = 'causal_lm'
  c.data.seq_len = 128


def get_config(arg='gpt'):
  family, _, stage = arg.partition('_')
  if family not in FORMS or stage not in ('', 'pretrain'):
    raise ValueError(f'unknown variant {arg!r} of speakers; use FAMILY or FAMILY_pretrain, '
                     f'FAMILY one of {", ".join(FORMS)}')
  c = config_lib.base()
  _shape(c, family)
  t, o = c.train, c.optim
  t.batch_size, t.log_every, t.checkpoint_every = 32, 20, 200
  o.weight_decay = 0.01
  if stage == 'pretrain':
    t.steps, t.eval_every, t.eval_batches = 600, 200, 0
    o.learning_rate, o.warmup_steps = 2e-3, 60
    return c
  pieces = c.data.tokenizer.vocab_size
  c.data.tokenizer.path = f'runs/speakers_{family}_pretrain/tokenizer/bpe_{pieces}.model'
  c.data.task.kind, c.data.task.path = FORMS[family], f'{TASK}/{FORMS[family]}'
  t.steps, t.eval_every, t.eval_batches = 300, 100, 0
  if family == 'bert':
    c.model.nsp_head = False
    t.drop_unused_params = True  # the MLM and NSP heads, which the classifier does not read
  o.learning_rate, o.warmup_steps = 5e-4, 30
  c.model.dropout_rate = 0.1  # BERT's and T5's fine-tuning dropout: 577 examples overfit
  c.generate.max_new_tokens = 8  # a speaker's name is at most a few pieces
  if family == 'gpt':
    c.data.task.metrics = ('mc_accuracy', 'exact_match', 'perplexity')
  return c
