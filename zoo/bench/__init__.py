"""`python -m zoo.bench`: train and decode throughput of a config, beside Hugging Face's
PyTorch model of the identical shape and weights when torch and transformers are installed.

  jax_side.py    the zoo's train step and KV-cache decoding, on random tokens; a matmul;
                 trainers' steps timed in turns (also for benchmarks/ that compare variants)
  torch_side.py  the same model exported to transformers (zoo.convert.hf), torch AdamW;
                 the same matmul in torch
  machine.py     what it ran on, in words (for CPUs: model, cores, vector extensions)
  __main__.py    runs both in alternating rounds and prints the table
"""
