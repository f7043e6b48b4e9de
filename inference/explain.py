"""Explainer side of the pipeline: what hypothesis a span becomes, how NLI verdicts over several premise windows
combine, and the severity rules.

Severity (hallucination_model.nli_entailment_threshold = 0.75, nli_model.threshold = 0.7 by default):
    contradiction -> 4            the context says otherwise
    neutral       -> 2            fabrication: the context does not say it
    entailment    -> dropped when confidence >= nli_entailment_threshold (and enable_nli_filtering), else 1
    NLI confidence under nli_model.threshold lowers the severity by one (never below 1: a kept span is a finding)
    no NLI (use_nli false, or no Explainer configured) -> 2, nli_label null
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

SEVERITY = {"contradiction": 4, "neutral": 2, "entailment": 1}
UNEXPLAINED_SEVERITY = 2
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
_CLAUSE_BREAK = re.compile(r";|:\s|,\s+(?=(?:but|while|whereas|although|though|however|yet)\b)", re.IGNORECASE)


def _sentence_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """[s, e) of the sentence(s) containing text[start:end]."""
    s = 0
    for m in _SENTENCE_END.finditer(text, 0, max(start, 0)):
        if m.end() <= start:
            s = m.end()
    m = _SENTENCE_END.search(text, max(end - 1, start))
    e = m.end() if m else len(text)
    e = max(e, end)
    return s, e


def widen(text: str, start: int, end: int, mode: str = "sentence") -> tuple[int, int]:
    """The hypothesis range for a span: the span itself, its clause, or its sentence (whitespace trimmed)."""
    if mode == "span":
        s, e = start, end
    else:
        s, e = _sentence_bounds(text, start, end)
        if mode == "clause":
            cs, ce = s, e
            for m in _CLAUSE_BREAK.finditer(text, s, e):
                if m.end() <= start:
                    cs = m.end()
                elif m.start() >= end:
                    ce = m.start()
                    break
            # A clause of one or two words is no statement; keep the sentence then.
            if len(text[cs:ce].split()) >= 3:
                s, e = cs, ce
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def combine_nli(probs: Sequence[np.ndarray], labels: Sequence[str]) -> tuple[str, float]:
    """One verdict from the NLI probabilities of several premise windows.

    Entailed by any window -> entailment (the most confident window); else contradicted by any window ->
    contradiction (most confident); else neutral, with the lowest neutral probability across windows (the
    claim must be unsupported by every window).
    """
    index = {name.lower(): i for i, name in enumerate(labels)}
    e, n, c = index["entailment"], index["neutral"], index["contradiction"]
    stacked = np.stack([np.asarray(p, dtype=float) for p in probs])
    winners = stacked.argmax(axis=1)
    if (winners == e).any():
        return "entailment", float(stacked[:, e].max())
    if (winners == c).any():
        return "contradiction", float(stacked[:, c].max())
    return "neutral", float(stacked[:, n].min())


def severity(label: str | None, confidence: float | None, *, entailment_threshold: float,
             low_confidence: float, filter_entailed: bool = True) -> int | None:
    """Severity 1-4, or None when the span is dropped (entailed with enough confidence)."""
    if label is None or confidence is None:
        return UNEXPLAINED_SEVERITY
    if label == "entailment" and filter_entailed and confidence >= entailment_threshold:
        return None
    level = SEVERITY[label]
    if confidence < low_confidence:
        level -= 1
    return max(level, 1)


def explanation(label: str | None, confidence: float | None, detector_confidence: float, hypothesis: str,
                reason: str = "") -> str:
    if label == "contradiction":
        return f"Contradicted by the context (NLI contradiction {confidence:.2f}): \"{hypothesis}\""
    if label == "neutral":
        return (f"Not supported by the context, which neither states nor implies it: possible fabrication "
                f"(NLI neutral {confidence:.2f}): \"{hypothesis}\"")
    if label == "entailment":
        return (f"Flagged by the Detector ({detector_confidence:.2f}) but the context seems to support it "
                f"(NLI entailment {confidence:.2f}, under the drop threshold): \"{hypothesis}\"")
    return f"Flagged by the Detector ({detector_confidence:.2f}); not explained ({reason or 'NLI off'})"
