import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from zoo import families
from zoo.families import loss as loss_lib


def _token_loss(logits, targets, weights, z_loss):
  config = helpers.tiny_config()
  config.train.z_loss = z_loss
  return loss_lib.token_loss(logits, targets, weights, config, None, np.sum(weights))


def test_cross_entropy_matches_float64_reference():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 5)).astype(np.float32) * 3
  targets = rng.integers(0, 5, (2, 3))
  weights = np.array([[1, 1, 0], [1, 0, 1]], np.float32)
  nll, z, weight = loss_lib.cross_entropy(logits, targets, weights, z_loss=1e-2)
  l64 = logits.astype(np.float64)
  log_z = np.log(np.exp(l64).sum(-1))
  want = log_z - np.take_along_axis(l64, targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(nll, np.sum(want * weights), rtol=1e-5)
  np.testing.assert_allclose(z, np.sum(1e-2 * log_z ** 2 * weights), rtol=1e-5)
  assert weight == 4


def test_token_loss_is_the_weighted_mean_and_logs_z_loss_only_when_it_counts():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
  targets = rng.integers(0, 5, (2, 3))
  weights = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
  plain = _token_loss(logits, targets, weights, 0.0)
  l64 = logits.astype(np.float64)
  log_z = np.log(np.exp(l64).sum(-1))
  nll = log_z - np.take_along_axis(l64, targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(plain.total, np.sum(nll * weights) / 3, rtol=1e-5)
  assert set(plain.metrics) == {'loss'} and plain.state == {}
  with_z = _token_loss(logits, targets, weights, 0.1)
  np.testing.assert_allclose(with_z.metrics['z_loss'], np.sum(0.1 * log_z ** 2 * weights) / 3,
                             rtol=1e-5)
  np.testing.assert_allclose(with_z.total, plain.total + with_z.metrics['z_loss'], rtol=1e-5)
  assert float(_token_loss(logits, targets, 0 * weights, 0.0).total) == 0.0


def _loss_and_grads(config, params, batch):
  loss_fn = families.loss_fn(families.build(config.model), config)
  return jax.jit(jax.value_and_grad(lambda p: loss_fn({'params': p}, batch).total))(params)


# untied head (llama), tied + scaled (palm, t5 v1.0), BERT's tied head with its bias
@pytest.mark.parametrize('name', ['llama3_8b', 'palm_8b', 'bert_base', 't5_base'])
def test_the_chunked_loss_equals_the_plain_loss_and_its_gradients(name):
  short = ('train.z_loss=1e-3', 'data.seq_len=24', 'data.target_seq_len=24')
  plain = helpers.smoke(name, 'train.loss_chunk_len=0', *short)
  chunked = helpers.smoke(name, 'train.loss_chunk_len=8', *short)
  assert loss_lib.chunk_len(chunked, 24) == 8 and loss_lib.chunk_len(plain, 24) == 0
  batch = helpers.family_batch(plain, 4)
  params = nn.unbox(jax.jit(families.build(plain.model).init)(jax.random.PRNGKey(0), batch))['params']
  (want, want_grads), (got, got_grads) = (_loss_and_grads(c, params, batch)
                                          for c in (plain, chunked))
  np.testing.assert_allclose(got, want, rtol=1e-6)
  # rounding scales with the largest gradient: a leaf whose gradient is zero (a key bias,
  # under softmax's shift invariance) holds only rounding, in either loss
  scale = max(np.abs(w).max() for w in jax.tree.leaves(want_grads))
  for (path, g), w in zip(jax.tree_util.tree_flatten_with_path(got_grads)[0],
                          jax.tree.leaves(want_grads)):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6 * scale,
                               err_msg=jax.tree_util.keystr(path))


def test_auto_chunks_large_vocabularies_by_divisors_of_the_length():
  config = helpers.smoke('llama3_8b')  # loss_chunk_len=-1 (auto)
  assert loss_lib.chunk_len(config, 4096) == 0  # the smoke vocab (512) is small
  with config.unlocked():
    config.model.vocab_size = 128_256
  assert [loss_lib.chunk_len(config, n) for n in (4096, 2048, 114, 600)] == [512, 512, 0, 300]


def test_the_chunked_loss_never_holds_the_whole_logits():
  """Compiled temporaries of loss + gradients: the plain loss holds [B, L, V] float32 logits
  (and their gradient); the chunked one a chunk's."""
  B, L, V = 2, 256, 32768
  logits_bytes = B * L * V * 4
  temps = {}
  for chunk in (0, 32):
    config = helpers.tiny_config(vocab_size=V, max_length=L)
    config.data.seq_len, config.train.loss_chunk_len = L, chunk
    model = families.build(config.model)
    params = jax.eval_shape(lambda: nn.unbox(model.init(jax.random.PRNGKey(0), {
        'inputs': jnp.zeros((1, L), jnp.int32)}))['params'])
    batch = jax.eval_shape(lambda: {k: jnp.zeros(shape, dtype) for k, (shape, dtype) in
                                    families.batch_spec(config, B).items()})
    loss_fn = families.loss_fn(model, config)
    compiled = jax.jit(jax.grad(lambda p, b: loss_fn({'params': p}, b).total)).lower(
        params, batch).compile()
    temps[chunk] = compiled.memory_analysis().temp_size_in_bytes
  assert temps[0] >= logits_bytes, temps
  assert temps[32] < temps[0] / 4, temps  # a chunk is 1/8 of the logits
