"""Score span records with the runtime's Detector stage, fit the calibration, and compute the metrics.

Predictions always come from `inference.detect.HaluGate` (same windows, aggregation, label lookup, combiner,
threshold and span building as in production) on the torch runner (a run dir) or the ONNX runner (an export
dir). Used by training.detector (calibration split, held-out split) and eval.detector (evaluation, CV).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from inference.config import apply_overrides, from_dict, to_dict
from inference.detect import HaluGate
from inference.detector_stage import (
    ALL_FEATURES,
    DEFAULT_COMBINER_FEATURES,
    TASK_FEATURES,
    Calibration,
    Combiner,
    DetectorScores,
    design_matrix,
    effective,
    extension_of,
    rescore,
    scores_to_spans,
    smoothing_of,
)
from inference.grounding import COPY_FEATURES
from inference.settings import InferenceSettings
from inference.spans import token_labels
from inference.windowing import InputTooLongError
from training.data.records import SpanRecord
from training.span_metrics import Scored, detection_metrics, example_level, span_chars, span_level

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
                 calibration: Calibration | None = None, num_threads: int = 0, signals: str = "all"):
    """A HaluGate with only the Detector loaded (no Sentinel: every record is verified; no Explainer).
    `signals="all"` by default: evaluation and calibration rescore its predictions under other combiners."""
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
    gate.detector_signals = signals
    return gate


def _input(rec: SpanRecord) -> dict:
    return {"context": rec.context, "question": rec.question, "answer": rec.answer, "task_type": rec.task_type}


def predict(gate, records: list[SpanRecord], batch: int = 64, progress: bool = False) -> list[Prediction]:
    """Runtime predictions per record; records the runtime refuses (too long) are kept with the reason."""
    from tqdm.auto import tqdm

    hm = gate.settings.hallucination_mitigation.hallucination_model
    out: list[Prediction | None] = [None] * len(records)
    ready = []
    for i, rec in enumerate(records):
        try:
            name = f"record {rec.id}"
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


def gold_token_labels(records: list[SpanRecord], preds: list[Prediction]) -> list[list[int] | None]:
    """Each record's gold label per answer token of its prediction (None where it was not scored): computed once
    for a threshold sweep instead of once per threshold."""
    return [None if p.scores is None else token_labels(rec.answer, p.scores.answer_offsets, rec.spans)
            for rec, p in zip(records, preds)]


def scored_items(records: list[SpanRecord], preds: list[Prediction], threshold: float | None = None,
                 settings=None, calibration=None, gold: list[list[int] | None] | None = None) -> list[Scored]:
    """Scored items for the metrics; with `threshold`, spans are rebuilt at that threshold (sweeps); `gold`:
    gold_token_labels of the same records and predictions, when the caller has them."""
    gold = gold or gold_token_labels(records, preds)
    items = []
    for rec, p, tokens in zip(records, preds, gold):
        if p.scores is None:
            continue
        if threshold is None:
            spans, t = p.spans, effective(settings, calibration, p.scores.task_type)[0]
        else:
            spans, t = scores_to_spans(rec.answer, p.scores, settings, calibration, threshold=threshold), threshold
        items.append(Scored(rec.task_type, rec.spans, spans, tokens, (p.scores.probs >= t).astype(int).tolist()))
    return items


def apply_calibration(records: list[SpanRecord], preds: list[Prediction], settings, cal: Calibration) -> list[Prediction]:
    """Predictions under another calibration, from the same window probabilities (no model call)."""
    out = []
    for rec, p in zip(records, preds):
        if p.scores is None:
            out.append(p)
            continue
        sc = rescore(p.scores, cal.window_aggregation or settings.window_aggregation, cal.combiner, cal.smoothing)
        out.append(Prediction(sc, scores_to_spans(rec.answer, sc, settings, cal)))
    return out


def per_task_auroc(records: list[SpanRecord], preds: list[Prediction]) -> dict:
    """Example-level AUROC of the per-answer score, overall and within each task type (None: one class only)."""
    from sklearn.metrics import roc_auc_score

    groups: dict[str, tuple[list, list]] = {}
    for rec, p in zip(records, preds):
        if p.scores is None:
            continue
        for key in ("overall", rec.task_type or "unknown"):
            y, s = groups.setdefault(key, ([], []))
            y.append(int(bool(rec.spans)))
            s.append(p.scores.score)
    return {k: (float(roc_auc_score(y, s)) if len(set(y)) == 2 else None) for k, (y, s) in sorted(groups.items())}


# ---- calibration ---------------------------------------------------------------------------------------------

def objective(items: list[Scored]) -> float:
    """What calibration maximises: the mean of span-level and example-level F1 (localisation and detection)."""
    return 0.5 * (span_level(items)["f1"] + example_level(items)["f1"])


def fit_combiner(records: list[SpanRecord], preds: list[Prediction], c: float = 1.0,
                 features=DEFAULT_COMBINER_FEATURES) -> Combiner:
    from sklearn.linear_model import LogisticRegression

    xs, ys = [], []
    for rec, p in zip(records, preds):
        if p.scores is None or not len(p.scores.answer_offsets):
            continue
        xs.append(design_matrix(p.scores.model_probs, p.scores.grounding, rec.task_type, features))
        ys.append(token_labels(rec.answer, p.scores.answer_offsets, rec.spans))
    x, y = np.concatenate(xs), np.concatenate([np.asarray(v) for v in ys])
    lr = LogisticRegression(C=c, max_iter=2000).fit(x, y)
    return Combiner(list(features), [round(float(v), 6) for v in lr.coef_[0]], round(float(lr.intercept_[0]), 6))


COMBINER_MODES = {"off": None, "on": DEFAULT_COMBINER_FEATURES,
                  "all": tuple(f for f in ALL_FEATURES if f not in COPY_FEATURES), "copy": ALL_FEATURES}
# A threshold trades missed hallucinations against false alarms, so a task type gets its own only when its
# calibration responses hold enough of both: with RAGTruth's QA share (~17%, 1 in 5 hallucinated) a 15%
# calibration split has ~2-3 hallucinated QA answers, and thresholds fitted on them swung from 0.15 to 0.6
# between folds. Task types below the floor use the global threshold, or a stricter one of their own (SMALL_TASKS).
MIN_TASK_CLASS_RECORDS = 10


def _records_by_task(records: list[SpanRecord]) -> dict[str, tuple[list[int], int]]:
    """Task type -> (indices of its records, how many of them are hallucinated), sorted by task type; records
    without a task type are left out."""
    by_task: dict[str, list[int]] = {}
    for i, rec in enumerate(records):
        if rec.task_type:
            by_task.setdefault(rec.task_type, []).append(i)
    return {task: (idx, sum(1 for i in idx if records[i].spans)) for task, idx in sorted(by_task.items())}


def tasks_with_own_threshold(records: list[SpanRecord]) -> dict[str, list[int]]:
    """Task type -> indices of its records, for the task types with at least MIN_TASK_CLASS_RECORDS
    hallucinated and as many faithful responses (records without a task type never qualify)."""
    return {task: idx for task, (idx, positive) in _records_by_task(records).items()
            if min(positive, len(idx) - positive) >= MIN_TASK_CLASS_RECORDS}


# What a task type too small for a threshold of its own (tasks_with_own_threshold) gets (`calibration.small_tasks`):
# "global", the global threshold; "stricter", its own best threshold on its few calibration responses when that is
# higher than the global one, else the global one. Why one-sided: the global threshold is set where most responses
# are (RAGTruth's Data2txt and Summary, with more hallucinations than QA), and at it a QA answer was flagged 23
# times in 24 in one CV fold; a few responses may show that a task needs more evidence, while a lower threshold
# fitted on two or three hallucinated answers swung widely (above). Measured on the offline and the demo recipes'
# CV folds, where they disagreed: on in the offline recipe only (docs/detector.md, "Calibration"; measured
# on 2026-12-06).
SMALL_TASKS = ("global", "stricter")


def stricter_small_task_thresholds(records: list[SpanRecord], raw: list[Prediction], settings,
                                   cal: Calibration, threshold_choice: str = "best"
                                   ) -> tuple[Calibration, dict[str, float]]:
    """`cal` with a threshold for each task type that does not qualify for its own (tasks_with_own_threshold) but
    has both hallucinated and faithful calibration responses, where the threshold that maximises the objective on
    those responses (among equals the highest, as _best_threshold everywhere) is above `cal.threshold`; and those
    thresholds (empty: `cal` unchanged)."""
    qualified = tasks_with_own_threshold(records)
    preds = apply_calibration(records, raw, settings, cal)
    stricter = {}
    for task, (idx, positive) in _records_by_task(records).items():
        if task not in qualified and 0 < positive < len(idx):
            own = _best_threshold([records[i] for i in idx], [preds[i] for i in idx], settings, cal,
                                  threshold_choice)[0]
            if own > cal.threshold:
                stricter[task] = own
    if not stricter:
        return cal, {}
    return replace(cal, task_thresholds={**(cal.task_thresholds or {}), **stricter}), stricter


# Which task-type indicators the combiner may use (`calibration.task_indicators`): "qualified", those of the
# task types that may have their own threshold (tasks_with_own_threshold); "all", every one (before 2026-12-03).
TASK_INDICATORS = ("qualified", "all")


def combiner_features(features, by_task: dict[str, list[int]], task_indicators: str = "qualified"
                      ) -> tuple[str, ...]:
    """The combiner's features; with "qualified", without the indicators of task types that may not have their
    own threshold. Why: a task indicator shifts that task's probabilities against the one global threshold,
    which is a threshold of its own by another name; fitted on the 2-3 hallucinated QA answers of a 15% split
    it lifted every token of a short QA answer over the threshold (the make-demo Eiffel answer flagged whole),
    so it follows the same MIN_TASK_CLASS_RECORDS rule as the per-task thresholds."""
    if task_indicators not in TASK_INDICATORS:
        raise ValueError(f"calibration.task_indicators: one of {', '.join(TASK_INDICATORS)}, got {task_indicators!r}")
    if task_indicators == "all":
        return tuple(features)
    return tuple(f for f in features if f not in TASK_FEATURES or f.removeprefix("task=") in by_task)


# How a threshold is read off the objective curve (`calibration.threshold_choice`):
# - "best": the threshold with the highest objective on the calibration records (among equals the highest);
# - "bagged": the median of that choice over bootstrap resamples of the calibration responses (Breiman's bagging
#   applied to the choice itself). On a few dozen responses the objective curve is jagged, and its argmax can jump
#   to a neighbouring threshold that one or two responses favour; the median choice over resamples follows the
#   bulk of the responses instead.
THRESHOLD_CHOICES = ("best", "bagged")


def _best_threshold(records, preds, settings, cal, choice: str = "best", seed: int = 0) -> tuple[float, float]:
    """(threshold, its objective) on these records, by `choice` (THRESHOLD_CHOICES)."""
    gold = gold_token_labels(records, preds)
    items = [scored_items(records, preds, threshold=t, settings=settings, calibration=cal, gold=gold)
             for t in THRESHOLDS]
    objectives = [objective(it) for it in items]
    if choice == "best" or not records:
        best = max(zip(objectives, THRESHOLDS))
        return best[1], best[0]
    n = len(records)
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=BOOTSTRAP_SAMPLES)
    boot = np.stack([objective_of_stats(objective_stats(it), weights) for it in items])  # (thresholds, resamples)
    i = bagged_pick(boot)
    return THRESHOLDS[i], objectives[i]


def bagged_pick(boot: np.ndarray) -> int:
    """The median over resamples (columns) of each resample's best row (rows: thresholds in rising order; among
    equals the highest, as "best"), as a row index: the lower median, so that it is a grid value."""
    picks = boot.shape[0] - 1 - boot[::-1].argmax(axis=0)
    return int(np.sort(picks)[(len(picks) - 1) // 2])


# How a calibration is chosen among its candidates (`calibration.selection`):
# - "best": the highest objective on the calibration records;
# - "one_se": the simplest candidate whose objective is within one bootstrap standard error of the best one's
#   (Breiman's one-standard-error rule). Why: on a few dozen calibration responses the candidates with more
#   parameters (a combiner, per-task thresholds, smoothing) may win by noise; on ~500 responses the standard
#   error shrinks and a richer candidate is kept when its gain is real. Measured on the make-demo recipe's 5
#   folds, not adopted (docs/experiments.md, 2026-12-03).
SELECTIONS = ("best", "one_se")
BOOTSTRAP_SAMPLES = 200
_COMPLEXITY = {"off": 0, "on": 1, "all": 2, "copy": 3}


def objective_stats(items: list[Scored]) -> np.ndarray:
    """Per response: (overlapping, predicted, gold span characters, example TP, predicted positive, gold
    positive): the sums the objective is made of, so that resamples of the responses cost one matrix product."""
    rows = []
    for it in items:
        pred, gold = bool(it.pred_spans), bool(it.gold_spans)
        rows.append((*span_chars(it), pred and gold, pred, gold))
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), 6)


def objective_of_stats(stats: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """objective() for each row of `weights` (resample counts per response, shape (B, n)) -> (B,)."""
    s = np.atleast_2d(weights) @ stats

    def f1(tp, pred, gold):
        p = np.divide(tp, pred, out=np.zeros_like(tp), where=pred > 0)
        r = np.divide(tp, gold, out=np.zeros_like(tp), where=gold > 0)
        return np.divide(2 * p * r, p + r, out=np.zeros_like(tp), where=p + r > 0)

    return 0.5 * (f1(s[:, 0], s[:, 1], s[:, 2]) + f1(s[:, 3], s[:, 4], s[:, 5]))


def select_one_se(objectives: list[float], complexities: list[int], stats: list[np.ndarray], seed: int = 0
                  ) -> tuple[int, list[float]]:
    """Index of the simplest candidate whose objective is within one standard error of the best one's (ties:
    the higher objective), and each candidate's standard error of its difference to the best. The error is
    that of the paired difference over bootstrap resamples of the responses (the same resamples for every
    candidate), so a candidate that loses on the same responses as the best is not excused by the spread of
    the responses themselves."""
    best = int(np.argmax(objectives))
    n = len(stats[best])
    if n == 0:
        return best, [0.0] * len(objectives)
    weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=BOOTSTRAP_SAMPLES)
    boot = [objective_of_stats(st, weights) for st in stats]
    ses = [float(np.std(boot[best] - b)) for b in boot]
    eligible = [i for i in range(len(objectives)) if objectives[best] - objectives[i] <= ses[i]]
    return min(eligible, key=lambda i: (complexities[i], -objectives[i])), ses


def fit_calibration(records: list[SpanRecord], raw: list[Prediction], settings, aggregations=("max", "min"),
                    combiner_modes=("off", "on"), smoothings=(0,), selection: str = "best",
                    task_indicators: str = "qualified", span_extension: float = 1.0, small_tasks: str = "global",
                    threshold_choice: str = "best") -> tuple[Calibration, list[dict], dict[str, Calibration]]:
    """Choose window aggregation, combiner, smoothing and thresholds (global and per task type) on calibration
    records; spans are built with `span_extension` (inference.detector_stage.extension_of), which every candidate
    records.

    `raw` are the records' runtime predictions (any calibration: only their window probabilities are used).
    Combiner modes: "off" (the model's probabilities), "on" (model + local grounding signals: numbers, names),
    "all" (also the word- and sentence-level absences), "copy" (also the copy, pair and position signals,
    inference.grounding.COPY_FEATURES). Smoothings: widths of the moving average over answer
    tokens applied after the combiner (inference.detector_stage.smooth; 0 = none). `selection`: "best" or
    "one_se" (see SELECTIONS); `task_indicators`: see TASK_INDICATORS; `small_tasks`: see SMALL_TASKS (applied to
    the chosen candidate); `threshold_choice`: how each threshold is read off its objective curve (see
    THRESHOLD_CHOICES). Returns the chosen calibration, the
    table of every candidate's objective, and the best calibration of each combiner mode.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"calibration.selection: one of {', '.join(SELECTIONS)}, got {selection!r}")
    if small_tasks not in SMALL_TASKS:
        raise ValueError(f"calibration.small_tasks: one of {', '.join(SMALL_TASKS)}, got {small_tasks!r}")
    if threshold_choice not in THRESHOLD_CHOICES:
        raise ValueError(f"calibration.threshold_choice: one of {', '.join(THRESHOLD_CHOICES)}, "
                         f"got {threshold_choice!r}")
    # The thresholds are the model's, chosen on its own spans: the exact check's spans (flag_ungrounded) are
    # added at inference, not traded against a higher threshold (docs/detector.md, "Grounding signals and the exact check")
    settings = replace(settings, flag_ungrounded=False)
    table, best_by_mode = [], {}
    # every candidate: (objective, complexity, calibration, its scored items (called for one_se only), table row)
    candidates: list[tuple[float, int, Calibration, Callable[[], list[Scored]], dict]] = []
    by_task = tasks_with_own_threshold(records)
    for agg in aggregations:
        base = [Prediction(rescore(p.scores, agg, None), []) if p.scores is not None else p for p in raw]
        for mode in combiner_modes:
            features = COMBINER_MODES[mode]
            combiner = (fit_combiner(records, base, features=combiner_features(features, by_task, task_indicators))
                        if features else None)
            for width in smoothings:
                cal = Calibration(None, agg, combiner, smoothing=width, span_extension=span_extension)
                preds = apply_calibration(records, raw, settings, cal)
                cal.threshold, global_obj = _best_threshold(records, preds, settings, cal, threshold_choice)
                complexity = _COMPLEXITY[mode] + int(width > 1)
                row = {"window_aggregation": agg, "combiner": mode, "smoothing": width,
                       "threshold": cal.threshold, "objective_global_threshold": round(global_obj, 4)}
                candidates.append((global_obj, complexity, cal, partial(scored_items, records, preds,
                                                                       settings=settings, calibration=cal), row))
                task_t = {}
                for task, idx in by_task.items():
                    task_t[task] = _best_threshold([records[i] for i in idx], [preds[i] for i in idx], settings,
                                                   cal, threshold_choice)[0]
                per_task = Calibration(cal.threshold, agg, combiner, task_thresholds=task_t or None, smoothing=width,
                                       span_extension=span_extension)
                task_obj = global_obj
                if task_t:
                    final = apply_calibration(records, raw, settings, per_task)
                    items = scored_items(records, final, settings=settings, calibration=per_task)
                    task_obj = objective(items)
                    candidates.append((task_obj, complexity + 1, per_task, partial(list, items), row))
                row.update(task_thresholds=task_t, objective_task_thresholds=round(task_obj, 4),
                           objective=round(max(global_obj, task_obj), 4))
                table.append(row)
                # per-task thresholds only when they help on these records
                mode_best = per_task if task_t and task_obj > global_obj else cal
                if mode not in best_by_mode or row["objective"] > best_by_mode[mode][0]:
                    best_by_mode[mode] = (row["objective"], mode_best)
    objectives = [c[0] for c in candidates]
    if selection == "one_se":
        chosen, ses = select_one_se(objectives, [c[1] for c in candidates],
                                    [objective_stats(c[3]()) for c in candidates])
        for (_, _, cal, _, row), se in zip(candidates, ses):
            row["se_to_best" + ("_task_thresholds" if cal.task_thresholds else "")] = round(se, 4)
    else:
        chosen = int(np.argmax(objectives))  # the first of equals: the global threshold before per-task ones
    obj, _, best, _, row = candidates[chosen]
    row["selected"] = "task_thresholds" if best.task_thresholds else "global_threshold"
    if small_tasks == "stricter":
        best, row["small_task_thresholds"] = stricter_small_task_thresholds(records, raw, settings, best,
                                                                            threshold_choice)
    log.info("calibration (%s): %s (objective %.4f on %d records; best candidate %.4f)", selection,
             {**best.to_dict(), "combiner": bool(best.combiner)}, obj, len(records), max(objectives))
    return best, table, {m: c for m, (_, c) in best_by_mode.items()}


def calibrate(model_dir: str | Path, records: list[SpanRecord], **choices
              ) -> tuple[Calibration, list[dict], dict[str, Calibration]]:
    """fit_calibration on a model dir's runtime predictions (one model pass over the records); `choices` are
    fit_calibration's keyword arguments (training.detector.CalibrationConfig.choices)."""
    gate = runtime_gate(model_dir, calibration=Calibration())
    raw = predict(gate, records)
    return fit_calibration(records, raw, gate.settings.hallucination_mitigation.hallucination_model, **choices)


def metrics_of(records: list[SpanRecord], preds: list[Prediction], settings, cal: Calibration) -> dict:
    items = scored_items(records, preds, settings=settings, calibration=cal)
    skipped = [(r.id, p.error) for r, p in zip(records, preds) if p.scores is None]
    threshold, aggregation, combiner = effective(settings, cal)
    return {"threshold": threshold, "task_thresholds": cal.task_thresholds if cal else None,
            "window_aggregation": aggregation, "combiner": combiner is not None,
            "smoothing": smoothing_of(settings, cal), "span_extension": extension_of(settings, cal),
            "n_scored": len(items), "n_skipped": len(skipped), "skipped": skipped[:50],
            "levels": detection_metrics(items), "auroc": per_task_auroc(records, preds)}


def evaluate(gate, records: list[SpanRecord], with_sweep: bool = False) -> tuple[dict, list[Prediction]]:
    """Metrics (levels, per-task AUROC, counts) of the gate's Detector on span records."""
    preds = predict(gate, records, progress=True)
    hm = gate.settings.hallucination_mitigation.hallucination_model
    result = metrics_of(records, preds, hm, gate.detector_calibration)
    if with_sweep:
        gold = gold_token_labels(records, preds)
        result["sweep"] = [
            {"threshold": t, **{f"{lvl}_{k}": m[lvl]["overall"][k] for lvl in ("example", "span", "token")
                                for k in ("precision", "recall", "f1")}}
            for t in THRESHOLDS
            for m in [detection_metrics(scored_items(records, preds, threshold=t, settings=hm,
                                                     calibration=gate.detector_calibration, gold=gold))]]
    return result, preds
