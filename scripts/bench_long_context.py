"""Detector quality as the context grows: each CV fold model on its held-out answers, their context buried among
unrelated passages, under each window aggregation and window budget.

    python scripts/bench_long_context.py --cv-dir runs/detector-cv --config configs/detector.offline.yaml \
        --data-dir ../shared/data --lengths 0,2048,4096 --max-windows 0,4,2 --out runs/bench-long-context

Why: RAGTruth contexts mostly fit one or two Detector windows, so the calibration's choice between `max` and
`min` window aggregation (and the `max_windows` budget, which only `min` allowed before 2026-12-03) is made and measured almost
without long contexts, while applications send 2-4K-token contexts. Here every held-out answer of a fold keeps
its own context (so its gold spans stay right) with passages of other held-out sources of the same fold added
around it (its position drawn at random, seeded) until the context has LENGTH Detector tokens (0: the original
context). The answer's support is still all there; only what the Detector has to read around it grows.

Every window of a padded input is scored once (the runtime's window plan, torch backend); `max_windows` keeps
the windows the runtime would keep (`inference.windowing.select_windows`), and each aggregation applies the
calibration the recipe's search picks when that aggregation is the only candidate (threshold and combiner fitted
on the fold's own calibration split, the one eval.detector --cv used). Nothing is tuned on the held-out folds.
Printed per (length, aggregation, max_windows): example / span / token F1, precision and recall, the share of
answers flagged, and the windows run. Results: OUT/long_context.md and OUT/long_context.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eval.detector_cv import add_fold_model_arguments, fold_of_sources, fold_split
from inference.detector_stage import Calibration, read_context, rescore, scores_to_spans
from inference.grounding import ContextIndex, grounding_features
from inference.hardware import cpu_info
from inference.windowing import select_windows
from training.cli import resolve_config_file
from training.data.base import resolve_data_dir
from training.data.spans import SpanDataReport
from training.detector import DetectorConfig, group_key, load_mixture
from training.detector_scoring import Prediction, _input, fit_calibration, metrics_of, predict, runtime_gate
from training.hardware import hardware

AGGREGATIONS = ("max", "min")


def fold_calibrations(gate, cfg, calib, model_alone: bool) -> dict[tuple[str, str], Calibration]:
    """Per (window aggregation, combiner), the calibration the fold would have chosen had only that aggregation
    been a candidate: the recipe's calibration search (its combiner modes, smoothing, thresholds; with
    `model_alone` also the search without a combiner) on the fold's own calibration split, the records
    eval.detector --cv calibrated the fold on (never its held-out answers)."""
    hm = gate.settings.hallucination_mitigation.hallucination_model
    c = cfg.calibration
    raw = predict(gate, calib)
    modes = {"recipe": c.combiner, **({"off": ["off"]} if model_alone else {})}
    return {(agg, name): fit_calibration(calib, raw, hm, **{**c.choices(), "aggregations": (agg,),
                                                            "combiner_modes": combiner})[0]
            for agg in AGGREGATIONS for name, combiner in modes.items()}


def padded_context(context: str, others: list[str], tokenizer, length: int, rng: random.Random) -> str:
    """`context` with passages of `others` before and after it (its slot drawn by `rng`) until the whole has
    at least `length` tokens of the Detector's tokenizer; the context itself when length is 0."""
    if length <= 0:
        return context
    pool = [o for o in others if o.strip() and o != context]
    rng.shuffle(pool)
    chosen, n = [], len(tokenizer.encode(context).ids)
    for passage in pool:
        if n >= length:
            break
        chosen.append(passage)
        n += len(tokenizer.encode(passage).ids)
    slot = rng.randint(0, len(chosen))
    return "\n\n".join(chosen[:slot] + [context] + chosen[slot:])


def read_grounding(item, windows, offsets) -> np.ndarray:
    """The grounding signals as the runtime computes them when it reads only `windows`
    (inference.detector_stage.read_context: the kept windows' text when they leave parts of the context out)."""
    text = read_context(item.context, windows)
    return grounding_features(item.data.answer, text, item.data.question, offsets,
                              ContextIndex(f"{text}\n{item.data.question or ''}"))


def score_fold(fold_dir: Path, cfg, calib, test, lengths, max_windows_list, seed: int,
               model_alone: bool = False, grounding_on_read: bool = False, budget_under_max: bool = False) -> dict:
    gate = runtime_gate(fold_dir, "torch", overrides=["hallucination_mitigation.hallucination_model.max_windows=0"],
                        calibration=Calibration())
    hm = gate.settings.hallucination_mitigation.hallucination_model
    cals = fold_calibrations(gate, cfg, calib, model_alone)
    tokenizer = gate.runners["detector"].tokenizer
    out = {}
    for length in lengths:
        rng = random.Random(f"{seed}-{fold_dir.name}-{length}")
        records = []
        for rec in test:
            others = [r.context for r in test if group_key(r) != group_key(rec)]  # other sources' passages
            records.append(replace(rec, context=padded_context(rec.context, others, tokenizer, length, rng)))
        started = time.perf_counter()
        items = [gate.prepare([_input(r)], where=lambda _, rid=r.id: f"record {rid}")[0] for r in records]
        scores = []
        for b in range(0, len(items), 16):
            scores.extend(gate.score_tokens(items[b:b + 16]))
        seconds = time.perf_counter() - started
        tokens = [it.windows[0].context_tokens if it.windows else 0 for it in items]
        for k in max_windows_list:
            for (agg, combiner), cal in cals.items():
                if k and agg == "max" and not budget_under_max:
                    continue  # max_windows_under: min reads every window under max
                for grounding in (("context", "read") if grounding_on_read and k and cal.combiner else ("context",)):
                    preds = []
                    for it, sc in zip(items, scores):
                        keep = select_windows(list(it.windows), it.context, it.data.answer, k)
                        idx = [i for i, w in enumerate(it.windows) if any(w is kept for kept in keep)]
                        sub = replace(sc, window_probs=[sc.window_probs[i] for i in idx], windows=len(idx))
                        if grounding == "read":
                            sub = replace(sub, grounding=read_grounding(it, keep, sc.answer_offsets))
                        sub = rescore(sub, agg, cal.combiner, cal.smoothing)
                        preds.append(Prediction(sub, scores_to_spans(it.data.answer, sub, hm, cal)))
                    m = metrics_of(records, preds, hm, cal)
                    out[(length, agg, k, combiner, grounding)] = {
                        "levels": m["levels"], "windows": sum(p.scores.windows for p in preds),
                        "flagged": float(np.mean([bool(p.spans) for p in preds])),
                        "context_tokens": float(np.mean(tokens)), "seconds": seconds}
                    lv = m["levels"]
                    print(f"[long] {fold_dir.name} length={length or 'orig'} ({np.mean(tokens):.0f} tokens) {agg} "
                          f"combiner={'on' if cal.combiner else 'off'} ({combiner}) grounding={grounding} "
                          f"max_windows={k or 'all'}: example F1 {lv['example']['overall']['f1']:.3f} span F1 "
                          f"{lv['span']['overall']['f1']:.3f} token F1 {lv['token']['overall']['f1']:.3f} "
                          f"({seconds:.0f} s)", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_fold_model_arguments(p)
    p.add_argument("--lengths", default="0,2048,4096", help="context lengths in Detector tokens (0: original)")
    p.add_argument("--max-windows", default="0,4,2", help="window budgets (0: all)")
    p.add_argument("--folds", type=int, nargs="*", help="fold numbers (default: all)")
    p.add_argument("--limit", type=int, default=0, help="at most this many held-out answers per fold (0: all)")
    p.add_argument("--model-alone", action="store_true",
                   help="also calibrate without the grounding combiner (the model's probabilities alone)")
    p.add_argument("--grounding-on-read", action="store_true",
                   help="with max_windows > 0 also score the combiner's grounding signals against the kept windows only")
    p.add_argument("--max-windows-under", choices=("min", "any"), default="any",
                   help="the aggregations the budgets apply under (the runtime's max_windows_under; min: under min "
                        "only, every window read under max)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
        budgets = [int(x) for x in args.max_windows.split(",")]
    except ValueError:
        p.error("--lengths and --max-windows take comma-separated integers")
    cv_dir, out = Path(args.cv_dir), Path(args.out)
    folds = sorted(d for d in cv_dir.glob("fold-*") if (d / "model.safetensors").is_file()
                   and (args.folds is None or int(d.name.split("-")[1]) in args.folds))
    if not folds:
        p.error(f"{cv_dir}: no fold-*/model.safetensors (run eval.detector --cv first)")
    out.mkdir(parents=True, exist_ok=True)
    k_folds = json.loads((cv_dir / "metrics.json").read_text())["k"] if (cv_dir / "metrics.json").is_file() else 5
    cfg = resolve_config_file(DetectorConfig, args.config, [], args.data_dir)
    everything, _ = load_mixture(cfg, resolve_data_dir(cfg.run.data_dir), SpanDataReport())
    records = [r for r in everything if r.source == args.source]
    others = [r for r in everything if r.source != args.source]
    assignment = fold_of_sources(records, k_folds, cfg.run.seed)
    per_fold = {}
    for fold_dir in folds:
        k = int(fold_dir.name.split("-")[1])
        test = [r for r in records if assignment[group_key(r)] == k]
        train = [r for r in records if assignment[group_key(r)] != k]
        _, calib = fold_split(cfg, train, others)  # the fold's calibration split, as eval.detector --cv drew it
        if args.limit:
            test = random.Random(args.seed).sample(test, min(args.limit, len(test)))
        per_fold[fold_dir.name] = score_fold(fold_dir, cfg, calib, test, lengths, budgets, args.seed,
                                             args.model_alone, args.grounding_on_read, args.max_windows_under == "any")

    keys = list(next(iter(per_fold.values())).keys())
    lines = [(f"Detector quality with long contexts: {len(folds)} CV folds of {args.source} "
             f"({sum(1 for _ in records)} responses), each fold model on its held-out answers, torch backend; "
             f"mean over folds. Hardware: {hardware()}."), "",
             ("| context | tokens (mean) | aggregation | max windows | combiner | grounding on | windows run | "
             "answers flagged | example F1 | span P / R / F1 | token P / R / F1 |"),
             "|---|---:|---|---:|---|---|---:|---:|---:|---|---|"]
    summary = []
    for key in keys:
        rows = [f[key] for f in per_fold.values()]

        def mean(level, metric, rows=rows):
            return float(np.mean([r["levels"][level]["overall"][metric] for r in rows]))

        length, agg, k, combiner, grounding = key
        row = {"length": length, "aggregation": agg, "max_windows": k, "calibration_search": combiner,
               "grounding_on": grounding,
               "context_tokens": float(np.mean([r["context_tokens"] for r in rows])),
               "windows": int(sum(r["windows"] for r in rows)),
               "flagged": float(np.mean([r["flagged"] for r in rows])),
               **{f"{lvl}_{m}": round(mean(lvl, m), 4) for lvl in ("example", "span", "token")
                  for m in ("precision", "recall", "f1")}}
        summary.append(row)
        lines.append(f"| {length or 'original'} | {row['context_tokens']:.0f} | {agg} | {k or 'all'} | "
                     f"{'recipe' if combiner == 'recipe' else 'none'} | "
                     f"{'windows read' if grounding == 'read' else 'whole context'} | "
                     f"{row['windows']} | {row['flagged']:.2f} | {row['example_f1']:.3f} | "
                     f"{row['span_precision']:.3f} / {row['span_recall']:.3f} / {row['span_f1']:.3f} | "
                     f"{row['token_precision']:.3f} / {row['token_recall']:.3f} / {row['token_f1']:.3f} |")
    md = "\n".join(lines) + "\n"
    (out / "long_context.md").write_text(md)
    (out / "long_context.json").write_text(json.dumps({"command": " ".join(sys.argv), "hardware": hardware(),
                                                       "cpu": cpu_info().as_dict(), "rows": summary}, indent=2)
                                           + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
