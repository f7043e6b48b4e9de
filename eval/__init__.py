"""Benchmarks of the trained models and the `gemhall` abstention harness (needs the `eval` extra)."""
