"""Detector metrics at three levels, each with precision / recall / F1 of the hallucinated class.

- example: a response is positive when it has any gold span; predicted positive when any span is predicted.
- span:    character overlap, as LettuceDetect's evaluator: summed over examples, overlap = sum over
           (predicted, gold) span pairs of their overlapping characters; precision = overlap / predicted
           characters, recall = overlap / gold characters.
- token:   answer tokens, gold label (char overlap with a gold span, inference.spans.token_labels) vs
           predicted label (P(hallucinated) >= threshold).

Each `Scored` item is one response: its task type, gold and predicted spans, gold and predicted token labels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Scored:
    task_type: str | None
    gold_spans: list[dict]
    pred_spans: list[dict]
    gold_tokens: list[int] = field(default_factory=list)
    pred_tokens: list[int] = field(default_factory=list)


def _prf(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def example_level(items: Sequence[Scored]) -> dict:
    from sklearn.metrics import precision_recall_fscore_support

    y_true = [int(bool(it.gold_spans)) for it in items]
    y_pred = [int(bool(it.pred_spans)) for it in items]
    if not items:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "n": 0, "gold_positive": 0, "pred_positive": 0}
    p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, labels=[1], average=None, zero_division=0)
    return {"precision": float(p[0]), "recall": float(r[0]), "f1": float(f[0]), "n": len(items),
            "gold_positive": int(sum(y_true)), "pred_positive": int(sum(y_pred))}


def span_chars(it: Scored) -> tuple[int, int, int]:
    """One response's (overlapping, predicted, gold) span characters: what span_level sums."""
    overlap = sum(max(0, min(ps["end"], gs["end"]) - max(ps["start"], gs["start"]))
                  for ps in it.pred_spans for gs in it.gold_spans)
    return (overlap, sum(s["end"] - s["start"] for s in it.pred_spans),
            sum(s["end"] - s["start"] for s in it.gold_spans))


def span_level(items: Sequence[Scored]) -> dict:
    overlap = predicted = gold = 0
    for it in items:
        o, p_chars, g_chars = span_chars(it)
        overlap, predicted, gold = overlap + o, predicted + p_chars, gold + g_chars
    p = overlap / predicted if predicted else 0.0
    r = overlap / gold if gold else 0.0
    return {"precision": p, "recall": r, "f1": _prf(p, r), "overlap_chars": overlap,
            "predicted_chars": predicted, "gold_chars": gold}


def token_level(items: Sequence[Scored]) -> dict:
    from sklearn.metrics import precision_recall_fscore_support

    y_true = np.concatenate([np.asarray(it.gold_tokens, dtype=int) for it in items]) if items else np.zeros(0)
    y_pred = np.concatenate([np.asarray(it.pred_tokens, dtype=int) for it in items]) if items else np.zeros(0)
    if len(y_true) == 0:
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0, "tokens": 0, "gold_positive": 0}
    p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, labels=[1], average=None, zero_division=0)
    return {"precision": float(p[0]), "recall": float(r[0]), "f1": float(f[0]), "tokens": len(y_true),
            "gold_positive": int(y_true.sum())}


LEVELS = {"example": example_level, "span": span_level, "token": token_level}


def detection_metrics(items: Sequence[Scored]) -> dict:
    """{level: {"overall": {...}, "by_task_type": {task: {...}}}} for the example, span and token levels."""
    groups: dict[str, list[Scored]] = defaultdict(list)
    for it in items:
        groups[it.task_type or "unknown"].append(it)
    return {level: {"overall": fn(items), "by_task_type": {t: fn(g) for t, g in sorted(groups.items())}}
            for level, fn in LEVELS.items()}
