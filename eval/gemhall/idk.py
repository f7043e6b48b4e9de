"""Is an output an abstention? Empty output, or an answer that opens with an IDK phrase.

Matched case-insensitively at the start of the answer (after quotes, markdown and a leading "I'm"/"I"):
idk, i don't know, i do not know, unknown, cannot answer, can't answer, not sure. An answer that commits
first and hedges later ("B, but I'm not sure") is an answer, not an abstention.
"""

from __future__ import annotations

import re

IDK_PHRASES = ("idk", "i don't know", "i do not know", "unknown", "cannot answer", "can't answer", "not sure")

_IDK_RE = re.compile(
    r"^(?:i\s*(?:'m|am)\s+|i\s+)?"
    r"(?:idk|i\s+don'?t\s+know|don'?t\s+know|i\s+do\s+not\s+know|do\s+not\s+know|unknown"
    r"|cannot\s+answer|can\s*not\s+answer|can'?t\s+answer|not\s+sure)"
    r"(?![a-z0-9])"
)
_LEAD = re.compile(r"^[\s\"'`*_#>\-\[\(]+")


def normalize_for_idk(text: str) -> str:
    text = (text or "").replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    text = text.strip().lower()
    text = re.sub(r"^(?:final\s+)?answer\s*:\s*", "", _LEAD.sub("", text))
    return _LEAD.sub("", text)


def is_idk(text: str | None) -> bool:
    norm = normalize_for_idk(text or "")
    return norm == "" or bool(_IDK_RE.match(norm))
