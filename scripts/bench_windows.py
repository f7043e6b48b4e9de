"""Detector window plans measured: quality and work of each (overlap, max_windows) on the cross-validation folds.

    python scripts/bench_windows.py --cv-dir runs/detector-cv --config configs/detector.offline.yaml \
        --data-dir ../shared/data --plans 128:0,32:0,0:0,32:4,32:2,32:1,32:4:even --out runs/bench-windows

Each fold model of `eval.detector --cv` (RUN/fold-k, trained without its fold's sources, calibrated on its own
training sources) scores its held-out fold through the runtime (HaluGate's Detector stage, torch backend, the
fold's own calibration) under every plan `OVERLAP:MAX_WINDOWS[:FILL]` (window_overlap: the least context tokens
consecutive windows share; max_windows: keep only the windows sharing the most words with the answer, 0 = all;
window_fill: full (default), even (windows only as long as covering needs) or packed (one window of the
context sentences sharing the most words with the answer)).
Printed per plan, over all folds: example / span / token F1 and recall, the windows and tokens run (the
Detector's work), and the change against
the first plan (the reference); answers whose windows are the same as the reference's are not scored again.
Nothing here is tuned on the folds: the plans are fixed in the command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eval.detector_cv import add_fold_model_arguments, cv_records
from training.detector_scoring import _input, metrics_of, predict, runtime_gate


def parse_plans(text: str) -> list[tuple[int, int, str]]:
    plans = []
    for part in text.split(","):
        overlap, k, fill = (part.split(":") + ["", ""])[:3]
        plans.append((int(overlap), int(k or 0), fill or "full"))
    return plans


def window_key(gate, rec) -> tuple[tuple, int]:
    """The context-token ranges of the windows the gate would run for a record (its input to the model), and
    their total length in tokens."""
    try:
        windows = gate.prepare([_input(rec)])[0].windows or []
    except ValueError:  # refused (too long): the same under every plan
        return (), 0
    return tuple(w.context_token_range for w in windows), sum(len(w.input_ids) for w in windows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_fold_model_arguments(p)
    p.add_argument("--plans", default="128:0,32:0,0:0,32:4,32:2,32:1", help="OVERLAP:MAX_WINDOWS,... (first = reference)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    plans = parse_plans(args.plans)
    cv_dir, out = Path(args.cv_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    folds = sorted(d for d in cv_dir.glob("fold-*") if (d / "model.safetensors").is_file())
    if not folds:
        raise SystemExit(f"error: {cv_dir}: no fold-*/model.safetensors (run eval.detector --cv first)")
    k_folds = json.loads((cv_dir / "metrics.json").read_text())["k"] if (cv_dir / "metrics.json").is_file() else 5
    records, assignment, group_key = cv_records(args.config, args.data_dir, args.source, k_folds)
    rows = {plan: {"folds": [], "windows": 0, "tokens": 0, "seconds": 0.0} for plan in plans}
    for fold_dir in folds:
        k = int(fold_dir.name.split("-")[1])
        test = [r for r in records if assignment[group_key(r)] == k]
        ref_plan, ref_windows, ref_preds = None, None, None
        for overlap, max_windows, fill in plans:
            gate = runtime_gate(fold_dir, "torch", overrides=[
                f"hallucination_mitigation.hallucination_model.window_overlap={overlap}",
                f"hallucination_mitigation.hallucination_model.max_windows={max_windows}",
                f"hallucination_mitigation.hallucination_model.window_fill={fill}"])
            # only the answers whose windows differ from the reference plan's are scored again (most RAGTruth
            # contexts fit one window, where every plan is the same input)
            keyed = [window_key(gate, r) for r in test]
            windows = [key for key, _ in keyed]
            redo = [i for i in range(len(test)) if ref_windows is None or windows[i] != ref_windows[i]]
            started = time.perf_counter()
            fresh = predict(gate, [test[i] for i in redo])
            seconds = time.perf_counter() - started
            preds = list(ref_preds) if ref_preds is not None else [None] * len(test)
            for i, pr in zip(redo, fresh):
                preds[i] = pr
            if ref_plan is None:
                ref_plan, ref_windows, ref_preds = (overlap, max_windows, fill), windows, preds
            m = metrics_of(test, preds, gate.settings.hallucination_mitigation.hallucination_model,
                           gate.detector_calibration)
            row = rows[(overlap, max_windows, fill)]
            row["tokens"] += sum(n for _, n in keyed)
            row["folds"].append(m["levels"])
            row["windows"] += sum(pr.scores.windows for pr in preds if pr.scores is not None)
            row["rescored"] = row.get("rescored", 0) + len(redo)
            row["seconds"] += seconds
            print(f"[windows] fold {k} overlap={overlap} max_windows={max_windows} fill={fill}: example F1 "
                  f"{m['levels']['example']['overall']['f1']:.3f} span F1 {m['levels']['span']['overall']['f1']:.3f} "
                  f"({len(redo)} answers scored, {seconds:.0f} s)", flush=True)

    def mean(plan, level, key):
        return float(np.mean([f[level]["overall"][key] for f in rows[plan]["folds"]]))

    ref = plans[0]
    lines = [(f"Detector window plans on {len(folds)} CV folds of {args.source} ({len(records)} responses), "
             "each fold model on its held-out fold, torch backend, the fold's own calibration."), "",
             ("| overlap | max windows | fill | windows run | tokens run | example F1 | example recall | span F1 | "
              "span recall | token F1 | token recall | d span recall vs ref | answers re-scored |"),
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    summary = []
    for plan in plans:
        o, k, fill = plan
        r = {lvl: {key: round(mean(plan, lvl, key), 4) for key in ("f1", "recall")}
             for lvl in ("example", "span", "token")}
        d = r["span"]["recall"] - round(mean(ref, "span", "recall"), 4)
        summary.append({"overlap": o, "max_windows": k, "fill": fill, "windows": rows[plan]["windows"],
                        "tokens": rows[plan]["tokens"],
                        "seconds": round(rows[plan]["seconds"], 1), **r})
        lines.append(f"| {o} | {k or 'all'} | {fill} | {rows[plan]['windows']} | {rows[plan]['tokens']} | "
                     f"{r['example']['f1']:.3f} | "
                     f"{r['example']['recall']:.3f} | {r['span']['f1']:.3f} | {r['span']['recall']:.3f} | "
                     f"{r['token']['f1']:.3f} | {r['token']['recall']:.3f} | {d:+.3f} | {rows[plan].get('rescored', 0)} |")
    md = "\n".join(lines) + "\n"
    (out / "windows.md").write_text(md)
    (out / "windows.json").write_text(json.dumps({"command": " ".join(sys.argv), "plans": summary}, indent=2) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
