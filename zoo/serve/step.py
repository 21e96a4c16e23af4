"""The engine's compiled step: R rows of L tokens each fed through the decoder against the
paged cache (zoo.kernels.mask.Pages), each row's next token sampled from the logits of
its last fed token.

It is compiled once per shape: (max_seqs, 1) decodes, (prefill_rows, prefill_chunk)
prefills, each at a few page-table widths (powers of two up to the longest sequence a
request may reach), never per request. The pool of pages is donated and updated in place;
on a mesh its kv heads split over `tensor` where they divide.

Glossary: R rows, L tokens a row, P page-table width, S keys a row (P x page size), V vocab,
T seen tokens.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from zoo import sharding
from zoo.families import decoding
from zoo.infer import generate
from zoo.kernels import mask as mask_lib
from zoo.serve import sampling


@dataclasses.dataclass(frozen=True)
class Shapes:
  page_size: int
  num_pages: int
  max_pages: int  # a sequence's most pages (serve.max_len / page_size, rounded up)
  slot_count: int  # rows of per-sequence state pools (max_seqs + 1: slot 0 pads)
  kernel: str = 'xla'  # attention over the pages (zoo/kernels/paged.py)


def batch(shapes, ids_RL, valid_RL, positions_RL, table_RP, ends_R, slots_R):
  """The decoder's batch for one step: each row's keys are its pages' slots, the first
  ends_R of them (the cached tokens and the fed ones) real."""
  R, P = table_RP.shape
  S = P * shapes.page_size
  slots_S = jnp.arange(S, dtype=jnp.int32)
  return {'inputs': ids_RL, 'segment_ids': valid_RL, 'positions': positions_RL,
          'kv_segment_ids': (slots_S[None] < ends_R[:, None]).astype(jnp.int32),
          'kv_positions': jnp.broadcast_to(slots_S, (R, S)),
          'pages': mask_lib.Pages(table_RP, positions_RL, slots_R, shapes.page_size,
                                  shapes.num_pages, shapes.slot_count, shapes.kernel)}


def make(model, shapes):
  """-> (fn(variables, cache, feed) -> (next tokens [R], cache), the decoding model's
  variable layout fn). feed: ids, valid, positions [R, L]; table [R, P]; ends, last [R]
  (the index of each row's last fed token), slots [R]; sampling.FIELDS [R]; with penalties also seen
  [R, T] and outputs_from [R]."""
  model, layout = generate.decoding_model(model)

  def fn(variables, cache, feed):
    inputs = batch(shapes, feed['ids'], feed['valid'], feed['positions'], feed['table'],
                   feed['ends'], feed['slots'])
    logits_RLV, mutated = model.apply({**variables, 'cache': cache}, inputs, mutable=['cache'])
    logits_RV = jnp.take_along_axis(logits_RLV, feed['last'][:, None, None], axis=1)[:, 0]
    arrays = {f: feed[f] for f in sampling.FIELDS}
    if 'seen' in feed:
      logits_RV = sampling.penalize_rows(logits_RV.astype(jnp.float32), feed['seen'],
                                         feed['outputs_from'], arrays)
    return sampling.sample_rows(logits_RV, arrays), mutated['cache']
  return fn, model, layout


def empty_pool(model, shapes):
  """The pool of pages, zeros (every attention layer's keys and values)."""
  R, P = 1, shapes.max_pages
  inputs = batch(shapes, jnp.zeros((R, 1), jnp.int32), jnp.zeros((R, 1), jnp.int32),
                 jnp.zeros((R, 1), jnp.int32), jnp.zeros((R, P), jnp.int32),
                 jnp.zeros((R,), jnp.int32), jnp.zeros((R,), jnp.int32))
  return decoding.empty_cache(model, (inputs,))


def pool_shardings(pool, mesh, kv_heads):
  """The pools' shardings: the keys' and values' [..., N, page, 2G, K] with 2G split over
  `tensor` where G divides (a key head and its value head stay together); the rest
  (latents, recurrent state) replicated."""
  split = mesh.shape.get('tensor', 1)

  def spec(path, leaf):
    axes = [None] * leaf.ndim
    if split > 1 and kv_heads % split == 0 and path[-1].key == 'paged_kv':
      axes[-2] = 'tensor'
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*axes))
  return jax.tree_util.tree_map_with_path(spec, pool)


def compiled(place, fn, variable_shardings, pool_sharding):
  """fn jitted on the mesh, the pool donated."""
  replicated = sharding.replicated(place.mesh)
  return place.jit(fn, (variable_shardings, pool_sharding, replicated),
                   (replicated, pool_sharding), donate_argnums=(1,),
                   rules=generate.decode_rules(place.rules))


def widths(max_pages):
  """The page-table widths a step is compiled at: powers of two, then max_pages."""
  out, w = [], 4
  while w < max_pages:
    out.append(w)
    w *= 2
  return out + [max_pages]


def width_for(pages_needed, max_pages):
  return next(w for w in widths(max_pages) if w >= pages_needed)



def empty_feed(rows, length, width):
  """Host arrays for a step of `rows` x `length` tokens, every row padding."""
  tokens = lambda: np.zeros((rows, length), np.int32)
  return {'ids': tokens(), 'valid': tokens(), 'positions': tokens(),
          'table': np.zeros((rows, width), np.int32), 'ends': np.zeros(rows, np.int32),
          'last': np.zeros(rows, np.int32), 'slots': np.zeros(rows, np.int32)}
