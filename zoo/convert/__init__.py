"""Checkpoint converters: hf.py imports and exports Hugging Face checkpoints."""
