"""zoo: encoder, decoder and encoder-decoder transformers in Flax, on a jax.sharding mesh.

Importing it changes one thing in jax, and only where no TPU chip is attached: libtpu's TPU
backend gives up quietly instead of printing errors (zoo/platform.py skip_absent_tpu), so a
Python session is as quiet as the CLI. The other platform workarounds are applied by the
command-line entry points (zoo.platform.apply()).
"""

from zoo import platform as _platform

_platform.skip_absent_tpu()
