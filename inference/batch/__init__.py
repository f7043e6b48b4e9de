"""Streaming, resumable batch detection over whole datasets, with a report (`python -m inference.batch`).

Optional dependencies: pyarrow, tqdm, matplotlib and scipy (`pip install 'halugate[batch]'`); Ray Data for
`--engine ray` (`pip install 'halugate[cluster]'`). Guide: docs/batch.md.
"""
