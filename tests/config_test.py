import glob
import os

import pytest

from tests import helpers
from zoo import config as config_lib
from zoo.models import dims

CONFIG = os.path.join(helpers.__file__.rsplit('/tests/', 1)[0], 'configs', 'gpt_shakespeare.py')


def test_load_applies_typed_overrides_and_locks():
  c = helpers.load(CONFIG + ':smoke', ['train.steps=7', 'optim.learning_rate=1',
                                          "model.activation=gelu", 'model.use_bias=True'])
  assert c.train.steps == 7 and c.optim.learning_rate == 1.0
  assert c.model.activation == 'gelu' and c.model.use_bias is True
  with pytest.raises(AttributeError):
    c.train.stepz = 3


def test_tokenizer_vocab_follows_model_vocab():
  c = helpers.load(CONFIG + ':smoke', ['model.vocab_size=1000'])
  assert c.data.tokenizer.vocab_size == 1000


@pytest.mark.parametrize('override,message', [
    ('train.stepz=3', "unknown config key 'train.stepz'"),
    ('trian.steps=3', "unknown config key 'trian'"),
    ('train.steps=abc', 'train.steps=abc: wrong type'),
    ('noequals', 'write it as --config.noequals=VALUE'),
    ('train.stepz=3', r"'train.stepz'; did you mean --config.train.steps\?$"),
    ('trian.steps=3', r"'trian' in --config.trian.steps; did you mean --config.train\?$"),
    ('model.moe.top_kk=3', r"did you mean --config.model.moe.top_k\?$"),
    ('train.xyzzy=3', r"'train.xyzzy'; check the spelling against the config file$"),
])
def test_bad_overrides_name_the_key(override, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    helpers.load(CONFIG + ':smoke', [override])


@pytest.mark.parametrize('name', ['t5_base', 'mixtral_8x7b', 'gpt_shakespeare'])
def test_an_unknown_variant_is_a_config_error_naming_it(name):
  with pytest.raises(config_lib.ConfigError, match=r"unknown variant 'tiny'.*use :smoke"):
    helpers.load(f'configs/{name}.py:tiny')


@pytest.mark.parametrize('overrides,message', [
    ({'model.num_heads': 3}, 'model.num_heads=3 does not divide model.d_model=32'),
    ({'model.num_kv_heads': 3}, 'model.num_kv_heads=3 does not divide model.num_heads=4'),
    ({'model.activation': 'swish'}, "model.activation='swish' is not one of"),
    ({'model.family': 'rnn'}, "model.family='rnn' is not one of"),
    ({'optim.learning_rate': 0.0}, 'optim.learning_rate=0.0 must be positive'),
    ({'optim.learning_rate': -1e-3}, 'optim.learning_rate=-0.001 must be positive'),
    ({'train.steps': 0}, 'train.steps=0 must be positive'),
    ({'model.position': 'learned', 'data.seq_len': 128},
     'data.seq_len=128 exceeds model.max_length=64'),
    ({'mesh.data': 0}, 'mesh.data=0 must be positive or -1'),
    ({'model.rope_scaling.type': 'longrope'},
     "model.rope_scaling.type='longrope' is not one of 'none', 'llama3', 'linear'"),
    ({'model.rope_scaling.type': 'llama3', 'model.rope_scaling.high_freq_factor': 0.5},
     r"model.rope_scaling.type='llama3' needs 0 < low_freq_factor=1.0 <= high_freq_factor=0.5 "
     r'.equal: no smoothing band, as Llama 4 Scout.'),
    ({'model.moe.num_experts': 4, 'model.moe.shared_mlp_dim': 24},
     r'model.moe.shared_mlp_dim=24 sizes shared experts, and model.moe.num_shared_experts=0'),
    ({'model.rope_scaling.type': 'yarn', 'model.rope_scaling.original_max_length': 0},
     r"model.rope_scaling.type='yarn' needs original_max_length (the trained context"),
    ({'model.rope_scaling.type': 'yarn', 'model.rope_scaling.beta_fast': 0.5},
     r"model.rope_scaling.type='yarn' needs 0 < beta_slow=1.0 <= beta_fast=0.5"),
    ({'model.rope_scaling.type': 'linear', 'model.rope_scaling.factor': 0.5},
     r"model.rope_scaling.factor=0.5 must be >= 1 for type 'linear'"),
    ({'model.attention.pattern': 'LGX', 'model.attention.window': 4},
     r"model.attention.pattern='LGX': use L .local., G .global., C .chunked., N .global, "
     r"no RoPE. and D .Gated DeltaNet."),
    ({'model.attention.pattern': 'DG', 'model.delta.chunk': 5},
     r'model.delta.chunk=5 does not divide data.seq_len=16; use a divisor'),
    ({'model.attention.pattern': 'DG', 'model.delta.value_heads': 3},
     r'model.delta.key_heads=16 must divide value_heads=3'),
    ({'model.attention.pattern': 'DG', 'model.delta.chunk': 8, 'mesh.context': 2},
     r"mesh.context=2: Gated DeltaNet .'D'. layers carry their state along the whole sequence"),
    ({'model.attention.pattern': 'DG', 'model.delta.chunk': 8, 'model.mtp.depth': 1},
     r"Gated DeltaNet .'D'. layers beside latent attention or MTP modules are not built"),
    ({'model.attention.pattern': 'DG', 'model.delta.chunk': 8,
      'generate.draft_workdir': '/tmp/draft'},
     r"speculative decoding .* Gated DeltaNet .'D'. layers keep one state that cannot rewind"),
    ({'model.rope_fraction': 0.2}, r'model.rope_fraction=0.2 must be in .0, 1. and rotate an even'),
    ({'model.moe.num_experts': 4, 'model.moe.shared_gate': True},
     r'model.moe.shared_gate gates the shared experts, and num_shared_experts=0'),
    ({'model.attention.pattern': 'CN'},
     r"model.attention.pattern='CN' has chunked layers but model.attention.chunk=0; set the "
     r"chunk .Llama 4: 8192."),
    ({'model.attention.chunk': 5}, r'model.attention.chunk=5 does not divide data.seq_len=16 '),
    ({'model.attention.chunk': 8, 'model.attention.window': 4},
     r'model.attention.chunk=8 and window=4 on every layer: one or the other'),
    ({'model.attention.pattern': 'N', 'model.rope_scaling.type': 'linear'},
     r"model.rope_scaling.type='linear' scales RoPE, and no layer rotates"),
    ({'model.attention.nope_scale': 0.1},
     r"model.attention.nope_scale=0.1 tunes the N .no RoPE. layers and pattern='' has none"),
    ({'model.attention.qk_l2_norm': True, 'model.qk_norm': True},
     r'model.attention.qk_l2_norm .no gain, Llama 4. and model.qk_norm .a learned gain'),
    ({'model.moe.num_experts': 4, 'model.moe.gate_input': True,
      'model.moe.capacity_factor': 1.0},
     r'model.moe.gate_input .Llama 4. scales the tokens going into dropless experts'),

    ({'model.attention.pattern': 'LG'},
     r"model.attention.pattern='LG' has local layers but model.attention.window=0"),
    ({'model.attention.pattern': 'LLLG', 'model.attention.window': 4},
     r"model.attention.pattern='LLLG' is longer than model.num_layers=2"),
    ({'model.attention.softcap': -1.0}, r'model.attention.softcap=-1.0, .* must be >= 0'),
    ({'model.relative_bias_per_layer': True},
     r"model.relative_bias_per_layer=True gives each layer a T5 bias table, and "
     r"model.position='rope' has none; set position='t5_bias'"),
    ({'model.separate_encoder_embed': True},
     r"model.separate_encoder_embed=True: model.family='decoder' has no encoder"),
    ({'model.family': 'encoder_decoder', 'model.num_encoder_layers': 4,
      'model.num_decoder_layers': 1, 'data.objective': 'span_corruption',
      'data.num_sentinels': 0, 'model.attention.pattern': 'LG', 'model.attention.window': 4},
     r"model.attention.pattern='LG' is longer than model.num_decoder_layers=1"),
    ({'generate.temperature': -1.0}, r'generate.temperature=-1.0 .* must be >= 0'),
    ({'generate.num_beams': 4, 'generate.temperature': 0.7},
     r'generate.num_beams=4 searches, it does not sample; set generate.temperature=0'),
    ({'generate.min_p': 1.0}, r'generate.min_p=1.0 must be in \[0, 1.*0 = off'),
    ({'generate.min_p': -0.1}, r'generate.min_p=-0.1 must be in \[0, 1'),
    ({'generate.min_new_tokens': 9, 'generate.max_new_tokens': 8},
     r'generate.min_new_tokens=9 must be in \[0, generate.max_new_tokens=8\]'),
    ({'generate.min_new_tokens': 2, 'generate.draft_mtp': True, 'model.mtp.depth': 1},
     r'generate.min_new_tokens=2 with speculative decoding .*set generate.min_new_tokens=0'),
    ({'generate.repetition_penalty': 0.9},
     r'generate.repetition_penalty=0.9 must be >= 1 .1 = off'),
    ({'generate.frequency_penalty': -0.5}, r'generate.frequency_penalty=-0.5 must be >= 0'),
    ({'generate.stop': ('',)}, r"generate.stop=.'',.*must be a tuple of non-empty strings"),
    ({'model.family': 'encoder_decoder', 'data.objective': 'span_corruption',
      'data.num_sentinels': 0},
     "model.num_encoder_layers=0 must be positive: model.family='encoder_decoder' counts its "
     'blocks in model.num_encoder_layers and model.num_decoder_layers'),
    ({'data.objective': 'mlm'}, "data.objective='mlm' does not train model.family='decoder'"),
    ({'model.family': 'encoder', 'data.objective': 'mlm', 'model.attention.window': 4},
     "model.attention.window=4: a sliding window is not built for model.family='encoder'"),
    ({'model.position': 't5_bias'}, "model.position='t5_bias' is not built for model.family="
                                    "'decoder'; use one of 'learned', 'sinusoidal', 'rope'"),
    ({'model.family': 'encoder_decoder', 'model.num_encoder_layers': 2,
      'model.num_decoder_layers': 2, 'data.objective': 'span_corruption',
      'data.num_sentinels': 0, 'model.position': 't5_bias', 'model.block': 'parallel'},
     "model.block='parallel' is not built for model.family='encoder_decoder'"),
    ({'sharding.rules': (('batch', 'pod'),)}, "unknown mesh axis 'pod'"),
    ({'optim.name': 'lion'}, "optim.name='lion' is not one of 'adamw', 'adafactor'"),
    ({'optim.schedule': 'step'}, "optim.schedule='step' is not one of"),
    ({'train.microbatches': 3}, r'train.microbatches=3 does not divide the rows of each input '
                                r'stream (train.batch_size=4 / 1 streams = 4\); use a divisor'),
    ({'train.microbatches': 0}, 'train.microbatches=0 must be positive'),
    ({'optim.schedule': 'wsd', 'optim.decay_fraction': 1.5},
     r'optim.decay_fraction=1.5 must be in (0, 1\): the share of train.steps'),
    ({'optim.schedule': 'wsd', 'optim.decay_fraction': 0.95},
     r'optim.warmup_steps=1 \+ the wsd decay.*add --config.optim.warmup_steps=0 or a smaller '
     r'--config.optim.decay_fraction'),
    ({'train.steps': 30, 'optim.warmup_steps': 30},
     r'optim.warmup_steps=30 must be in \[0, train.steps=30\): a shorter run needs a shorter '
     r'warmup; add --config.optim.warmup_steps=3 .a tenth of the run. or raise train.steps'),
    ({'model.moe.num_experts': 4, 'model.moe.collapse_ratio': 1.0},
     r'model.moe.collapse_ratio=1.0 must be > 1: it is a multiple of the balanced share'),
    ({'optim.adafactor.momentum': 0.9},
     "optim.adafactor.momentum=0.9 is read only by Adafactor; set optim.name='adafactor'"),
    ({'optim.name': 'adafactor', 'optim.b2': 0.999},
     "optim.b2=0.999 is AdamW's; optim.name='adafactor' reads optim.adafactor.decay_rate"),
    ({'optim.name': 'adafactor', 'optim.adafactor.factored': False,
      'optim.adafactor.min_dim_size_to_factor': 32},
     'optim.adafactor.min_dim_size_to_factor=32 says which moments to factor, but '
     'optim.adafactor.factored=False'),
    ({'optim.name': 'adafactor', 'optim.adafactor.decay_rate': 0.0},
     'optim.adafactor.decay_rate=0.0 must be in (0, 1]'),
    ({'train.loss_chunk_len': -2}, 'train.loss_chunk_len=-2 must be >= 0, or -1'),
    ({'mesh.dcn_axis': 'tensor'}, "mesh.dcn_axis='tensor': the slices can split data, fsdp, "
                                  'stage; use one of those'),
    ({'data.task.kind': 'summary', 'data.task.path': '/t'},
     "data.task.kind='summary' is not one of 'classification', 'regression'"),
    ({'data.task.kind': 'text_to_text'}, "data.task.kind='text_to_text' needs "
                                         'data.task.path: a directory holding train.jsonl'),
    ({'data.task.kind': 'classification', 'data.task.path': '/t',
      'data.task.metrics': ('accuracy', 'bleu')},
     "data.task.metrics: 'bleu' does not apply to data.task.kind='classification'; use some "
     'of accuracy, f1, mcc'),
    ({'data.task.path': '/t'}, 'data.task.path and data.task.metrics need a data.task.kind'),
    ({'model.num_labels': 3}, 'model.num_labels=3 builds a classification head, which '
                              'pretraining does not train'),
    ({'data.task.kind': 'prompt_completion', 'data.task.path': '/t', 'model.num_labels': 3},
     "model.num_labels=3 builds a classification head, which "
     "data.task.kind='prompt_completion' does not read"),
    ({'data.task.kind': 'regression', 'data.task.path': '/t', 'model.num_labels': 2},
     'model.num_labels=2: a regression head predicts one value'),
    ({'data.task.kind': 'classification', 'data.task.path': '/t', 'model.num_labels': 1},
     'model.num_labels=1 cannot classify'),
    ({'model.family': 'encoder_decoder', 'model.num_encoder_layers': 2,
      'model.num_decoder_layers': 2, 'data.objective': 'span_corruption',
      'model.position': 't5_bias', 'data.num_sentinels': 0, 'data.task.kind': 'classification',
      'data.task.path': '/t'},
     "data.task.kind='classification' is not built for model.family='encoder_decoder'; use "
     "one of 'text_to_text'"),
    ({'mesh.context': 4, 'data.seq_len': 12},
     'data.seq_len=12 does not split into 8 chunks for mesh.context=4 (a causal model holds '
     r'two chunks per device, one early and one late\); use a multiple of 8'),
    ({'mesh.context': 2, 'model.position': 'alibi'},
     "mesh.context=2: ring attention takes no position bias, and model.position='alibi' adds "
     "one; use 'rope' or 'learned'; or use mesh.context=1"),
    ({'mesh.context': 2, 'model.attention.kernel': 'splash', 'data.seq_len': 256},
     "model.attention.kernel='splash' with mesh.context=2: each ring chunk (data.seq_len / 4 "
     r"= 64 tokens\) must be a multiple of 128; lengthen data.seq_len or use 'auto' or 'xla'"),
    ({'mesh.context': 2, 'model.attention.kernel': 'gpu', 'data.seq_len': 128},
     "mesh.context=2: ring attention runs its local blocks in splash or XLA; set "
     "model.attention.kernel='auto', 'splash' or 'xla', not 'gpu'; or use mesh.context=1"),
    ({'mesh.context': 2, 'model.moe.num_experts': 4, 'model.moe.capacity_factor': 1.25},
     'mesh.context=2: model.moe.capacity_factor=1.25 gives each expert slots per whole '
     'sequence, which a split sequence does not hold; route dropless (model.moe.'
     r'capacity_factor=0\); or use mesh.context=1'),
    ({'model.family': 'encoder_decoder', 'model.num_encoder_layers': 2,
      'model.num_decoder_layers': 2, 'data.objective': 'span_corruption',
      'model.position': 't5_bias', 'data.num_sentinels': 0, 'mesh.context': 2},
     "mesh.context=2: ring attention is not built for model.family='encoder_decoder' "
     r'(cross-attention over a split sequence\); or use mesh.context=1'),
    ({'model.mtp.depth': -1}, 'model.mtp.depth=-1 must be >= 0'),
    ({'model.mtp.depth': 1, 'model.position': 'learned'},
     "model.mtp.depth=1: multi-token prediction is built for language-model decoders with "
     r"model.position='rope' (or 'none'\); model.family='decoder', position='learned'; set "
     'model.mtp.depth=0'),
    ({'model.mtp.depth': 1, 'model.mtp.late_from': 1.5},
     'model.mtp: loss_weight=0.3 and late_loss_weight=0.3 must be >= 0 and late_from=1.5 in '
     r'\[0, 1\]'),
    ({'model.mtp.depth': 1, 'mesh.context': 2},
     'mesh.context=2: model.mtp.depth=1: the prediction modules read the sequence in order, '
     'not split; set model.mtp.depth=0; or use mesh.context=1'),
    ({'model.quant.mode': 'int4'}, "model.quant.mode='int4' is not one of"),
    ({'model.quant.mode': 'int8', 'model.quant.tile': 48},
     r'model.quant.tile=48 does not divide what query contracts (32\), key contracts (32\), '
     r'value contracts (32\), out contracts (32\), wi_0 contracts (32\), wi_1 contracts '
     r'(32\), wo contracts (64\); use a common divisor'),
    ({'model.quant.mode': 'fp8', 'model.dtype': 'float16'},
     "model.quant.mode='fp8' rescales in model.dtype and float16's range overflows"),
    ({'train.lora.rank': 4, 'train.lora.targets': 'query,wq'},
     "train.lora.targets='query,wq': wq names no dense layer of this model; choose from query, "
     'key, value, out, wi_0, wi_1, wo'),
    ({'train.lora.rank': 20, 'train.lora.targets': 'key'},
     r"train.lora.rank=20 exceeds key's smaller dimension 16 (in 32, out 16\); use a rank <= 16"),
    ({'train.lora.rank': 4, 'train.lora.dropout': 1.0},
     'train.lora.alpha=16.0 must be > 0 and train.lora.dropout=1.0 in'),
])
def test_validate_names_the_field(overrides, message):
  c = helpers.tiny_config()
  for key, value in overrides.items():
    config_lib.apply_override(c, f'{key}={value!r}')
  with pytest.raises(config_lib.ConfigError, match=message.replace('(', r'\(')):
    helpers.validate(c)


def test_explicit_head_dim_lifts_the_divisibility_requirement():
  c = helpers.tiny_config(num_heads=3, num_kv_heads=1, head_dim=8)
  assert dims.head_dim(c.model) == 8


def test_every_config_file_has_a_smoke_variant():
  files = glob.glob(os.path.join(os.path.dirname(CONFIG), '*.py'))
  assert files
  for path in files:
    c = helpers.load(path + ':smoke')
    assert c.train.steps <= 20, path


@pytest.mark.parametrize('arg', ['bert', 'bert_pretrain', 't5', 't5_pretrain', 'gpt',
                                 'gpt_pretrain'])
def test_the_worked_fine_tuning_example_loads_in_every_variant(arg):
  c = helpers.load(os.path.join(os.path.dirname(CONFIG), 'finetune', 'speakers.py') +
                      f':{arg}')
  tuning = not arg.endswith('_pretrain')
  assert bool(c.data.task.kind) == tuning
  assert c.data.tokenizer.path == (f'runs/speakers_{arg}_pretrain/tokenizer/bpe_'
                                   f'{c.data.tokenizer.vocab_size}.model' if tuning else '')
