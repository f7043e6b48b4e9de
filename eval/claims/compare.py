"""Claim-level checker vs span-level Detector on the same records, and each against gold labels.

Response level: the Detector flags a response when HaluGate finds any span (status ok); the claim checker flags
it when its factual_ratio is under the threshold (and, as a second reading, when any claim is `false`). Gold: a
response is hallucinated when it has at least one gold span (RAGTruth). Reported: agreement (raw and Cohen's
kappa, with the 2x2 table) and precision / recall / F1 / accuracy of each against gold, overall and per task
type. Responses the Detector could not check (unavailable, refused input) are left out of every comparison and
counted.
"""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from eval.halurate.detection import detect_items
from training.data.records import SpanRecord

from .checker import ClaimChecker


def stratified_sample(records: Sequence[SpanRecord], per_group: int | None, seed: int) -> list[SpanRecord]:
    """Up to `per_group` records of each task type (sorted by id first, so the sample depends only on the seed)."""
    if per_group is None:
        return list(records)
    groups: dict = defaultdict(list)
    for r in sorted(records, key=lambda r: r.id):
        groups[r.task_type].append(r)
    rng = random.Random(seed)
    out = []
    for g in sorted(groups, key=str):
        items = groups[g]
        out.extend(items if len(items) <= per_group else rng.sample(items, per_group))
    return out


def binary_metrics(y_true: Sequence[int], y_pred: Sequence[int]) -> dict:
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    if not y_true:
        return {"n": 0}
    p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, average="binary", zero_division=0)
    return {"n": len(y_true), "positives": int(sum(y_true)), "predicted_positive": int(sum(y_pred)),
            "precision": round(float(p), 4), "recall": round(float(r), 4), "f1": round(float(f), 4),
            "accuracy": round(float(accuracy_score(y_true, y_pred)), 4)}


def agreement(a: Sequence[int], b: Sequence[int]) -> dict:
    from sklearn.metrics import cohen_kappa_score

    if not a:
        return {"n": 0}
    both = sum(1 for x, y in zip(a, b) if x and y)
    neither = sum(1 for x, y in zip(a, b) if not x and not y)
    kappa = cohen_kappa_score(a, b) if len(set(a) | set(b)) > 1 else 1.0
    return {"n": len(a), "agreement": round((both + neither) / len(a), 4),
            "cohen_kappa": None if math.isnan(kappa) else round(float(kappa), 4),  # NaN: one side is constant
            "both_flag": both, "neither_flags": neither,
            "only_detector": sum(1 for x, y in zip(a, b) if x and not y),
            "only_claims": sum(1 for x, y in zip(a, b) if y and not x)}


def compare_rows(rows: Sequence[dict]) -> dict:
    """rows: {gold, detector, claims, claims_any_false, task_type} (0/1; detector None = not checked)."""
    usable = [r for r in rows if r["detector"] is not None]

    def block(rs):
        g = [r["gold"] for r in rs]
        d = [r["detector"] for r in rs]
        c = [r["claims"] for r in rs]
        f = [r["claims_any_false"] for r in rs]
        return {"n": len(rs), "detector_vs_gold": binary_metrics(g, d), "claims_vs_gold": binary_metrics(g, c),
                "claims_any_false_vs_gold": binary_metrics(g, f), "agreement": agreement(d, c)}

    out = {"responses": len(rows), "not_checked_by_detector": len(rows) - len(usable), "overall": block(usable),
           "by_task_type": {}}
    groups: dict = defaultdict(list)
    for r in usable:
        groups[r.get("task_type") or "(none)"].append(r)
    for k in sorted(groups):
        out["by_task_type"][k] = block(groups[k])
    return out


def run_comparison(records: Sequence[SpanRecord], gate, checker: ClaimChecker, *, batch_size: int = 16,
                   progress: bool = False) -> tuple[list[dict], dict]:
    """Detector and claim checker on the same span records (gold spans known). -> (rows, metrics)."""
    from tqdm.auto import tqdm

    rows = []
    bar = tqdm(total=len(records), disable=not progress, desc="compare", unit="response", dynamic_ncols=True)
    for start in range(0, len(records), batch_size):
        chunk = records[start:start + batch_size]
        items = [{"context": [r.context] if r.context else [], "question": r.question, "answer": r.answer}
                 for r in chunk]
        for rec, res in zip(chunk, detect_items(gate, items)):
            if isinstance(res, Exception) or res.status != "ok":
                det, det_status = None, (f"input_error: {res}" if isinstance(res, Exception) else
                                         f"{res.status}: {res.reason}")
                spans = []
            else:
                det, det_status, spans = int(bool(res.spans)), "ok", [s.to_dict() for s in res.spans]
            fc = checker.check(rec.answer, rec.context, rec.question)
            m = fc.metrics
            rows.append({"id": rec.id, "task_type": rec.task_type, "model": rec.meta.get("model"),
                         "gold": int(bool(rec.spans)), "gold_spans": rec.spans,
                         "detector": det, "detector_status": det_status, "detector_spans": spans,
                         "claims": int(not fc.passed), "claims_any_false": int(m["false_count"] > 0),
                         "factcheck": fc.to_dict()})
            bar.update(1)
    bar.close()
    metrics = compare_rows(rows)
    metrics["claims"] = checker.summary()
    return rows, metrics


def _row(name: str, m: dict) -> str:
    if not m.get("n"):
        return f"| {name} | 0 | | | | |"
    return (f"| {name} | {m['n']} | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | "
            f"{m['accuracy']:.3f} |")


def render_report(metrics: dict, meta: dict) -> str:
    L = ["# Claim-level checker vs span-level Detector", ""]
    for k in ("command", "data", "detector", "claims", "hardware", "seconds"):
        if meta.get(k):
            L.append(f"- **{k}**: {meta[k]}")
    L += ["", (f"{metrics['responses']} responses; {metrics['not_checked_by_detector']} not checked by the "
               "Detector (left out below)."), ""]
    sections = [("all", metrics["overall"])] + list(metrics["by_task_type"].items())
    for name, b in sections:
        a = b["agreement"]
        L += [f"## {name} ({b['n']} responses)", "",
              "| predictor (hallucinated = positive) | n | precision | recall | F1 | accuracy |",
              "|---|---:|---:|---:|---:|---:|",
              _row("Detector (any span)", b["detector_vs_gold"]),
              _row("claims (factual_ratio < threshold)", b["claims_vs_gold"]),
              _row("claims (any false claim)", b["claims_any_false_vs_gold"]), ""]
        if a.get("n"):
            kappa = "n/a" if a["cohen_kappa"] is None else format(a["cohen_kappa"], ".3f")
            L += [(f"Agreement Detector vs claims: {a['agreement']:.3f} (Cohen's kappa {kappa}); both flag "
                   f"{a['both_flag']}, neither {a['neither_flags']}, only the Detector {a['only_detector']}, only "
                   f"the claims {a['only_claims']}."), ""]
    c = metrics.get("claims", {})
    if c:
        L += ["## Claim checker", "", (f"{c.get('claims', 0)} claims from {c.get('responses', 0)} responses; "
                                       f"verdicts {c.get('verdicts', {})}; extraction "
                                       f"{c.get('extraction_methods', {})}."), ""]
    return "\n".join(L)


def write_outputs(out: Path, rows: Sequence[dict], metrics: dict, meta: dict) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "predictions.jsonl").open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    (out / "metrics.json").write_text(json.dumps({"meta": meta, **metrics}, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text(render_report(metrics, meta), encoding="utf-8")
    return {"predictions": out / "predictions.jsonl", "metrics": out / "metrics.json", "report": out / "report.md"}
