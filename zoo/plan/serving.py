"""What `python -m zoo.serve` holds per device beside the weights (plan mode, decoders): the
paged KV cache's bytes per page (every attention layer keeps its pages, local and chunked
ones included: zoo/serve), the configured pool (serve.num_pages), the per-sequence state of
Gated DeltaNet layers (a slot per decoding row), and on a known chip how many pages its
memory holds beside the weights. The weights are placed as training places them; the
keys' and values' pool splits its kv heads over `tensor` where they divide."""

import numpy as np

from zoo.families import decoder
from zoo.models import delta_net
from zoo.models import dims
from zoo.models import mla

HEADROOM = 0.9  # the share of a chip's memory the weights and pages may fill


def plan(config, result, hbm_bytes=None):
  """-> the plan's `serving` dict."""
  m, s = config.model, config.serve
  itemsize = np.dtype(m.dtype).itemsize
  layers = decoder.kv_cache_layers(m)
  tensor = result['mesh'].get('tensor', 1)
  if m.mla.kv_lora_rank:  # the latent and rotary key, whole on every device
    per_token = mla.cache_values_per_token(m) * itemsize
  else:
    split = tensor if dims.kv_heads(m) % tensor == 0 else 1
    per_token = 2 * dims.kv_heads(m) * dims.head_dim(m) * itemsize // split
  page = layers * per_token * s.page_size
  d = m.delta
  state = decoder.delta_layers(m) * delta_net.state_bytes(
      d.key_heads, d.value_heads, d.key_dim, d.value_dim, d.conv_width, itemsize) * (
          s.max_seqs + 1)
  weights = result['per_device_bytes']['params']
  out = {'page_bytes_per_device': page, 'page_size': s.page_size, 'num_pages': s.num_pages,
         'pool_bytes_per_device': page * s.num_pages, 'state_bytes_per_device': state,
         'weights_bytes_per_device': weights, 'max_len': s.max_len or config.data.seq_len}
  if hbm_bytes:
    room = hbm_bytes * HEADROOM - weights - state
    out['pages_fit_per_device'] = max(int(room // page), 0) if page else 0
  return out


def lines(result):
  if 'serving' not in result:
    return []
  v = result['serving']
  size = lambda b: f'{b / 2**30:,.2f} GiB' if b >= 2**30 else f'{b / 2**20:,.1f} MiB'
  line = (f"serving (zoo.serve): a page of {v['page_size']} tokens holds "
          f"{size(v['page_bytes_per_device'])} per device over the layers; serve.num_pages="
          f"{v['num_pages']} take {size(v['pool_bytes_per_device'])} beside the weights' "
          f"{size(v['weights_bytes_per_device'])}")
  if v['state_bytes_per_device']:
    line += f" and the recurrent state's {size(v['state_bytes_per_device'])}"
  if 'pages_fit_per_device' in v:
    fit = v['pages_fit_per_device']
    line += (f"; {HEADROOM:.0%} of the chip's memory holds {fit:,} pages beside them "
             f"({fit * v['page_size']:,} tokens, {fit * v['page_size'] // v['max_len']:,} "
             f"sequences of {v['max_len']:,})")
  return [line]
