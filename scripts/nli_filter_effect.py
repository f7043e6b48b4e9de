"""What the Explainer's filter does to the full stack on held-out RAGTruth responses.

Each fold model of a Detector cross-validation (`python -m eval.detector --cv K ... --out CV_DIR`) scores the
responses of its own held-out fold through `HaluGate.detect_batch` (Detector + Explainer stages, torch), three
ways: the Detector alone (no Explainer), with the NLI filter that drops entailed spans but without the exact-check
guard (`hallucination_model.keep_ungrounded=false`), and with both (the runtime default). Prints span and example
P / R / F1 per fold and pooled, and how many spans each variant keeps.

    python scripts/nli_filter_effect.py --cv-dir runs/detector-cv-demo-s15 --explainer runs/demo/explainer \
        --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.detector_stage import load_detector_json
from training.data.spans import SpanDataReport, load_span_source
from training.detector_scoring import runtime_gate
from training.span_metrics import Scored, example_level, span_level

VARIANTS = {
    "detector only": ["hallucination_mitigation.nli_model.model_id="],
    "+ NLI filter, no exact-check guard": ["hallucination_mitigation.hallucination_model.keep_ungrounded=false"],
    "+ NLI filter + exact-check guard (default)": [],
}


def gate_for(fold_dir: Path, explainer: str, overrides: list[str]):
    """The evaluation's runtime gate (no Sentinel: every response is checked) with the fold's own calibration,
    plus the Explainer unless `overrides` take it out again."""
    gate = runtime_gate(fold_dir, overrides=[f"hallucination_mitigation.nli_model.model_id={explainer}", *overrides],
                        calibration=load_detector_json(fold_dir)[0])
    if gate.load_errors:
        raise SystemExit(f"error: {fold_dir}: {gate.load_errors}")
    return gate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cv-dir", type=Path, required=True, help="output of eval.detector --cv (fold-0 ...)")
    ap.add_argument("--explainer", required=True, help="Explainer run dir (torch)")
    ap.add_argument("--data-dir", default=os.environ.get("HALUGATE_DATA_DIR"))
    ap.add_argument("--source", default="ragtruth_test_subset")
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args(argv)
    folds = sorted(args.cv_dir.glob("fold-*"))
    if not folds or not args.data_dir:
        print(f"error: --cv-dir {args.cv_dir} has no fold-* dirs, or no --data-dir", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)
    records = {r.id: r for r in load_span_source(args.source, args.data_dir, SpanDataReport()) if r.context}
    pooled: dict[str, list[Scored]] = {v: [] for v in VARIANTS}
    per_fold: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for fold in folds:
        ids = [json.loads(line)["id"] for line in (fold / "predictions.jsonl").open()]
        held = [records[i] for i in ids if i in records]
        inputs = [{"context": r.context, "question": r.question, "answer": r.answer, "task_type": r.task_type}
                  for r in held]
        for name, overrides in VARIANTS.items():
            gate = gate_for(fold, args.explainer, overrides)
            results = [x for b in range(0, len(inputs), args.batch) for x in gate.detect_batch(inputs[b:b + args.batch])]
            items = [Scored(r.task_type, r.spans, [{"start": s.start, "end": s.end} for s in res.spans])
                     for r, res in zip(held, results)]
            pooled[name].extend(items)
            per_fold[name].append(span_level(items)["f1"] * 100)
        print(f"{fold.name}: span F1 " + ", ".join(f"{v} {x[-1]:.1f}" for v, x in per_fold.items()), flush=True)
    print("\n| variant | span P / R / F1 (pooled) | span F1 per fold, mean ± std | example F1 | spans kept |\n"
          "|---|---|---|---|---|")
    for name, items in pooled.items():
        s, e, f = span_level(items), example_level(items), per_fold[name]
        spread = f"{statistics.mean(f):.1f} ± {statistics.stdev(f):.1f}" if len(f) > 1 else f"{f[0]:.1f}"
        print(f"| {name} | {s['precision'] * 100:.1f} / {s['recall'] * 100:.1f} / {s['f1'] * 100:.1f} | {spread} | "
              f"{e['f1'] * 100:.1f} | {sum(len(i.pred_spans) for i in items)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
