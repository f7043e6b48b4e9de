"""Score span records with the runtime's Detector stage, fit the calibration, and compute the metrics.

Predictions always come from `inference.detect.HaluGate` (same windows, aggregation, label lookup, combiner,
threshold and span building as in production) on the torch runner (a run dir) or the ONNX runner (an export
dir). Used by training.detector (calibration split, held-out split) and eval.detector (evaluation, CV).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inference.detector_stage import (
    ALL_FEATURES,
    DEFAULT_COMBINER_FEATURES,
    Calibration,
    Combiner,
    DetectorScores,
    design_matrix,
)
from inference.spans import token_labels
from training.span_metrics import Scored, detection_metrics, example_level, span_level

log = logging.getLogger("halugate.training.detector")

# finer at the low end: the combiner's probabilities are calibrated to a ~6% positive rate
THRESHOLDS = [round(float(t), 2) for t in (*np.arange(0.02, 0.1, 0.01), *np.arange(0.1, 1.0, 0.05))]


@dataclass
class Prediction:
    """One record's runtime output (None fields when the record could not be scored)."""

    scores: DetectorScores | None
    spans: list[dict]
    error: str = ""


def runtime_gate(model_dir: str | Path, backend: str = "torch", precision: str = "fp32", overrides=None,
                 calibration: Calibration | None = None, num_threads: int = 0):
    """A HaluGate with only the Detector loaded (no Sentinel: every record is verified; no Explainer)."""
    from inference.config import apply_overrides, from_dict, to_dict
    from inference.detect import HaluGate
    from inference.settings import InferenceSettings

    data = to_dict(InferenceSettings())
    m = data["hallucination_mitigation"]
    m.update(backend=backend, precision=precision, num_threads=num_threads)
    m["hallucination_model"]["model_id"] = str(model_dir)
    m["hallucination_model"]["batch_size"] = 16
    m["fact_check_model"]["model_id"] = ""
    m["nli_model"]["model_id"] = ""
    apply_overrides(data, overrides)
    gate = HaluGate(from_dict(InferenceSettings, data, "<runtime_gate>"))
    if "detector" in gate.load_errors:
        raise RuntimeError(f"Detector {model_dir}: {gate.load_errors['detector']}")
    if calibration is not None:
        gate.detector_calibration = calibration
    return gate


def _input(rec: dict) -> dict:
    return {"context": rec["context"], "question": rec.get("question"), "answer": rec["answer"],
            "task_type": rec.get("task_type")}


def predict(gate, records: list[dict], batch: int = 64, progress: bool = False) -> list[Prediction]:
    """Runtime predictions per record; records the runtime refuses (too long) are kept with the reason."""
    from tqdm.auto import tqdm

    from inference.detector_stage import scores_to_spans
    from inference.windowing import InputTooLongError

    hm = gate.settings.hallucination_mitigation.hallucination_model
    out: list[Prediction | None] = [None] * len(records)
    ready = []
    for i, rec in enumerate(records):
        try:
            name = f"record {rec['id']}"
            ready.append((i, gate.prepare([_input(rec)], where=lambda _, name=name: name)[0]))
        except InputTooLongError as exc:
            out[i] = Prediction(None, [], str(exc))
    ready.sort(key=lambda x: sum(len(w) for w in x[1].windows))  # similar lengths batch together
    for b in tqdm(range(0, len(ready), batch), desc="detector", disable=not progress, leave=False):
        chunk = ready[b:b + batch]
        scores = gate.score_tokens([it for _, it in chunk])
        for (i, it), sc in zip(chunk, scores):
            out[i] = Prediction(sc, scores_to_spans(it.data.answer, sc, hm, gate.detector_calibration))
    return out  # type: ignore[return-value]


def scored_items(records: list[dict], preds: list[Prediction], threshold: float | None = None,
                 settings=None, calibration=None) -> list[Scored]:
    """Scored items for the metrics; with `threshold`, spans are rebuilt at that threshold (sweeps)."""
    from inference.detector_stage import scores_to_spans

    items = []
    for rec, p in zip(records, preds):
        if p.scores is None:
            continue
        spans = p.spans if threshold is None else scores_to_spans(rec["answer"], p.scores, settings, calibration,
                                                                  threshold=threshold)
        t = threshold if threshold is not None else None
        pred_tokens = [int(x >= (t if t is not None else _threshold_of(settings, calibration)))
                       for x in p.scores.probs]
        items.append(Scored(rec.get("task_type"), rec["spans"], spans,
                            token_labels(rec["answer"], p.scores.answer_offsets, rec["spans"]), pred_tokens))
    return items


def _threshold_of(settings, calibration) -> float:
    from inference.detector_stage import effective

    return effective(settings, calibration)[0]


def per_task_auroc(records: list[dict], preds: list[Prediction]) -> dict:
    """Example-level AUROC of the per-answer score, overall and within each task type (None: one class only)."""
    from sklearn.metrics import roc_auc_score

    groups: dict[str, tuple[list, list]] = {}
    for rec, p in zip(records, preds):
        if p.scores is None:
            continue
        for key in ("overall", rec.get("task_type") or "unknown"):
            y, s = groups.setdefault(key, ([], []))
            y.append(int(bool(rec["spans"])))
            s.append(p.scores.score)
    return {k: (float(roc_auc_score(y, s)) if len(set(y)) == 2 else None) for k, (y, s) in sorted(groups.items())}


# ---- calibration ---------------------------------------------------------------------------------------------

def objective(items: list[Scored]) -> float:
    """What calibration maximises: the mean of span-level and example-level F1 (localisation and detection)."""
    return 0.5 * (span_level(items)["f1"] + example_level(items)["f1"])


def fit_combiner(records: list[dict], preds: list[Prediction], c: float = 1.0,
                 features=DEFAULT_COMBINER_FEATURES) -> Combiner:
    from sklearn.linear_model import LogisticRegression

    xs, ys = [], []
    for rec, p in zip(records, preds):
        if p.scores is None or not len(p.scores.answer_offsets):
            continue
        xs.append(design_matrix(p.scores.model_probs, p.scores.grounding, rec.get("task_type"), features))
        ys.append(token_labels(rec["answer"], p.scores.answer_offsets, rec["spans"]))
    x, y = np.concatenate(xs), np.concatenate([np.asarray(v) for v in ys])
    lr = LogisticRegression(C=c, max_iter=2000).fit(x, y)
    return Combiner(list(features), [round(float(v), 6) for v in lr.coef_[0]], round(float(lr.intercept_[0]), 6))


COMBINER_MODES = {"off": None, "on": DEFAULT_COMBINER_FEATURES, "all": ALL_FEATURES}


def calibrate(model_dir: str | Path, records: list[dict], aggregations=("max", "min"),
              combiner_modes=("off", "on")) -> tuple[Calibration, list[dict]]:
    """Choose window aggregation, combiner and threshold on a held-out calibration split.

    Combiner modes: "off" (the model's probabilities), "on" (model + local grounding signals: numbers, names),
    "all" (also the word- and sentence-level absences, which blur localisation).

    Returns the chosen Calibration and the table of every candidate's best objective (for the run report).
    """
    from inference.detector_stage import DetectorScores

    table, best = [], None
    for agg in aggregations:
        gate = runtime_gate(model_dir, calibration=Calibration(window_aggregation=agg))
        raw = predict(gate, records)
        hm = gate.settings.hallucination_mitigation.hallucination_model
        for mode in combiner_modes:
            cal = Calibration(window_aggregation=agg)
            preds = raw
            if COMBINER_MODES[mode] is not None:
                cal.combiner = fit_combiner(records, raw, features=COMBINER_MODES[mode])
                preds = []
                for rec, p in zip(records, raw):
                    if p.scores is None:
                        preds.append(p)
                        continue
                    s = p.scores
                    probs = cal.combiner.apply(design_matrix(s.model_probs, s.grounding, rec.get("task_type"),
                                                             cal.combiner.features))
                    preds.append(Prediction(DetectorScores(s.answer_offsets, s.model_probs, probs, s.grounding,
                                                           s.windows), []))
            for t in THRESHOLDS:
                items = scored_items(records, preds, threshold=t, settings=hm, calibration=cal)
                score = objective(items)
                if best is None or score > best[0]:
                    best = (score, Calibration(t, agg, cal.combiner))
            row_best = max(objective(scored_items(records, preds, threshold=t, settings=hm, calibration=cal))
                           for t in THRESHOLDS)
            table.append({"window_aggregation": agg, "combiner": mode, "best_objective": round(row_best, 4)})
    assert best is not None
    log.info("calibration: %s (objective %.4f on %d records)", best[1].to_dict() | {"combiner": bool(best[1].combiner)},
             best[0], len(records))
    return best[1], table


def evaluate(gate, records: list[dict], with_sweep: bool = False) -> tuple[dict, list[Prediction]]:
    """Metrics (levels, per-task AUROC, counts) of the gate's Detector on span records."""
    preds = predict(gate, records, progress=True)
    hm = gate.settings.hallucination_mitigation.hallucination_model
    items = scored_items(records, preds, settings=hm, calibration=gate.detector_calibration)
    skipped = [(r["id"], p.error) for r, p in zip(records, preds) if p.scores is None]
    from inference.detector_stage import effective

    threshold, aggregation, combiner = effective(hm, gate.detector_calibration)
    result = {"threshold": threshold, "window_aggregation": aggregation, "combiner": combiner is not None,
              "n_scored": len(items), "n_skipped": len(skipped), "skipped": skipped[:50],
              "levels": detection_metrics(items), "auroc": per_task_auroc(records, preds)}
    if with_sweep:
        result["sweep"] = [
            {"threshold": t, **{f"{lvl}_{k}": m[lvl]["overall"][k] for lvl in ("example", "span", "token")
                                for k in ("precision", "recall", "f1")}}
            for t in THRESHOLDS
            for m in [detection_metrics(scored_items(records, preds, threshold=t, settings=hm,
                                                     calibration=gate.detector_calibration))]]
    return result, preds
