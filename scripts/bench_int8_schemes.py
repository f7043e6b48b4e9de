"""The int8 schemes training.export can write, timed against fp32 on this CPU, per model (ONNX graph alone).

    python scripts/bench_int8_schemes.py runs/demo/export/sentinel runs/demo/export/detector \
        runs/demo/export/explainer --runs 10 --json runs/bench-int8-schemes/schemes.json

For each export dir: model.onnx (fp32), the shipped model_quantized.onnx (the scheme its export_report.json
names), and two files written here from model.onnx with training.onnx_graph: `all` (dynamic u8s8: uint8
activations with one scale per tensor and call, int8 weights per channel, MatMulInteger / QAttention, embeddings
int8) and `blockwise_int8` (MatMulNBits: 8-bit weights with a scale per block of 128 inputs, activations
quantised per row and block; attention and embeddings fp32). Each (file, input shape) is timed like the
runtime's `precision: auto` (inference.precision): onnxruntime sessions with the runtime's options (all graph
optimisations, one thread per physical core, no spinning), one warm-up call each, then --runs rounds of one
call per file in turn; the median per file and its ratio to fp32. Agreement is not measured here (the export's
check decides what ships; docs/export.md); this says what each scheme costs on the CPU printed at the top.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inference.hardware import cpu_info
from inference.precision import model_vocab_size, time_sessions, timing_feeds
from inference.runners import FP32_FILES, INT8_FILES
from training.onnx_graph import BLOCKWISE_SCHEME, quantize_int8

SHAPES = {"token": [(1, 512), (4, 512)], "sequence": [(1, 64), (8, 128)]}


def session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def shipped_scheme(export_dir: Path) -> str:
    """The scheme the export's report says its int8 file was built with."""
    try:
        report = json.loads((export_dir / "export_report.json").read_text())
    except (OSError, ValueError):
        return "?"
    passed = [str(t.get("scheme")) for t in report.get("int8_schemes_tried") or [] if t.get("passed")]
    return " + ".join(passed) or "?"  # e.g. "ffn_output_fp32 + kept_blockwise"


def bench(export_dir: Path, tmp: Path, runs: int, threads: int) -> dict:
    fp32 = next(export_dir / n for n in FP32_FILES if (export_dir / n).is_file())
    files = {"fp32": fp32}
    shipped = next((export_dir / n for n in INT8_FILES if (export_dir / n).is_file()), None)
    if shipped is not None:
        files["shipped int8"] = shipped
    for scheme, label in (("all", "dynamic u8s8, every product (all)"), (BLOCKWISE_SCHEME, "blockwise MatMulNBits")):
        dst = tmp / f"{export_dir.name}-{scheme}.onnx"
        quantize_int8(fp32, dst, scheme)
        files[label] = dst
    sessions = {name: session(path, threads) for name, path in files.items()}
    task = "token" if len(sessions["fp32"].get_outputs()[0].shape) == 3 else "sequence"
    vocab = model_vocab_size(export_dir)
    cells = []
    for shape in SHAPES[task]:
        feeds = {name: timing_feeds(s, shape, vocab) for name, s in sessions.items()}
        times = time_sessions(sessions, feeds, runs=runs)
        med = {name: round(statistics.median(t), 2) for name, t in times.items()}
        cells.append({"shape": list(shape), "median_ms": med,
                      "speedup_vs_fp32": {n: round(med["fp32"] / m, 2) for n, m in med.items()}})
        print(f"{export_dir.name:10s} {task:8s} {shape[0]}x{shape[1]:<4d} " + "  ".join(
            f"{n}: {m:.1f} ms ({med['fp32'] / m:.2f}x)" for n, m in med.items()), flush=True)
    return {"export": str(export_dir), "task": task, "files": {n: p.name for n, p in files.items()},
            "shipped_scheme": shipped_scheme(export_dir) if shipped is not None else None,
            "size_mb": {n: round(p.stat().st_size / 2**20, 1) for n, p in files.items()}, "cells": cells}


def markdown(report: dict) -> str:
    columns = list(dict.fromkeys(n for r in report["results"] for n in r["files"]))
    lines = [(f"CPU: {report['cpu']['description']}; threads {report['threads']}; load average at start "
             f"{report['load_average_start']}; onnxruntime {report['onnxruntime']}; median of {report['runs']} "
             "alternating calls, ms (speed-up against fp32)"), "",
             "| model | input | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
    for r in report["results"]:
        for c in r["cells"]:
            lines.append(f"| {Path(r['export']).name} | {c['shape'][0]} x {c['shape'][1]} | " + " | ".join(
                f"{c['median_ms'][n]:.1f} ({c['speedup_vs_fp32'][n]:.2f}x)" if n in c["median_ms"] else "-"
                for n in columns) + " |")
    lines += ["", "Shipped int8 files: " + "; ".join(f"{Path(r['export']).name} {r['shipped_scheme']}"
                                                   for r in report["results"] if r.get("shipped_scheme"))]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("exports", nargs="+", help="export dirs (model.onnx, optionally model_quantized.onnx)")
    p.add_argument("--runs", type=int, default=10, help="timed calls per file and shape (after a warm-up)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: the physical cores, as the runtime)")
    p.add_argument("--json", help="write the figures here (and a .md beside it)")
    args = p.parse_args(argv)
    for e in args.exports:
        if not (Path(e) / "model.onnx").is_file():
            print(f"error: {e}: no model.onnx (an export dir of training.export is needed)", file=sys.stderr)
            return 2
    import onnxruntime

    cpu = cpu_info()
    threads = args.threads or cpu.physical_cores
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"CPU: {cpu.describe()}; threads {threads}; load average {load}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = [bench(Path(e), Path(tmp), args.runs, threads) for e in args.exports]
    report = {"cpu": {**cpu.as_dict(), "description": cpu.describe()}, "threads": threads, "runs": args.runs,
              "load_average_start": load, "load_average_end": [round(x, 2) for x in os.getloadavg()],
              "onnxruntime": onnxruntime.__version__, "results": results}
    md = markdown(report)
    print("\n" + md)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        out.with_suffix(".md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
