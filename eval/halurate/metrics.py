"""Aggregates over a run's records (the entries of results.jsonl).

Denominators, so that nothing unknown is counted as clean:
- `checked`: answers the Detector ran on (status ok). hallucination_rate = hallucinated / checked.
- `scored`: checked + skipped (skipped = the Sentinel judged the prompt not fact-seeking, no context, empty
  answer, ...): hallucination_rate_scored treats skipped answers as not flagged, which is what a deployment sees.
- `unavailable` (a model failed to load or run), `input_error` (the input was refused, e.g. over the context
  limit), `generation_error` and `pending` are counted separately and are in neither denominator.
Span statistics: spans_per_response is over checked answers. NLI labels: contradiction (the context says
otherwise) vs neutral = fabrication (the context does not say it); entailment (kept with low confidence) and
unexplained (no Explainer ran) are reported too. Severity histogram over spans (1-4) and over answers (max
severity, 0 = no span).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from inference.aggregate import CHECKED, Tally, wilson_interval
from inference.aggregate import rate as _rate

from .runner import VERDICTS


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", (text or "").lower()))


def reference_match(answer: str | None, reference: str | None) -> bool | None:
    """A rough correctness signal: the known right answer appears (normalised) in the generated answer."""
    if answer is None or not reference or not _norm(reference):
        return None
    return f" {_norm(reference)} " in f" {_norm(answer)} "


def _group(entries: Sequence[dict]) -> dict:
    return Tally.of((e["verdict"], len((e.get("detection") or {}).get("spans") or [])) for e in entries).summary()


def compute_metrics(entries: Sequence[dict]) -> dict:
    verdicts = Counter(e["verdict"] for e in entries)
    unknown = set(verdicts) - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)} in the records")
    checked_entries = [e for e in entries if e["verdict"] in CHECKED]
    checked = len(checked_entries)
    hallucinated = verdicts["hallucinated"]
    scored = checked + verdicts["skipped"]
    spans = [s for e in checked_entries for s in e["detection"]["spans"]]
    labels = Counter(s["nli_label"] or "unexplained" for s in spans)
    contradiction, fabrication = labels["contradiction"], labels["neutral"]

    skip_reasons = Counter(e["detection"]["reason"] for e in entries if e["verdict"] == "skipped")
    # The Sentinel ran where it produced a confidence; it skipped where it said "not fact-seeking".
    asked = [e for e in entries if e.get("detection") and e["detection"].get("fact_check_confidence") is not None]
    sentinel_skips = sum(1 for e in asked if e["detection"]["fact_check_needed"] is False)

    answered = [e for e in entries if e.get("answer") is not None]
    out = {
        "n_records": len(entries),
        "answered": len(answered),
        "verdicts": {k: verdicts.get(k, 0) for k in VERDICTS},
        "checked": checked,
        "scored": scored,
        "hallucinated": hallucinated,
        "hallucination_rate": _rate(hallucinated, checked),
        "hallucination_rate_ci95": wilson_interval(hallucinated, checked),  # Wilson score interval
        "hallucination_rate_scored": _rate(hallucinated, scored),
        "unavailable": verdicts["unavailable"],
        "unavailable_rate": _rate(verdicts["unavailable"], len(answered)),
        "skip_reasons": dict(skip_reasons),
        "spans": len(spans),
        "spans_per_response": _rate(len(spans), checked),
        "spans_per_hallucinated_response": _rate(len(spans), hallucinated),
        "nli_labels": {k: labels.get(k, 0) for k in ("contradiction", "neutral", "entailment", "unexplained")},
        "contradiction_vs_fabrication": {
            "contradiction": contradiction, "fabrication": fabrication,
            "contradiction_share": _rate(contradiction, contradiction + fabrication),
            "ratio": round(contradiction / fabrication, 4) if fabrication else None,
        },
        "severity_histogram": {str(k): sum(1 for s in spans if s["severity"] == k) for k in (1, 2, 3, 4)},
        "max_severity_histogram": {str(k): sum(1 for e in checked_entries if e["detection"]["max_severity"] == k)
                                   for k in range(5)},
        "sentinel": {"asked": len(asked), "skipped": sentinel_skips, "skip_rate": _rate(sentinel_skips, len(asked))},
        "by_category": {str(k): _group(g) for k, g in sorted(_by(entries, "category").items())},
        "by_task_type": {str(k): _group(g) for k, g in sorted(_by(entries, "task_type").items())},
    }
    lat = [e["generation"]["latency_s"] for e in entries if (e.get("generation") or {}).get("latency_s") is not None
           and not e["generation"].get("error")]
    det_ms = [e["detection"]["timings_ms"]["total"] for e in entries if e.get("detection")]
    out["timing"] = {"generation_s_mean": round(sum(lat) / len(lat), 3) if lat else None,
                     "generation_s_total": round(sum(lat), 1) if lat else None,
                     "detection_batch_ms_mean": round(sum(det_ms) / len(det_ms), 1) if det_ms else None}
    ref = _reference_block(entries)
    if ref:
        out["reference_answer"] = ref
    gold = _gold_block(entries)
    if gold:
        out["gold"] = gold
    return out


def _by(entries: Sequence[dict], key: str) -> dict:
    groups: dict = defaultdict(list)
    for e in entries:
        groups[e.get(key) if e.get(key) is not None else "(none)"].append(e)
    return groups


def _reference_block(entries: Sequence[dict]) -> dict | None:
    """Flag rates of answers that contain the known right answer vs those that do not (a sanity check of the
    Detector on generated answers; containment is a rough proxy for correctness)."""
    rows = [(reference_match(e.get("answer"), e.get("reference_answer")), e["verdict"]) for e in entries
            if e.get("reference_answer")]
    rows = [(m, v) for m, v in rows if m is not None and v in CHECKED]
    if not rows:
        return None
    out = {}
    for name, want in (("contains_reference", True), ("lacks_reference", False)):
        group = [v for m, v in rows if m is want]
        flagged = sum(v == "hallucinated" for v in group)
        out[name] = {"checked": len(group), "hallucinated": flagged, "hallucination_rate": _rate(flagged, len(group))}
    return out


def _gold_block(entries: Sequence[dict]) -> dict | None:
    """Response level against gold spans (records that carry them): hallucinated = at least one span."""
    rows = [(int(bool(e["gold_spans"])), int(e["verdict"] == "hallucinated")) for e in entries
            if e.get("gold_spans") is not None and e["verdict"] in CHECKED]
    if not rows:
        return None
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    y_true, y_pred = [r[0] for r in rows], [r[1] for r in rows]
    p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, average="binary", zero_division=0)
    return {"n": len(rows), "gold_hallucinated": sum(y_true), "precision": round(float(p), 4),
            "recall": round(float(r), 4), "f1": round(float(f), 4),
            "accuracy": round(float(accuracy_score(y_true, y_pred)), 4)}
