"""How each model's input text is built: one definition shared by training, evaluation and inference.

The Detector's format (context / question / answer with token labels) lives in `inference.spans`.
"""

from __future__ import annotations

import re

_WS = re.compile(r"\s+")

# A prompt longer than the Sentinel reads keeps its beginning and its end. A pasted document usually sits between
# an instruction and the question ("<article> When was the company founded?"): cutting only the end would drop
# the words that decide the label and leave the model to guess from the document (docs/sentinel.md, "Long prompts").
SENTINEL_HEAD_SHARE = 0.25


def head_tail_split(n_tokens: int, budget: int, head_share: float = SENTINEL_HEAD_SHARE) -> tuple[int, int]:
    """(tokens kept from the start, tokens kept from the end) of a single text of `n_tokens` tokens (special
    tokens not counted) that must fit `budget`; (n_tokens, 0) when it fits."""
    if budget < 1:
        raise ValueError(f"budget must be >= 1 token, got {budget}")
    if not 0.0 <= head_share <= 1.0:
        raise ValueError(f"head_share must be in [0, 1], got {head_share}")
    if n_tokens <= budget:
        return n_tokens, 0
    head = int(budget * head_share)
    return head, budget - head


def head_tail(ids: list[int], budget: int, head_share: float = SENTINEL_HEAD_SHARE) -> list[int]:
    """`ids` cut to `budget` by head_tail_split: the first and the last tokens, the middle dropped."""
    head, tail = head_tail_split(len(ids), budget, head_share)
    return list(ids[:head]) + (list(ids[len(ids) - tail:]) if tail else [])


def sentinel_text(prompt: str) -> str:
    """The Sentinel reads the user's prompt alone, whitespace-normalised."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
    return _WS.sub(" ", prompt).strip()


def nli_pair(premise: str, hypothesis: str) -> tuple[str, str]:
    """The Explainer reads (premise, hypothesis) as a text pair: [CLS] premise [SEP] hypothesis [SEP]."""
    return _WS.sub(" ", premise).strip(), _WS.sub(" ", hypothesis).strip()
