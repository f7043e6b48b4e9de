"""Two calibration-level probes on the fold models of a Detector cross-validation (no training; measured in
session 24, docs/detector.md "A grounding prior, and other per-answer scores"; neither adopted).

    python scripts/probe_detector_calibration.py prior --cv-dir runs/detector-cv-demo-s24 \
        --config configs/detector.demo.yaml --data-dir ../shared/data
    python scripts/probe_detector_calibration.py example-score --cv-dir runs/detector-cv-demo-s24 \
        --config configs/detector.demo.yaml --data-dir ../shared/data

`prior`: the calibration combiner is fitted on few responses (48-60 in the demo recipe's folds), so its grounding
coefficients are noisy. The probe fits a *grounding prior* instead on each fold's training responses of the folded
source (a logistic regression of the token label on the non-copy grounding signals and the task indicators; no
model output, so the fold's training responses serve without bias), and offers the calibration its logit as one
more column: modes `prior` (model logit + prior + task indicators) and `prior_on` (the `on` features + prior),
beside the recipe's modes. Every arm is calibrated twice, on the fold's calibration split and on the other folds'
out-of-fold predictions (the cross-fold calibration), and scored on the fold. The prior's logit travels in the
`copied_bigram` column of the scores (a probe shortcut: the recipe's modes never read the copy signals).

`example-score`: the per-task AUROC target reads one score per answer (today the highest token probability).
The probe computes other rules on the same calibrated token probabilities and chooses, per fold, the rule with the
best mean per-task AUROC on the fold's calibration split (nested: the fold's labels take no part), then reports
each rule's and the chosen rule's AUROC on the folds.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import training.detector_scoring as scoring
from eval.detector_cv import add_fold_model_arguments, fold_of_sources, fold_split, out_of_fold_predictions
from inference.detector_stage import TASK_FEATURES, Calibration, Combiner, design_matrix, logit
from inference.grounding import FEATURES
from inference.settings import InferenceSettings
from training.cli import resolve_config_file
from training.data.base import resolve_data_dir
from training.data.spans import SpanDataReport
from training.detector import DetectorConfig, group_key, load_mixture
from training.detector_scoring import (
    apply_calibration,
    fit_calibration,
    fit_combiner,
    metrics_of,
    predict,
    runtime_gate,
)

PRIOR_COLUMN = "copied_bigram"
PRIOR_INPUTS = ("number_unsupported", "entity_unsupported", "word_unsupported", "function_word",
                "sentence_unsupported", "falsy_field", *TASK_FEATURES)
TASKS = ("QA", "Summary", "Data2txt")
RULES = ("max", "top3_mean", "top5_mean", "noisy_or", "mean", "share_over_threshold", "excess_over_threshold")


def fit_prior(records, preds) -> Combiner:
    """The combiner's own fit (training.detector_scoring.fit_combiner) on the grounding and task columns only."""
    return fit_combiner(records, preds, features=PRIOR_INPUTS)


def with_prior(records, preds, prior):
    """The predictions with the prior's logit in the PRIOR_COLUMN of their grounding signals."""
    out, j = [], FEATURES.index(PRIOR_COLUMN)
    for rec, p in zip(records, preds):
        if p.scores is None or not len(p.scores.answer_offsets):
            out.append(p)
            continue
        scores = copy.copy(p.scores)
        scores.grounding = g = p.scores.grounding.copy()
        x = design_matrix(p.scores.model_probs, g, rec.task_type, prior.features)
        g[:, j] = np.clip(logit(prior.apply(x)), -8, 8)
        out.append(type(p)(scores, p.spans))
    return out


def fold_inputs(args):
    """Per fold: (training, calibration, test records, the fold model's calibration-split and test predictions),
    the folds exactly as the CV drew them."""
    cfg = resolve_config_file(DetectorConfig, args.config, [], args.data_dir)
    records, _ = load_mixture(cfg, resolve_data_dir(cfg.run.data_dir), SpanDataReport())
    folded = [r for r in records if r.source == args.source]
    others = [r for r in records if r.source != args.source]
    assignment = fold_of_sources(folded, args.k, cfg.run.seed)  # as eval.detector_cv.run_cv folds them
    oof = out_of_fold_predictions(Path(args.cv_dir), folded, assignment, list(range(args.k)))
    for fold in range(args.k):
        train = [r for r in folded if assignment[group_key(r)] != fold]
        _, calib = fold_split(cfg, train, others)
        gate = runtime_gate(Path(args.cv_dir) / f"fold-{fold}", calibration=Calibration())
        yield fold, cfg, train, calib, predict(gate, calib), oof


def probe_prior(args, hm) -> dict:
    scoring.COMBINER_MODES["prior"] = ("model_logit", PRIOR_COLUMN, *TASK_FEATURES)
    scoring.COMBINER_MODES["prior_on"] = (*scoring.COMBINER_MODES["on"], PRIOR_COLUMN)
    scoring._COMPLEXITY.update(prior=1, prior_on=2)
    results: dict = {}
    for fold, cfg, train, calib, calib_raw, oof in fold_inputs(args):
        c = cfg.calibration
        arms = {"recipe": tuple(c.combiner), "recipe + prior": (*c.combiner, "prior"),
                "recipe + prior_on": (*c.combiner, "prior_on"), "off or prior": ("off", "prior")}
        by_id = {r.id: p for j in oof for r, p in zip(*oof[j])}
        prior = fit_prior(train, [by_id[r.id] for r in train])
        print(f"fold {fold}: prior coefficients", dict(zip(prior.features, np.round(prior.coef, 2).tolist())),
              flush=True)
        test, test_raw = oof[fold]
        others = [j for j in oof if j != fold]
        pooled = [r for j in others for r in oof[j][0]]
        sources = {"fold": (calib, with_prior(calib, calib_raw, prior)),
                   "cross_fold": (pooled, with_prior(pooled, [p for j in others for p in oof[j][1]], prior))}
        test_p = with_prior(test, test_raw, prior)
        for arm, modes in arms.items():
            for kind, (recs, preds) in sources.items():
                cal, _, _ = fit_calibration(recs, preds, hm, **{**c.choices(), "combiner_modes": modes})
                m = metrics_of(test, apply_calibration(test, test_p, hm, cal), hm, cal)
                row = {f"{lvl}_f1": m["levels"][lvl]["overall"]["f1"] for lvl in ("example", "span", "token")}
                row.update({f"auroc_{t}": m["auroc"].get(t) for t in TASKS},
                           prior_chosen=bool(cal.combiner and PRIOR_COLUMN in cal.combiner.features))
                results.setdefault(f"{arm} / {kind}", []).append(row)
    return results


def example_scores(probs: np.ndarray, threshold: float) -> dict[str, float]:
    if not len(probs):
        return dict.fromkeys(RULES, 0.0)
    top = np.sort(probs)[::-1]
    return {"max": float(top[0]), "top3_mean": float(top[:3].mean()), "top5_mean": float(top[:5].mean()),
            "noisy_or": float(1 - np.prod(1 - np.clip(probs, 0, 1 - 1e-9))), "mean": float(probs.mean()),
            "share_over_threshold": float((probs >= threshold).mean()),
            "excess_over_threshold": float(np.clip(probs - threshold, 0, None).sum())}


def rule_aurocs(records, preds, cal: Calibration) -> dict[str, dict[str, float]]:
    from sklearn.metrics import roc_auc_score

    rows: dict[str, list] = {}
    for rec, p in zip(records, preds):
        if p.scores is not None:
            t = (cal.task_thresholds or {}).get(rec.task_type, cal.threshold)
            rows.setdefault(rec.task_type, []).append((bool(rec.spans), example_scores(p.scores.probs, t)))
    return {task: {r: float(roc_auc_score([y for y, _ in v], [s[r] for _, s in v])) for r in RULES}
            for task, v in rows.items() if len({y for y, _ in v}) == 2}


def probe_example_score(args, hm) -> dict:
    results: dict = {}
    for fold, _, _, calib, calib_raw, oof in fold_inputs(args):
        detector_json = json.loads((Path(args.cv_dir) / f"fold-{fold}" / "detector.json").read_text())
        cal = Calibration.from_dict(detector_json["calibration"])
        on_calib = rule_aurocs(calib, apply_calibration(calib, calib_raw, hm, cal), cal)
        chosen = max(RULES, key=lambda r: np.mean([a[r] for a in on_calib.values()]) if on_calib else 0.0)
        test, raw = oof[fold]
        on_test = rule_aurocs(test, apply_calibration(test, raw, hm, cal), cal)
        for rule in (*RULES, "chosen on the calibration split"):
            key = chosen if rule.startswith("chosen") else rule
            results.setdefault(rule, []).append({f"auroc_{t}": on_test.get(t, {}).get(key) for t in TASKS})
        print(f"fold {fold}: chosen {chosen}", flush=True)
    return results


def summary(results: dict) -> dict:
    out = {}
    for name, rows in results.items():
        out[name] = {}
        for key in rows[0]:
            values = [r[key] for r in rows if isinstance(r[key], float)]
            if values:
                scale = 1 if key.startswith("auroc") else 100
                out[name][key] = [round(scale * float(np.mean(values)), 3), round(scale * float(np.std(values, ddof=1)), 3)]
            elif key == "prior_chosen":
                out[name][key] = sum(r[key] for r in rows)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("probe", choices=["prior", "example-score"])
    add_fold_model_arguments(p)
    p.add_argument("--k", type=int, default=5, help="the CV's fold count")
    p.add_argument("--out", help="JSON of every fold's figures (default CV_DIR/probe-PROBE.json)")
    args = p.parse_args()
    if args.data_dir:
        os.environ["HALUGATE_DATA_DIR"] = args.data_dir
    hm = InferenceSettings().hallucination_mitigation.hallucination_model
    results = (probe_prior if args.probe == "prior" else probe_example_score)(args, hm)
    out = Path(args.out or Path(args.cv_dir) / f"probe-{args.probe}.json")
    figures_by_arm = summary(results)
    out.write_text(json.dumps({"summary": figures_by_arm, "folds": results}, indent=1))
    for name, figures in figures_by_arm.items():
        print(f"{name}: {figures}")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
