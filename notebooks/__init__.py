"""The zoo's notebooks, and `execute.py`, which runs them and saves them with their outputs."""
