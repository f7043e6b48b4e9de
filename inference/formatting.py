"""How each model's input text is built: one definition shared by training, evaluation and inference.

The Detector's format (context / question / answer with token labels) lives in `inference.spans`.
"""

from __future__ import annotations

import re

_WS = re.compile(r"\s+")


def sentinel_text(prompt: str) -> str:
    """The Sentinel reads the user's prompt alone, whitespace-normalised."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
    return _WS.sub(" ", prompt).strip()


def nli_pair(premise: str, hypothesis: str) -> tuple[str, str]:
    """The Explainer reads (premise, hypothesis) as a text pair: [CLS] premise [SEP] hypothesis [SEP]."""
    return _WS.sub(" ", premise).strip(), _WS.sub(" ", hypothesis).strip()
