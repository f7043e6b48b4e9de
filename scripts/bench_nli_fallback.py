"""The Explainer stage on real RAGTruth answers: int8 with its fp32 fallback for near-ties against fp32 alone.

    python scripts/bench_nli_fallback.py --explainer runs/explainer-mpnet-s31-onnx --data-dir ../shared/data \
        [--sentinel runs/demo/export/sentinel] [--detector runs/demo/export/detector] [--n 40]

Both gates share the Sentinel and Detector exports (the Sentinel threshold 0, so every answer is checked); the
second pins the Explainer to model.onnx (`nli_model.onnx_file`). Each answer (local RAGTruth responses with a
context, read by the `ragtruth_test_subset` adapter, shuffled with seed 0) goes through both in random order.
Prints the share of Explainer pairs answered by fp32, whether every span got the same NLI label, and the
Explainer stage's mean / p50 / total time per gate. Timing on a busy machine measures the other work too: run it
alone.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.detect import HaluGate
from training.data.spans import SpanDataReport, load_span_source


def answers(data_dir: Path, n: int) -> list[dict]:
    """`n` local RAGTruth responses with their context, read by the project's adapter (cleaned and deduplicated as
    training and evaluation read them), shuffled with seed 0."""
    if not (data_dir / "ragtruth_test_subset").is_dir():
        raise SystemExit(f"{data_dir / 'ragtruth_test_subset'}: not found (pass --data-dir or set HALUGATE_DATA_DIR)")
    records = load_span_source("ragtruth_test_subset", data_dir, SpanDataReport())
    records = sorted(records, key=lambda r: r.id)
    random.Random(0).shuffle(records)
    return [{"context": r.context, "question": r.question or None, "answer": r.answer} for r in records[:n]]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--explainer", required=True, help="Explainer export dir with int8_fallback.json")
    p.add_argument("--sentinel", default="runs/demo/export/sentinel")
    p.add_argument("--detector", default="runs/demo/export/detector")
    p.add_argument("--data-dir", default=os.environ.get("HALUGATE_DATA_DIR", "../shared/data"))
    p.add_argument("--n", type=int, default=40, help="answers (default 40)")
    args = p.parse_args(argv)
    if not (Path(args.explainer) / "int8_fallback.json").is_file():
        raise SystemExit(f"{args.explainer}: no int8_fallback.json (its int8 ships without a fallback, or not at all)")
    items = answers(Path(args.data_dir), args.n)
    base = ["hallucination_mitigation.fact_check_model.threshold=0.0"]
    variants = {"int8+fallback": [], "fp32": ["hallucination_mitigation.nli_model.onnx_file=model.onnx"]}
    gates = {name: HaluGate.from_dirs(sentinel=args.sentinel, detector=args.detector, explainer=args.explainer,
                                      overrides=base + extra) for name, extra in variants.items()}
    for gate in gates.values():
        if gate.load_errors:
            raise SystemExit(f"models did not load: {gate.load_errors}")
        gate.detect(**items[0])  # warm-up
    runner = gates["int8+fallback"].runners["explainer"]
    runner.rows_run = runner.rows_fallback = 0
    times: dict[str, list[float]] = {k: [] for k in gates}
    labels: dict[str, list] = {k: [] for k in gates}
    order = random.Random(1)
    for item in items:
        for name in order.sample(list(gates), len(gates)):
            result = gates[name].detect(**item)
            times[name].append(result.timings_ms["explainer"])
            labels[name].append([s.nli_label for s in result.spans])
    spans = sum(len(x) for x in labels["fp32"])
    print(f"{len(items)} RAGTruth answers, {spans} spans explained; Explainer pairs {runner.rows_run}, answered by "
          f"fp32 {runner.rows_fallback} ({runner.rows_fallback / max(1, runner.rows_run):.1%}); same NLI label on "
          f"every span: {labels['fp32'] == labels['int8+fallback']}; load average {os.getloadavg()[0]:.2f}")
    for name, t in times.items():
        print(f"{name:14s} Explainer stage mean {statistics.mean(t):.1f} ms, p50 {statistics.median(t):.1f} ms, "
              f"total {sum(t) / 1000:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
