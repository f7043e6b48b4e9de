"""Per-threshold metrics over result rows. Error rows are counted but excluded from every rate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def score(correct: bool, abstained: bool, t: float) -> float:
    """+1 correct, -t/(1-t) wrong, 0 for IDK."""
    if abstained:
        return 0.0
    return 1.0 if correct else -t / (1.0 - t)


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def metrics_for(rows: Sequence[dict], t: float) -> dict:
    errors = [r for r in rows if r.get("error")]
    scored = [r for r in rows if not r.get("error")]
    answered = [r for r in scored if not r["abstained"]]
    correct = sum(1 for r in answered if r["correct"])
    unanswerable = [r for r in scored if r["unknown_ok"]]
    answerable = [r for r in scored if not r["unknown_ok"]]
    return {
        "t": t,
        "penalty": t / (1.0 - t),
        "n": len(scored),
        "answered": len(answered),
        "abstentions": len(scored) - len(answered),
        "errors": len(errors),
        "correct": correct,
        "wrong": len(answered) - correct,
        "coverage": _ratio(len(answered), len(scored)),
        "accuracy_conditioned_on_answering": _ratio(correct, len(answered)),
        "hallucination_rate_among_answers": _ratio(len(answered) - correct, len(answered)),
        "avg_expected_score": (sum(r["score"] for r in scored) / len(scored)) if scored else None,
        # Where the abstentions went: a calibrated model abstains on the unanswerable items first.
        "n_answerable": len(answerable),
        "n_unanswerable": len(unanswerable),
        "abstention_rate_answerable": _ratio(sum(1 for r in answerable if r["abstained"]), len(answerable)),
        "abstention_rate_unanswerable": _ratio(sum(1 for r in unanswerable if r["abstained"]), len(unanswerable)),
    }


def compute_metrics(rows: Iterable[dict], thresholds: Sequence[float]) -> dict[str, dict]:
    """{"0.5": {...}, "0.75": {...}} in threshold order; keys are the thresholds as written (format 'g')."""
    by_t: dict[float, list[dict]] = {float(t): [] for t in thresholds}
    for row in rows:
        if float(row["t"]) in by_t:
            by_t[float(row["t"])].append(row)
    return {format(t, "g"): metrics_for(by_t[t], t) for t in sorted(by_t)}
