"""Does a smaller Detector window budget change any spans? The shipped plan against fewer windows, through the
runtime, on the latency benchmark's inputs and on RAGTruth answers (their own contexts and buried in 2K tokens).

    python scripts/window_budget_check.py --model runs/demo/export/detector --data ragtruth_test_subset \
        --data-dir ../shared/data --max-windows 4,3,2 --lengths 0,2048 --out runs/window-budget

Each plan is `hallucination_model.max_windows=K` (the first K is the reference, the runtime default); everything
else is the runtime's default (the Detector's own calibration, `precision: auto`). Per (inputs, length, K):
the windows run (the Detector's work), the answers whose spans are exactly the reference's, the flagged
characters unlike the reference's, and on RAGTruth example / span / token F1 against the gold spans
(training.span_metrics via eval.detector's scoring). Length 0: each answer's own context; L > 0: the context
with passages of other records around it (seeded) until it has L Detector tokens, as
scripts/bench_long_context.py builds them. The benchmark inputs are scripts/bench_latency.py's (seeds
0..--bench-inputs-1) at 2K and 4K tokens, with the runtime's own calibration (no fixed threshold).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_latency import make_input
from bench_long_context import padded_context

from eval.detector import load_eval_records
from inference.hardware import cpu_info
from training.data.records import SpanRecord
from training.detector_scoring import evaluate, runtime_gate


def char_set(spans) -> set[int]:
    return {i for s in spans for i in range(s["start"], s["end"])}


def compare(ref_preds, preds) -> dict:
    same = sum([(s["start"], s["end"]) for s in a.spans] == [(s["start"], s["end"]) for s in b.spans]
               for a, b in zip(ref_preds, preds))
    ref_chars = sum(len(char_set(p.spans)) for p in ref_preds)
    diff = sum(len(char_set(a.spans) ^ char_set(b.spans)) for a, b in zip(ref_preds, preds))
    return {"same_spans": same, "answers": len(preds), "flagged_chars_unlike_reference": diff,
            "reference_flagged_chars": ref_chars}


def run_plans(model: str, records: list[SpanRecord], budgets: list[int], gold: bool) -> list[dict]:
    rows, ref = [], None
    for k in budgets:
        gate = runtime_gate(model, "onnx", precision="auto",
                            overrides=[f"hallucination_mitigation.hallucination_model.max_windows={k}"])
        started = time.perf_counter()
        result, preds = evaluate(gate, records)
        seconds = time.perf_counter() - started
        windows = [p.scores.windows for p in preds if p.scores is not None]
        row = {"max_windows": k, "windows_run": sum(windows), "max_windows_per_answer": max(windows, default=0),
               "answers_cut": sum(w >= k for w in windows) if k else 0, "seconds": round(seconds, 1),
               "file": gate.runners["detector"].onnx_path.name}
        if gold:
            row["f1"] = {lvl: round(100 * result["levels"][lvl]["overall"]["f1"], 1)
                         for lvl in ("example", "span", "token")}
        if ref is None:
            ref = preds
        row.update(compare(ref, preds))
        rows.append(row)
        print(f"  max_windows={k}: windows {row['windows_run']} (max {row['max_windows_per_answer']}/answer), same "
              f"spans {row['same_spans']}/{row['answers']}, flagged chars unlike the reference "
              f"{row['flagged_chars_unlike_reference']} of {row['reference_flagged_chars']}"
              + (f", F1 example/span/token {row['f1']['example']}/{row['f1']['span']}/{row['f1']['token']}"
                 if gold else "") + f", {seconds:.0f} s", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="Detector export dir")
    p.add_argument("--data", default="ragtruth_test_subset")
    p.add_argument("--data-dir")
    p.add_argument("--max-windows", default="4,3,2", help="budgets; the first is the reference")
    p.add_argument("--lengths", default="0,2048", help="RAGTruth context lengths (0: the record's own)")
    p.add_argument("--bench-lengths", default="2048,4096")
    p.add_argument("--bench-inputs", type=int, default=16)
    p.add_argument("--limit", type=int, help="the first N RAGTruth records only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    budgets = [int(x) for x in args.max_windows.split(",")]
    print(f"CPU: {cpu_info().describe()}", flush=True)
    report = {"command": " ".join(sys.argv), "cpu": cpu_info().describe(), "model": args.model, "bench": {},
              "ragtruth": {}}
    tok = runtime_gate(args.model, "onnx", precision="fp32").runners["detector"].tokenizer
    for length in [int(x) for x in args.bench_lengths.split(",") if x]:
        inputs = [make_input(tok, length, seed) for seed in range(args.bench_inputs)]
        records = [SpanRecord(context="\n\n".join(x["context"]), question=x["question"], answer=x["answer"],
                              id=f"bench-{length}-{i}") for i, x in enumerate(inputs)]
        print(f"benchmark inputs at {length} tokens ({len(records)}):", flush=True)
        report["bench"][str(length)] = run_plans(args.model, records, budgets, gold=False)
    records, _ = load_eval_records(args.data, args.data_dir)
    records = records[: args.limit] if args.limit else records
    contexts = [r.context for r in records]
    for length in [int(x) for x in args.lengths.split(",") if x]:
        rng = random.Random(args.seed)
        recs = [dataclasses.replace(r, context=padded_context(r.context, contexts, tok, length, rng)) for r in records]
        print(f"{args.data} at {'its own context' if length == 0 else f'{length} tokens'} ({len(recs)}):", flush=True)
        report["ragtruth"][str(length)] = run_plans(args.model, recs, budgets, gold=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "window_budget.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
