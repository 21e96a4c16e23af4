"""zoo: encoder, decoder and encoder-decoder transformers in Flax, trained on a jax.sharding mesh."""
