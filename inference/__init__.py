"""halugate inference runtime: numpy + tokenizers + onnxruntime; no torch at import time."""

__version__ = "0.1.0"
