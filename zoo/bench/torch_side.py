"""Hugging Face's PyTorch side of a benchmark: the zoo model written out by
zoo.convert.hf.save (so shape and weights are the zoo's own) and loaded with transformers;
trained with torch.optim.AdamW at the zoo's hyperparameters, decoded with `generate`.

Needs torch and transformers (`pip install 'zoo[hf-check]'`, with a CPU torch on CPU boxes);
the zoo itself never imports torch.
"""

import importlib.util
import tempfile

import numpy as np

from zoo import families
from zoo.convert import hf

MISSING = "torch and transformers are not installed (pip install 'zoo[hf-check]')"


def available():
  """None when the PyTorch side can run, else why not."""
  found = all(importlib.util.find_spec(name) for name in ('torch', 'transformers'))
  return None if found else MISSING


# what a decoder's switches must be for transformers to compute the same model
_SAME = {
    'gpt2': {'position': 'learned', 'norm': 'layernorm', 'norm_position': 'pre',
             'activation': 'gelu_tanh', 'use_bias': True, 'tie_embeddings': True,
             'block': 'sequential', 'scale_tied_logits': False},
    'llama': {'position': 'rope', 'norm': 'rmsnorm', 'norm_position': 'pre',
              'activation': 'swiglu', 'use_bias': False, 'block': 'sequential',
              'scale_tied_logits': False},
}


def check(config):
  """Raises ConfigError when transformers has no model computing what the config does."""
  m = config.model
  family = families.get(m)
  if 'causal_lm' not in family.OBJECTIVES:
    raise hf.ConvertError(f"model.family={family.NAME!r}: the PyTorch side is a causal LM; "
                          "use a decoder config or --torch=off")
  kind = family.hf_model_type(m)
  for field, value in _SAME['gpt2' if kind == 'gpt2' else 'llama'].items():
    if m[field] != value:
      raise hf.ConvertError(f'model.{field}={m[field]!r}: Hugging Face {kind} computes '
                            f'{value!r}; set it so or use --torch=off')
  if kind == 'gpt2' and m.num_kv_heads not in (0, m.num_heads):
    raise hf.ConvertError(f'model.num_kv_heads={m.num_kv_heads}: Hugging Face gpt2 has no '
                          'grouped-query attention; set it to 0 or use --torch=off')


def _load(config, params):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  transformers.utils.logging.disable_progress_bar()  # 'Loading weights' from a temporary file
  with tempfile.TemporaryDirectory() as directory:
    hf.save(config, params, directory)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation='sdpa')
  return model


class Trainer:
  """step() runs one forward, backward and AdamW update; first_loss as the zoo's."""

  def __init__(self, config, params, batch):
    import torch  # pylint: disable=g-import-not-at-top
    self.torch = torch
    self.model = _load(config, params)
    self.model.train()
    o = config.optim
    self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=o.learning_rate,
                                       betas=(o.b1, o.b2), eps=o.eps,
                                       weight_decay=o.weight_decay)
    self.inputs = torch.from_numpy(np.asarray(batch['inputs'], np.int64))
    self.targets = torch.from_numpy(np.asarray(batch['targets'], np.int64))
    self.first_loss = self.step()

  def step(self):
    logits = self.model(input_ids=self.inputs).logits
    loss = self.torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), self.targets.reshape(-1))
    loss.backward()
    self.optimizer.step()
    self.optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


class Matmul:
  """run() computes one [M, K] x [K, N] product in float32 (the dtype this side trains in),
  alone: the speed torch's matmul library reaches outside the train step."""

  def __init__(self, shape):
    import torch  # pylint: disable=g-import-not-at-top
    M, K, N = shape
    self.flops = 2 * M * K * N
    generator = torch.Generator().manual_seed(0)
    self.a = torch.randn(M, K, generator=generator)
    self.b = torch.randn(K, N, generator=generator)
    self.torch = torch

  def run(self):
    with self.torch.inference_mode():
      return self.torch.mm(self.a, self.b)


class Decoder:
  """run() greedily generates new_tokens after the same prompts, with the KV cache."""

  def __init__(self, trainer, prompt_ids, new_tokens):
    self.torch, self.model = trainer.torch, trainer.model
    self.ids = self.torch.from_numpy(np.asarray(prompt_ids, np.int64))
    self.new_tokens = new_tokens

  def run(self):
    self.model.eval()
    with self.torch.inference_mode():
      out = self.model.generate(
          self.ids, attention_mask=self.torch.ones_like(self.ids), do_sample=False,
          max_new_tokens=self.new_tokens, min_new_tokens=self.new_tokens, use_cache=True,
          pad_token_id=0, eos_token_id=None)
    return out[:, self.ids.shape[1]:].numpy()
