"""Latency of exported models: ONNX fp32 and int8 against PyTorch eager, same inputs, on this CPU.

    python scripts/bench_export.py EXPORT_DIR [EXPORT_DIR ...] [--lengths 128 512] [--batches 1 8]
                                   [--threads N] [--budget 12] [--agreement-samples 500] [--json OUT.json]
    python scripts/bench_export.py            # no export given: builds one from offline:minilm (untrained head)

Each EXPORT_DIR comes from `python -m training.export ... --quantize int8`; its export_report.json names the
run dir whose PyTorch model is the eager reference (--torch-dir overrides it for a single export).

Inputs: real text (the run's test.jsonl, else built-in sentences) packed to exactly L tokens per sequence, so
every position is a real token (no padding). Per (L, batch) cell each backend gets 3 warm-up calls, then rounds
of one timed call per backend in shuffled order (fair on a shared CPU) for about --budget seconds per backend
(at least --min-repeats rounds). p99 over fewer than 100 calls is close to the maximum. Label agreement (int8 vs PyTorch, fp32 vs PyTorch) is measured on up to --agreement-samples test.jsonl
records at their natural length. Threads: torch and onnxruntime both use --threads (default: all cores).

Sequence classifiers are also timed through the runtime (inference.runners, batches of 16 sorted by length) on
those records: fp32, int8 alone and, when the export ships an fp32 fallback for int8's near-ties
(int8_fallback.json), int8 with it; each a whole pass over the records, in interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.hardware import cpu_info
from training.export import (
    FP32_FILE,
    INT8_FILE,
    compare,
    encode_batches,
    export,
    load_run_model,
    onnx_session,
    parity_examples,
    run_max_length,
    session_feed,
    torch_logits,
)
from training.models import build_model, load_tokenizer, resolve_base_model


def packed_inputs(tokenizer, texts: list[str], length: int, batch: int) -> dict[str, np.ndarray]:
    """`batch` rows of exactly `length` real tokens: [CLS] text text ... [SEP], cycling through the texts."""
    ids = [i for t in texts for i in tokenizer(t, add_special_tokens=False)["input_ids"]]
    if not ids:
        raise SystemExit("no tokens in the benchmark texts")
    cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    rows, pos = [], 0
    body = length - 2
    for _ in range(batch):
        chunk = [ids[(pos + k) % len(ids)] for k in range(body)]
        pos += body
        rows.append([cls_id, *chunk, sep_id])
    input_ids = np.asarray(rows, dtype=np.int64)
    out = {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids)}
    if "token_type_ids" in tokenizer.model_input_names:
        out["token_type_ids"] = np.zeros_like(input_ids)
    return out


def time_interleaved(fns: dict, budget: float, min_repeats: int, warmup: int = 3) -> dict[str, list[float]]:
    """Round-robin timing (ms per call): each round calls every backend once in a shuffled order, so that load
    from other processes on a shared CPU hits all backends alike instead of whichever ran during a spike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    rng = random.Random(0)
    start = time.perf_counter()
    rounds = 0
    while rounds < min_repeats or (time.perf_counter() - start < budget * len(fns) and rounds < 1000):
        order = list(fns)
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append((time.perf_counter() - t0) * 1000)
        rounds += 1
    return times


def pcts(times: list[float]) -> tuple[float, float]:
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def dir_mb(path: Path, pattern: str) -> float:
    return round(sum(p.stat().st_size for p in path.glob(pattern)) / 2**20, 1)


def torch_size(run_dir: Path, model) -> dict[str, float]:
    if any(run_dir.glob("*.safetensors")):
        return {"torch (safetensors)": dir_mb(run_dir, "*.safetensors")}
    # Adapter-only run dir: the merged model exists only in memory.
    return {"torch (merged fp32 params)": round(sum(p.numel() * p.element_size() for p in model.parameters())
                                                / 2**20, 1)}


def bench_one(export_dir: Path, torch_dir: Path | None, args) -> dict:
    import torch

    report = json.loads((export_dir / "export_report.json").read_text())
    run_dir = torch_dir or Path(report["run_dir"])
    model, tokenizer, task, _ = load_run_model(run_dir)
    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    sessions = {"onnx-fp32": onnx_session(export_dir / FP32_FILE, threads)}
    if (export_dir / INT8_FILE).is_file():
        sessions["onnx-int8"] = onnx_session(export_dir / INT8_FILE, threads)
    else:
        print(f"  {export_dir}: no {INT8_FILE}; export with --quantize int8 to compare int8", file=sys.stderr)

    # Label agreement on real records at natural length.
    examples, source = parity_examples(run_dir, args.agreement_samples, seed=1)
    batches = encode_batches(tokenizer, examples, run_max_length(run_dir, model, None), batch_size=16)
    reference = torch_logits(model, batches)
    agreement = {}
    for name, sess in sessions.items():
        got = [sess.run(["logits"], session_feed(sess, b))[0] for b in batches]
        n, max_diff, _, agree = compare(reference, got, batches, task)
        agreement[name] = {"label_agreement": agree, "max_abs_diff": max_diff, "n_compared": n}

    runtime = runtime_passes(export_dir, examples, reference, threads, args) if task == "sequence" else None

    cells = []
    texts = [" ".join(ex) for ex in examples] or ["hello world"]
    for length in args.lengths:
        for batch in args.batches:
            feed = packed_inputs(tokenizer, texts, length, batch)
            torch_feed = {k: torch.from_numpy(v) for k, v in feed.items()
                          if k in ("input_ids", "attention_mask", "token_type_ids")
                          and k in tokenizer.model_input_names}

            def run_torch(feed=torch_feed):
                with torch.inference_mode():
                    model(**feed)

            fns = {"torch": run_torch}
            for name, sess in sessions.items():
                sess_feed = session_feed(sess, feed)
                fns[name] = lambda s=sess, f=sess_feed: s.run(["logits"], f)
            times = time_interleaved(fns, args.budget, args.min_repeats)
            row = {"seq_len": length, "batch": batch, "calls": len(times["torch"])}
            row.update({name: pcts(t) for name, t in times.items()})
            cells.append(row)
            print(format_row(export_dir.name, row), flush=True)
    return {
        "export_dir": str(export_dir), "run_dir": str(run_dir), "task": task,
        "model_type": model.config.model_type, "agreement_source": source, "n_agreement": len(examples),
        "agreement": agreement, "cells": cells, "runtime": runtime,
        "size_mb": {**torch_size(run_dir, model),
                    "onnx-fp32": dir_mb(export_dir, FP32_FILE), "onnx-int8": dir_mb(export_dir, INT8_FILE)},
    }


def runtime_passes(export_dir: Path, examples, reference, threads: int, args) -> dict | None:
    """Whole passes of the runtime runner over the records: fp32, int8 alone, int8 with its fp32 fallback."""
    from inference.runners import FALLBACK_FILE, load_runner

    if not examples or not (export_dir / INT8_FILE).is_file():
        return None
    inputs = [ex if len(ex) > 1 else ex[0] for ex in examples]
    expected = np.concatenate(reference).argmax(-1)
    runners = {"fp32": load_runner(export_dir, "sequence", precision="fp32", num_threads=threads, batch_size=16),
               "int8 alone": load_runner(export_dir, "sequence", precision="int8", num_threads=threads,
                                         batch_size=16, fallback=False)}
    if (export_dir / FALLBACK_FILE).is_file():
        runners["int8 + fp32 fallback"] = load_runner(export_dir, "sequence", precision="int8",
                                                      num_threads=threads, batch_size=16)
    agreement = {k: float((r.classify(inputs).argmax(-1) == expected).mean()) for k, r in runners.items()}
    times = time_interleaved({k: (lambda r=r: r.classify(inputs)) for k, r in runners.items()},
                             args.budget, min_repeats=3, warmup=1)
    out = {"n_records": len(inputs), "agreement_vs_torch": agreement,
           "pass_ms_p50": {k: pcts(t)[0] for k, t in times.items()}}
    fallback = runners.get("int8 + fp32 fallback")
    if fallback is not None:
        out["fallback_share"] = fallback.rows_fallback / max(1, fallback.rows_run)
        out["fallback_margin"] = fallback.fallback_margin
    p50 = out["pass_ms_p50"]
    print(f"  runtime, {len(inputs)} records in batches of 16: " + "; ".join(
        f"{k} {p50[k]:.0f} ms ({p50['fp32'] / p50[k]:.2f}x fp32), agreement {agreement[k]:.4f}" for k in runners)
          + (f"; {100 * out['fallback_share']:.1f}% answered by fp32" if fallback is not None else ""), flush=True)
    return out


HEADER = ("| model | tokens | batch | torch p50 / p99 ms | fp32 p50 / p99 ms | int8 p50 / p99 ms "
          "| fp32 vs torch | int8 vs fp32 | int8 vs torch |")


def format_row(name: str, row: dict) -> str:
    t, f = row["torch"], row["onnx-fp32"]
    i = row.get("onnx-int8")
    cell = lambda x: f"{x[0]:.1f} / {x[1]:.1f}" if x else "-"
    ratio = lambda a, b: f"{a[0] / b[0]:.2f}x" if a and b else "-"
    return (f"| {name} | {row['seq_len']} | {row['batch']} | {cell(t)} | {cell(f)} | {cell(i)} "
            f"| {ratio(t, f)} | {ratio(f, i)} | {ratio(t, i)} |")


def build_default_export(workdir: Path) -> Path:
    """No export given: offline:minilm with an untrained 2-label head -> run dir -> export with int8."""
    base = resolve_base_model("offline:minilm")
    run = workdir / "minilm-untrained-run"
    model = build_model(base, "sequence", ["A", "B"])
    model.save_pretrained(run, safe_serialization=True)
    load_tokenizer(base).save_pretrained(run)
    (run / "label_map.json").write_text(json.dumps({"labels": ["A", "B"]}))
    out = workdir / "minilm-untrained-export"
    # An untrained head has near-tied logits, so int8 may flip labels: record, do not gate, its agreement.
    export(run, out, quantize="int8", agreement_floor=0.0)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("exports", nargs="*", help="export dirs (python -m training.export ... --quantize int8)")
    p.add_argument("--torch-dir", help="PyTorch run dir (default: run_dir from export_report.json)")
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--threads", type=int, default=0, help="intra-op threads for torch and onnxruntime")
    p.add_argument("--budget", type=float, default=12.0, help="seconds of timed calls per backend and cell")
    p.add_argument("--min-repeats", type=int, default=10)
    p.add_argument("--agreement-samples", type=int, default=500)
    p.add_argument("--json", help="write all figures to this JSON file")
    args = p.parse_args(argv)
    if args.torch_dir and len(args.exports) != 1:
        p.error("--torch-dir needs exactly one export dir")

    import onnxruntime
    import torch

    hw = (f"{cpu_info().describe()}, threads={args.threads or os.cpu_count()}, "
          f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, "
          f"load average {os.getloadavg()[0]:.1f} at start")
    print(f"hardware: {hw}\n\n{HEADER}\n|" + "---|" * 9, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        exports = [Path(e) for e in args.exports] or [build_default_export(Path(tmp))]
        results = [bench_one(e, Path(args.torch_dir) if args.torch_dir else None, args) for e in exports]
    print()
    for r in results:
        agree = ", ".join(f"{k} {v['label_agreement']:.4f} (max |diff| {v['max_abs_diff']:.2g})"
                          for k, v in r["agreement"].items())
        sizes = ", ".join(f"{k} {v} MB" for k, v in r["size_mb"].items())
        print(f"{Path(r['export_dir']).name}: label agreement vs torch on {r['n_agreement']} records "
              f"({r['agreement_source']}): {agree}; size on disk: {sizes}")
        int8_ok = [c["onnx-fp32"][0] / c["onnx-int8"][0] for c in r["cells"] if "onnx-int8" in c]
        if int8_ok:
            ag = r["agreement"].get("onnx-int8", {}).get("label_agreement", 0.0)
            print(f"  target int8 >= 1.3x faster than fp32 with agreement >= 0.99: speedup "
                  f"{min(int8_ok):.2f}x-{max(int8_ok):.2f}x, agreement {ag:.4f} -> "
                  f"{'met' if min(int8_ok) >= 1.3 and ag >= 0.99 else 'NOT met'}")
        rt = r.get("runtime") or {}
        if "int8 + fp32 fallback" in rt.get("pass_ms_p50", {}):
            ms, ag = rt["pass_ms_p50"], rt["agreement_vs_torch"]["int8 + fp32 fallback"]
            print(f"  int8 + fp32 fallback through the runtime: {ms['fp32'] / ms['int8 + fp32 fallback']:.2f}x "
                  f"fp32 on {rt['n_records']} records, agreement {ag:.4f}, {100 * rt['fallback_share']:.1f}% "
                  "answered by fp32")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"hardware": hw, "cpu": cpu_info().as_dict(), "args": vars(args),
                                               "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
