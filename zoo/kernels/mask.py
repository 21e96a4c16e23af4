"""Attention masks: boolean builders (True = may attend) and `Mask`, the description every
kernel understands: segment ids of queries and keys (0 = padding; packed documents never
see each other), causal or not, and a sliding window. The XLA kernel takes `Mask.dense()`;
splash and cuDNN build their own block-sparse or fused form from the same fields.

Glossary: B batch, L query length, S key length.
"""

import flax.struct
import jax
import jax.numpy as jnp


def causal_mask(length, kv_length=None, q_start=0):
  """[1, 1, L, S]: query i (at key slot q_start + i) attends keys j <= q_start + i; S = L
  unless given (decoding against a cache)."""
  q_slot_L1 = (q_start + jnp.arange(length))[:, None]
  return (jnp.arange(kv_length or length)[None, :] <= q_slot_L1)[None, None]


def padding_mask(q_valid_BL, kv_valid_BS):
  """[B, 1, L, S]: both the query and the key are real tokens."""
  return (q_valid_BL[:, :, None] & kv_valid_BS[:, None, :])[:, None]


def segment_mask(q_segment_ids_BL, kv_segment_ids_BS):
  """[B, 1, L, S]: query and key share a segment; segment 0 (padding) is never attended."""
  same_BLS = q_segment_ids_BL[:, :, None] == kv_segment_ids_BS[:, None, :]
  return (same_BLS & (kv_segment_ids_BS[:, None, :] > 0))[:, None]


def sliding_window_mask(length, window, kv_length=None, q_start=0):
  """[1, 1, L, S]: query i (at key slot q_start + i) attends keys j > q_start + i - window
  (combine with causal)."""
  q_slot_L1 = (q_start + jnp.arange(length))[:, None]
  return (jnp.arange(kv_length or length)[None, :] > q_slot_L1 - window)[None, None]


def block_mask(q_block_ids_BL, kv_block_ids_BS):
  """[B, 1, L, S]: query and key lie in one block (an image's tokens: ids > 0; 0 = none)."""
  same_BLS = q_block_ids_BL[:, :, None] == kv_block_ids_BS[:, None, :]
  return (same_BLS & (q_block_ids_BL[:, :, None] > 0))[:, None]


def contiguous_blocks(member_BL):
  """[B, L] bool -> block ids [B, L]: each run of members 1, 2, ... in its row, 0 elsewhere
  (an image's tokens, laid out together)."""
  before_BL = jnp.pad(member_BL, ((0, 0), (1, 0)))[:, :-1]
  starts_BL = (member_BL & ~before_BL).astype(jnp.int32)
  return jnp.where(member_BL, jnp.cumsum(starts_BL, axis=1), 0)


CHUNKS_PER_SEGMENT = 1 << 16  # chunk indices a segment id is refined into


def chunk_segments(segment_ids_BL, positions_BL, chunk):
  """Segment ids refined by chunk: two tokens share one iff they share a segment and their
  positions (in their document) lie in the same chunk of `chunk`; padding stays 0. With a
  causal window of `chunk` this is Llama 4's chunked attention, per document."""
  chunk_BL = positions_BL.astype(jnp.int32) // chunk
  return jnp.where(segment_ids_BL > 0,
                   segment_ids_BL.astype(jnp.int32) * CHUNKS_PER_SEGMENT + chunk_BL + 1, 0)


def two_sided_window_mask(length, window, kv_length=None):
  """[1, 1, L, S]: query i attends keys j with |i - j| <= window (a bidirectional stack's
  window, T5Gemma's encoder: 2 window + 1 keys)."""
  distance_LS = jnp.arange(length)[:, None] - jnp.arange(kv_length or length)[None, :]
  return (jnp.abs(distance_LS) <= window)[None, None]


@flax.struct.dataclass
class Pages:
  """A paged cache's view for one step of the serving engine (zoo/serve): each row's
  sequence keeps its keys and values in pages of `size` tokens, drawn from a pool of
  `count` pages shared by every row; page 0 is never a sequence's (padding writes there).
  The keys a row attends are its pages in table order, S = table width x size slots, slot
  s holding position s of the sequence. A row's real tokens come first, its padding after."""
  table: jax.Array  # [B, P] int32: each row's pages in order (0 past its last)
  positions: jax.Array  # [B, L] int32: each query's position in its sequence
  # [B] int32: each row's sequence's slot in the pools of per-sequence state (Gated DeltaNet
  # layers: zoo/models/delta_net.py); slot 0 is padding rows'
  slots: jax.Array | None = None
  size: int = flax.struct.field(pytree_node=False, default=16)
  count: int = flax.struct.field(pytree_node=False, default=0)
  slot_count: int = flax.struct.field(pytree_node=False, default=1)
  kernel: str = flax.struct.field(pytree_node=False, default='xla')  # zoo/kernels/paged.py


@flax.struct.dataclass
class Mask:
  """Which keys each query may attend: same segment (and not padding), at or before it when
  `causal`, and, when window > 0, within the window: a causal mask's last `window` keys
  (the query's own included; Mistral, Gemma), a bidirectional one's keys at most `window`
  away on either side (|q - k| <= window, T5Gemma's encoder). The window's sides follow
  `causal`, so a causal stack cannot be given a two-sided window. With block ids, a causal
  query also attends the later keys of its own block (inside the window, Gemma 3's images).

  Query i sits at key slot q_start + i (0 when queries and keys are the same tokens; the
  cache index when decoding). `kv_cache`: the keys are the self-attention layer's cache of
  S slots, which the queries' keys and values are first written into (zoo/infer); only
  the xla kernel takes such a mask."""
  q_segment_ids: jax.Array  # [B, L] int, 0 = padding
  kv_segment_ids: jax.Array  # [B, S]
  causal: bool = flax.struct.field(pytree_node=False, default=False)
  window: int = flax.struct.field(pytree_node=False, default=0)
  q_start: jax.Array | int = 0  # int32 scalar
  kv_cache: bool = flax.struct.field(pytree_node=False, default=False)
  # decoding: a local layer's cache ring keeps this many slots beyond the window, so that
  # speculative decoding can take back the keys of rejected tokens (zoo/infer/speculative.py)
  lookahead: int = flax.struct.field(pytree_node=False, default=0)
  # [B, L] int: each token's place in the sequence when the tokens are laid out in another
  # order (self-attention only; ring attention's balanced layout); None = in order
  slots: jax.Array | None = None
  # Llama 4's chunked layers (model.attention.chunk): the chunk and the queries' and keys'
  # segment ids refined by it (chunk_segments), which `chunked` swaps in
  chunk: int = flax.struct.field(pytree_node=False, default=0)
  q_chunk_ids: jax.Array | None = None
  kv_chunk_ids: jax.Array | None = None
  # serving: the self-attention layer's cache is a paged pool (kv_cache is then True too)
  pages: Pages | None = None
  # [B, L], [B, S] int: blocks whose tokens attend each other both ways in a causal stack
  # (a Gemma 3 image's tokens; 0 = no block); the xla kernel's alone
  q_block_ids: jax.Array | None = None
  kv_block_ids: jax.Array | None = None

  def chunked(self):
    """The mask of a chunked layer: a causal window of the chunk (the keys a chunk can
    hold: what splash, cuDNN and the rolling cache skip by) over the chunk-refined segment
    ids (which cut each document's chunks exactly)."""
    return self.replace(window=self.chunk, q_segment_ids=self.q_chunk_ids,
                        kv_segment_ids=self.kv_chunk_ids, chunk=0, q_chunk_ids=None,
                        kv_chunk_ids=None)

  def dense(self):
    """[B, 1, L, S] boolean."""
    mask = segment_mask(self.q_segment_ids, self.kv_segment_ids)
    if self.pages is not None:  # query at its position, key slot s at position s
      q_slots_BL1 = self.pages.positions[:, :, None]
      kv_slots_11S = jnp.arange(self.kv_segment_ids.shape[1])[None, None, :]
      if self.causal:
        mask &= (kv_slots_11S <= q_slots_BL1)[:, None]
      if self.window:
        mask &= (kv_slots_11S > q_slots_BL1 - self.window)[:, None]
      return mask
    if self.slots is not None:
      before_BLS = self.slots[:, None, :] <= self.slots[:, :, None]
      if self.causal:
        mask &= before_BLS[:, None]
      distance_BLS = self.slots[:, :, None] - self.slots[:, None, :]
      if self.window:
        mask &= (distance_BLS < self.window if self.causal else
                 jnp.abs(distance_BLS) <= self.window)[:, None]
      return mask
    lengths = dict(length=self.q_segment_ids.shape[1], kv_length=self.kv_segment_ids.shape[1],
                   q_start=self.q_start)
    if self.causal and self.q_block_ids is not None:  # earlier keys, or the query's block
      mask &= causal_mask(**lengths) | block_mask(self.q_block_ids, self.kv_block_ids)
    elif self.causal:
      mask &= causal_mask(**lengths)
    if self.window and self.causal:
      mask &= sliding_window_mask(window=self.window, **lengths)
    elif self.window:
      mask &= two_sided_window_mask(self.q_segment_ids.shape[1], self.window,
                                    self.kv_segment_ids.shape[1])
    return mask
