"""Inference: generation with a KV cache (generate.py)."""
