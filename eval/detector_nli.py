"""The Explainer as a second opinion on the Detector, measured under the cross-validation protocol.

    python -m eval.detector_nli --cv-dir runs/detector-cv --config configs/detector.offline.yaml \
        --explainer runs/explainer-offline-onnx --data-dir ../shared/data --out runs/detector-nli

HaluGate's published finding is that token detection alone is mediocre and the NLI layer makes it useful. Here
every answer sentence of every held-out fold is judged by the Explainer against its premises (the runtime's
`inference.explain.premise_candidates`: the context windows and sentences sharing the most words with it; a
sentence entailed by any premise counts as entailed, contradicted by any as contradicted), and three scorers
are compared on the same held-out folds:

- **detector**: the fold model's token scores with its own calibration (what eval.detector --cv reports), and
  the same features through a combiner fitted as below (so that the NLI columns are the only difference);
- **nli**: only the sentence's P(not entailed) and P(contradiction) (+ task type), per token;
- **detector + nli**: both.

The combiners are logistic regressions over token features, fitted by cross-fitting: for fold k, on the
out-of-fold predictions of the other folds only (each made by a model that never saw them), and the threshold
is the one maximising mean(span F1, example F1) on those folds. Fold k is never used to fit anything it is
scored on. Output: OUT/report.md, OUT/metrics.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from eval.detector_cv import cv_records
from inference import explain
from inference.detector_stage import DEFAULT_COMBINER_FEATURES, design_matrix, scores_to_spans
from inference.formatting import nli_pair
from inference.runners import load_runner
from inference.settings import DetectorSettings, ExplainerSettings
from inference.spans import token_labels
from inference.stages.explainer import premise_set
from training.data.records import SpanRecord
from training.detector_scoring import THRESHOLDS, metrics_of, objective, per_task_auroc, predict, runtime_gate
from training.hardware import hardware
from training.span_metrics import Scored, detection_metrics

log = logging.getLogger("halugate.eval.detector_nli")
NLI_FEATURES = ("nli_not_entailed", "nli_contradiction")
SCORERS = ("detector", "nli", "detector+nli")


@dataclass
class FoldData:
    fold: int
    records: list[SpanRecord]
    preds: list  # training.detector_scoring.Prediction with the fold's calibration
    fold_metrics: dict  # the fold model's own calibrated output
    nli: list[np.ndarray]  # per record: (n_tokens, 2) sentence-level NLI features of each answer token


def sentence_nli(runner, record: SpanRecord, offsets: list[tuple[int, int]], es: ExplainerSettings) -> np.ndarray:
    """Per answer token: (1 - max P(entailment), max P(contradiction)) of its sentence over its premises."""
    answer, context, question = record.answer, record.context, record.question or ""
    out = np.zeros((len(offsets), 2))
    sentences, seen = [], set()
    for s, e in offsets:
        a, b = explain.widen(answer, s, e, "sentence")
        if (a, b) not in seen and answer[a:b].strip():
            seen.add((a, b))
            sentences.append((a, b))
    labels = [x.lower() for x in runner.labels]
    ent, con = labels.index("entailment"), labels.index("contradiction")
    pairs, owner = [], []
    for k, (a, b) in enumerate(sentences):
        hyp = answer[a:b]
        premises = premise_set(runner, es, context, question, hyp)  # the runtime's candidates, same pair length
        for p in premises.pick(es.max_premise_windows, es.max_premise_sentences):
            pairs.append(nli_pair(p.text + ("\n" + question if question else ""), hyp))
            owner.append(k)
    if not pairs:
        return out
    probs = runner.classify(pairs)
    per_sentence = np.zeros((len(sentences), 2))
    per_sentence[:, 0] = 1.0
    for k, p in zip(owner, probs):
        per_sentence[k, 0] = min(per_sentence[k, 0], 1.0 - float(p[ent]))
        per_sentence[k, 1] = max(per_sentence[k, 1], float(p[con]))
    for i, (s, e) in enumerate(offsets):
        for k, (a, b) in enumerate(sentences):
            if a <= s < b or (s <= a < e):
                out[i] = per_sentence[k]
                break
    return out


def features(scorer: str, rec: SpanRecord, pred, nli: np.ndarray) -> np.ndarray:
    sc = pred.scores
    det = design_matrix(sc.model_probs, sc.grounding, rec.task_type, DEFAULT_COMBINER_FEATURES)
    if scorer == "detector":
        return det
    task = det[:, -3:]  # the task-type indicators (last in DEFAULT_COMBINER_FEATURES)
    return np.hstack([task, nli]) if scorer == "nli" else np.hstack([det, nli])


def _usable(fd: FoldData):
    return [(r, p, n) for r, p, n in zip(fd.records, fd.preds, fd.nli)
            if p.scores is not None and len(p.scores.answer_offsets)]


def _scored(rows, probs_of, threshold: float, hm: DetectorSettings) -> list[Scored]:
    items = []
    for (rec, pred, _), probs in zip(rows, probs_of):
        sc = pred.scores
        scores = replace(sc, probs=probs)  # the same window scores, the combined probabilities
        spans = scores_to_spans(rec.answer, scores, hm, None, threshold=threshold)
        items.append(Scored(rec.task_type, rec.spans, spans, token_labels(rec.answer, sc.answer_offsets, rec.spans),
                            [int(x >= threshold) for x in probs]))
    return items


def cross_fit(folds: list[FoldData], scorer: str, hm: DetectorSettings) -> list[dict]:
    """Per held-out fold: a combiner + threshold fitted on the other folds, its metrics on this one."""
    from sklearn.linear_model import LogisticRegression

    out = []
    for held in folds:
        train_rows = [row for fd in folds if fd is not held for row in _usable(fd)]
        x = np.concatenate([features(scorer, r, p, n) for r, p, n in train_rows])
        y = np.concatenate([token_labels(r.answer, p.scores.answer_offsets, r.spans) for r, p, _ in train_rows])
        lr = LogisticRegression(max_iter=2000).fit(x, y)

        def probs(rows, lr=lr):
            return [lr.predict_proba(features(scorer, r, p, n))[:, 1] for r, p, n in rows]

        train_probs = probs(train_rows)
        threshold = max(THRESHOLDS, key=lambda t: objective(_scored(train_rows, train_probs, t, hm)))
        rows = _usable(held)
        held_probs = probs(rows)
        levels = detection_metrics(_scored(rows, held_probs, threshold, hm))
        auroc_preds = [type(p)(replace(p.scores, probs=q), []) for (_, p, _), q in zip(rows, held_probs)]
        out.append({"fold": held.fold, "threshold": threshold, "levels": levels,
                    "auroc": per_task_auroc([r for r, _, _ in rows], auroc_preds)})
    return out


def summarize(per_fold: list[dict]) -> dict:
    def stat(get):
        values = [get(f) for f in per_fold if get(f) is not None]
        return {"mean": round(float(np.mean(values)), 4), "std": round(float(np.std(values)), 4)} if values else None

    out = {f"{lvl}_{k}": stat(lambda f, lvl=lvl, k=k: f["levels"][lvl]["overall"][k])
           for lvl in ("example", "span", "token") for k in ("precision", "recall", "f1")}
    for task in ("QA", "Summary", "Data2txt"):
        out[f"auroc_{task}"] = stat(lambda f, task=task: f["auroc"].get(task))
    return out


def write_report(path: Path, result: dict) -> None:
    rows = [("detector, fold calibration (eval.detector --cv)", result["summary"]["detector_fold_calibration"]),
            *((f"{s}, cross-fitted combiner", result["summary"][s]) for s in SCORERS)]
    lines = ["# The Explainer as a second opinion (cross-validated)", "",
             f"Command: `{result['command']}`", "",
             (f"{result['n_scored']} of {result['n_records']} responses: folds {result['folds']} (grouped by source); Explainer "
             f"`{result['explainer']}`; hardware: {result['hardware']}; {result['seconds']:.0f} s."), "",
             "| scorer | example F1 | span F1 | token F1 | AUROC QA | AUROC Summary | AUROC Data2txt |",
             "|---|---|---|---|---|---|---|"]

    def cell(s, key):
        return "-" if not s or not s.get(key) else f"{100 * s[key]['mean']:.1f} ± {100 * s[key]['std']:.1f}" \
            if not key.startswith("auroc") else f"{s[key]['mean']:.3f}"
    for name, s in rows:
        lines.append(f"| {name} | {cell(s, 'example_f1')} | {cell(s, 'span_f1')} | {cell(s, 'token_f1')} | "
                     f"{cell(s, 'auroc_QA')} | {cell(s, 'auroc_Summary')} | {cell(s, 'auroc_Data2txt')} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.detector_nli", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="example:\n  " + __doc__.splitlines()[2].strip() + " \\\n    "
                                       + __doc__.splitlines()[3].strip())
    p.add_argument("--cv-dir", required=True, help="output of eval.detector --cv (fold-k/ models)")
    p.add_argument("--config", required=True, help="the recipe the CV ran (same records and folds)")
    p.add_argument("--explainer", required=True, help="Explainer export dir (onnx) or run dir (with --backend torch)")
    p.add_argument("--backend", choices=["onnx", "torch"], default="onnx")
    p.add_argument("--data-dir", help="default $HALUGATE_DATA_DIR")
    p.add_argument("--source", default="ragtruth_test_subset")
    p.add_argument("--folds", type=int, nargs="*", help="only these folds (at least 2; the combiners of each are "
                   "fitted on the others given)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    started = time.time()
    cv_dir, out = Path(args.cv_dir), Path(args.out)
    fold_dirs = sorted(d for d in cv_dir.glob("fold-*") if (d / "model.safetensors").is_file()
                       and (args.folds is None or int(d.name.split("-")[1]) in args.folds))
    if not fold_dirs:
        print(f"error: {cv_dir}: no fold-*/model.safetensors (run eval.detector --cv first)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    k_folds = json.loads((cv_dir / "metrics.json").read_text())["k"] if (cv_dir / "metrics.json").is_file() else 5
    records, assignment, group_key = cv_records(args.config, args.data_dir, args.source, k_folds)
    explainer = load_runner(args.explainer, "sequence", args.backend)
    es, hm = ExplainerSettings(), DetectorSettings()
    folds = []
    for fold_dir in fold_dirs:
        k = int(fold_dir.name.split("-")[1])
        test = [r for r in records if assignment[group_key(r)] == k]
        gate = runtime_gate(fold_dir, "torch")
        preds = predict(gate, test)
        fm = metrics_of(test, preds, gate.settings.hallucination_mitigation.hallucination_model,
                        gate.detector_calibration)
        nli = [sentence_nli(explainer, r, pr.scores.answer_offsets, es) if pr.scores is not None else None
               for r, pr in zip(test, preds)]
        folds.append(FoldData(k, test, preds, fm, nli))
        print(f"[nli] fold {k}: {len(test)} answers scored, NLI on their sentences done", flush=True)
        log.info("fold %d: %d records scored, NLI done", k, len(test))
    summary = {"detector_fold_calibration": summarize([{"levels": f.fold_metrics["levels"],
                                                         "auroc": f.fold_metrics["auroc"]} for f in folds])}
    per_scorer = {}
    for scorer in SCORERS:
        per_scorer[scorer] = cross_fit(folds, scorer, hm)
        summary[scorer] = summarize(per_scorer[scorer])
    result = {"command": " ".join(["python -m eval.detector_nli", *(argv or sys.argv[1:])]),
              "explainer": str(args.explainer), "n_records": len(records), "folds": [f.fold for f in folds],
              "n_scored": sum(len(f.records) for f in folds),
              "hardware": hardware(), "seconds": round(time.time() - started, 1), "summary": summary,
              "per_fold": per_scorer}
    (out / "metrics.json").write_text(json.dumps(result, indent=2) + "\n")
    write_report(out / "report.md", result)
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
