"""zoo: encoder, decoder and encoder-decoder transformers in Flax, on a jax.sharding mesh.

Importing it changes nothing in jax: the platform workarounds (zoo/platform.py) are applied
by the command-line entry points.
"""
