"""The default precision against fp32 and int8 forced, the full stack per context length, calls interleaved.

    python scripts/bench_precision.py --exports runs/demo/export --lengths 512,2048,4096 --reps 20 \
        --out runs/bench-precision/interleaved.json

Three HaluGates on the same export dirs (sentinel / detector / explainer under --exports): `precision: auto`
(the default: the faster of fp32 and the shipped int8 per model on this CPU, inference.precision, with a cache of
its own under OUT's folder so it measures here), fp32 forced and int8 forced. Per context length (the inputs of
scripts/bench_latency.py, batch 1, every stage run: Sentinel threshold 0, Detector threshold 0.1 with min
window aggregation, as its README command) the three run in turn, one call each per round, so that a change of
machine load hits all three alike (bench_latency.py times one backend after the other). Printed: p50 of the
whole stack and of the Detector per variant, and the default's p50 over the fastest variant's (target <= 1.05).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_latency import make_input

from inference.detect import HaluGate
from inference.hardware import cpu_info

OVERRIDES = ["hallucination_mitigation.fact_check_model.threshold=0.0",
             "hallucination_mitigation.hallucination_model.use_model_calibration=false",
             "hallucination_mitigation.hallucination_model.threshold=0.1",
             "hallucination_mitigation.hallucination_model.window_aggregation=min",
             "hallucination_mitigation.hallucination_model.min_span_confidence=0.0",
             "hallucination_mitigation.nli_model.max_pair_tokens=256"]
VARIANTS = ("auto", "fp32", "int8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--exports", default="runs/demo/export", help="folder with sentinel/, detector/, explainer/")
    p.add_argument("--lengths", default="512,2048,4096")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", required=True, help="JSON report (a precision cache goes beside it)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.environ["HALUGATE_CACHE_DIR"] = str(out.parent / "precision-cache")
    os.environ["HALUGATE_PRECISION_RETIME"] = "1"  # the default decides here, now
    cpu = cpu_info()
    load_start = [round(x, 2) for x in os.getloadavg()]
    print(f"CPU: {cpu.describe()}; load average at start {load_start}", flush=True)
    root = Path(args.exports)
    gates = {}
    for v in VARIANTS:
        gates[v] = HaluGate.from_dirs(detector=root / "detector", sentinel=root / "sentinel",
                                      explainer=root / "explainer", precision=v, overrides=OVERRIDES)
        if gates[v].load_errors:
            print(f"error: {v}: {gates[v].load_errors}", file=sys.stderr)
            return 2
    decisions = {s: r.precision_decision.as_dict() for s, r in gates["auto"].runners.items() if r is not None}
    for s, d in decisions.items():
        print(f"default {s}: {d['precision']} ({d['reason']}; fp32 {d['fp32_ms']} ms, int8 {d['int8_ms']} ms)")
    tok = gates["fp32"].runners["detector"].tokenizer
    rows = []
    print("\n| context tokens | variant | files | stack p50 ms | Detector p50 ms | stack p50 / fastest |\n"
          "|---:|---|---|---:|---:|---:|")
    for length in [int(x) for x in args.lengths.split(",")]:
        x = make_input(tok, length, 0)
        for g in gates.values():
            g.detect(**x)  # warm-up
        times = {v: {"total": [], "detector": []} for v in VARIANTS}
        for rep in range(args.reps):
            order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
            for v in order:
                r = gates[v].detect(**x)
                times[v]["total"].append(r.timings_ms["total"])
                times[v]["detector"].append(r.timings_ms["detector"])
        p50 = {v: {k: round(float(np.median(t)), 1) for k, t in times[v].items()} for v in VARIANTS}
        fastest = min(p50[v]["total"] for v in VARIANTS)
        for v in VARIANTS:
            files = "/".join(("int8" if r.precision == "int8" else "fp32") for r in gates[v].runners.values() if r)
            row = {"context_tokens": length, "variant": v, "files_sentinel_detector_explainer": files,
                   "stack_p50_ms": p50[v]["total"], "detector_p50_ms": p50[v]["detector"],
                   "over_fastest": round(p50[v]["total"] / fastest, 3), "n": args.reps}
            rows.append(row)
            print(f"| {length} | {v} | {files} | {row['stack_p50_ms']} | {row['detector_p50_ms']} | "
                  f"{row['over_fastest']:.3f} |", flush=True)
    report = {"command": " ".join(sys.argv), "cpu": {**cpu.as_dict(), "description": cpu.describe()},
              "load_average_start": load_start, "load_average_end": [round(x, 2) for x in os.getloadavg()],
              "decisions": decisions, "rows": rows}
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nload average at end {report['load_average_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
