"""gemhall: abstention-aware benchmark harness (confidence targets and IDK, after Kalai et al. 2025).

Each item is asked once per confidence target t with the scoring rule in the prompt (+1 correct,
-t/(1-t) wrong, 0 for IDK); the harness reports coverage and conditional accuracy per t and checks
that the model abstains more as t rises and is right at least a fraction t of the time it answers.
"""

from .data import DataError, Item, load_items_csv
from .idk import is_idk
from .judges import extract_letter, normalize_answer
from .metrics import compute_metrics
from .prompt import build_prompt, format_penalty

__all__ = [
    "DataError", "Item", "build_prompt", "compute_metrics", "extract_letter", "format_penalty", "is_idk",
    "load_items_csv", "normalize_answer",
]
