"""Classification metrics shared by training (model selection) and evaluation (reports); scikit-learn based."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int], labels: list[str],
                           groups: Sequence[str] | None = None) -> dict:
    """accuracy, macro-F1, per-class precision/recall/F1/support, confusion matrix, optional per-group accuracy."""
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    ids = list(range(len(labels)))
    p, r, f, s = precision_recall_fscore_support(y_true, y_pred, labels=ids, zero_division=0)
    out = {
        "n": len(y_true),
        "accuracy": float(accuracy_score(y_true, y_pred)) if len(y_true) else 0.0,
        "macro_f1": float(f1_score(y_true, y_pred, labels=ids, average="macro", zero_division=0)),
        "per_class": {
            name: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(s[i])}
            for i, name in enumerate(labels)
        },
        "confusion_matrix": {
            "labels": labels,
            "matrix": confusion_matrix(y_true, y_pred, labels=ids).tolist(),  # rows: gold, columns: predicted
        },
    }
    if groups is not None:
        hits: dict[str, list[int]] = defaultdict(list)
        for g, t, pr in zip(groups, y_true, y_pred):
            hits[g].append(int(t == pr))
        out["per_source_accuracy"] = {g: {"accuracy": float(np.mean(h)), "n": len(h)} for g, h in sorted(hits.items())}
    return out

