"""Behaviour checks: does coverage fall as t rises, and is the model right >= t of the time it answers?"""

from __future__ import annotations

from itertools import pairwise

from scipy.stats import binomtest

CONFIDENCE = 0.95


def coverage_monotonicity(metrics: dict[str, dict]) -> dict:
    """A violation is any rise in coverage from one threshold to the next higher one."""
    points = [m for m in metrics.values() if m["coverage"] is not None]
    points.sort(key=lambda m: m["t"])
    violations = [
        {"from_t": a["t"], "to_t": b["t"], "coverage_from": a["coverage"], "coverage_to": b["coverage"],
         "increase": b["coverage"] - a["coverage"]}
        for a, b in pairwise(points) if b["coverage"] > a["coverage"]
    ]
    return {"ok": not violations, "violations": violations}


def accuracy_interval(correct: int, answered: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Clopper-Pearson (exact binomial) interval for the conditional accuracy."""
    ci = binomtest(correct, answered).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def calibration(metrics: dict[str, dict], confidence: float = CONFIDENCE) -> dict:
    """Thresholds where conditional accuracy falls below t: by point estimate, and significantly
    (the whole confidence interval below t). Too few answers give a wide interval, hence both."""
    rows = []
    for m in sorted(metrics.values(), key=lambda m: m["t"]):
        acc: float | None = m["accuracy_conditioned_on_answering"]
        if not m["answered"]:
            rows.append({"t": m["t"], "answered": 0, "correct": 0, "accuracy": None, "ci_low": None,
                         "ci_high": None, "below_threshold": False, "significantly_below": False})
            continue
        low, high = accuracy_interval(m["correct"], m["answered"], confidence)
        rows.append({"t": m["t"], "answered": m["answered"], "correct": m["correct"], "accuracy": acc,
                     "ci_low": low, "ci_high": high, "below_threshold": acc < m["t"],
                     "significantly_below": high < m["t"]})
    return {
        "confidence": confidence,
        "method": "clopper-pearson",
        "per_threshold": rows,
        "below_threshold": [r["t"] for r in rows if r["below_threshold"]],
        "significantly_below": [r["t"] for r in rows if r["significantly_below"]],
    }


def behavior_checks(metrics: dict[str, dict]) -> dict:
    return {"coverage_monotonicity": coverage_monotonicity(metrics), "calibration": calibration(metrics)}
