"""Leave-one-source-out (or family-out) evaluation of the Sentinel recipe: one command, every fold.

    python -m eval.sentinel_loso --config configs/sentinel.offline.yaml                 # loso.by (family)
    python -m eval.sentinel_loso --config configs/sentinel.offline.yaml --by source --only trivia code
    python -m eval.sentinel_loso --config configs/sentinel.offline.yaml --dry-run       # folds and counts only

For every group (a family of sources from `loso.families`, or each source with --by source) it trains the
recipe on all other groups (dev split from them, augmentation and balancing on the training part only, as in
training.sentinel), calibrates the threshold on that dev split, and scores the held-out group: recall for
fact-seeking groups, specificity for the others, accuracy for mixed ones, at 0.5 and at the calibrated
threshold. `data.ood` sets (WizardLM by skill) are scored by every fold as well. Writes, under
`loso.output_dir` (default RUN_DIR-loso):

    metrics.json    per group and per source figures, the mean over groups, config and timing
    report.md       the same as tables
    <group>/        each fold's run dir (weights removed unless loso.keep_models)
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import shutil
import sys
import time
from pathlib import Path

from inference.calibration import SENTINEL_CALIBRATION_FILE
from inference.config import ConfigError, to_dict
from inference.labels import SENTINEL_LABELS
from training.classify import run_sequence_classification
from training.cli import resolve_config, run_cli, training_parser
from training.data.base import DataError, resolve_data_dir
from training.data.loso import check_families, check_no_leak, loso_folds
from training.data.prep import check_classes, count_table, stratified_split
from training.hardware import hardware
from training.sentinel import (
    TEST_PREDICTIONS_FILE,
    SentinelConfig,
    binary_stats,
    calibrate_threshold,
    finish_train_split,
    load_ood_records,
    load_prompt_records,
    make_post_eval,
    to_model_text,
)

log = logging.getLogger("halugate.eval.sentinel_loso")


def parse_args(argv=None) -> argparse.Namespace:
    p = training_parser("python -m eval.sentinel_loso", __doc__.splitlines()[0], "configs/sentinel.offline.yaml")
    p.add_argument("--by", choices=["family", "source"], help="overrides loso.by")
    p.add_argument("--only", nargs="+", help="groups to run (overrides loso.only)")
    p.add_argument("--out", help="output dir (overrides loso.output_dir)")
    p.add_argument("--dry-run", action="store_true", help="print the folds and their counts; train nothing")
    p.add_argument("--apply-to", metavar="RUN_DIR",
                   help="write the threshold calibrated on the pooled held-out groups into RUN_DIR/sentinel.json "
                        "(the model trained on every group; training.export copies it into the export)")
    return p.parse_args(argv)


def group_summary(stats: dict) -> dict:
    """The one figure that describes a held-out group: recall (positives only), specificity (negatives only),
    else accuracy."""
    if stats["n_neg"] == 0:
        return {"metric": "recall", "value": stats["recall"]}
    if stats["n_pos"] == 0:
        return {"metric": "specificity", "value": stats["specificity"]}
    return {"metric": "accuracy", "value": stats["accuracy"]}


def fold_records(cfg, fold, seed: int):
    """(train, dev, heldout) for one fold: dev is split from the other groups, the held-out group is sampled."""
    import random

    dev_frac = cfg.data.split.dev or 0.1
    train, dev, extra = stratified_split(fold.train, (1 - dev_frac, dev_frac, 0.0), seed=seed)
    train = train + extra  # stratified_split keeps one record per stratum in the (empty) test part
    heldout = fold.heldout
    limit = cfg.loso.heldout_limit
    if limit is not None and len(heldout) > limit:
        heldout = random.Random(seed).sample(heldout, limit)
    train = finish_train_split(train, cfg.data, seed)
    check_no_leak(train + dev, fold.heldout)
    return to_model_text(train), to_model_text(dev), to_model_text(heldout)


def run(argv=None) -> int:
    args = parse_args(argv)
    try:
        cfg = resolve_config(SentinelConfig, args)
        loso = cfg.loso
        by = args.by or loso.by
        only = args.only or loso.only
        out_root = Path(args.out or loso.output_dir or f"{cfg.run.output_dir.rstrip('/')}-loso")
        check_families(loso.families, [s.name for s in cfg.data.sources], loso.train_only)
        data_dir = resolve_data_dir(cfg.run.data_dir)
        records = load_prompt_records(cfg.data, data_dir, cfg.run.seed)
        ood = load_ood_records(cfg.data, data_dir, cfg.run.seed)
        folds = list(loso_folds(records, loso.families, by, only, loso.train_only))
    except (ConfigError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        for fold in folds:
            train, dev, held = fold_records(cfg, fold, cfg.run.seed)
            print(f"== hold out {fold.name} ({', '.join(fold.heldout_sources)}): train {len(train)}, dev {len(dev)}, "
                  f"held out {len(held)} of {len(fold.heldout)}")
        return 0

    out_root.mkdir(parents=True, exist_ok=True)
    results, seconds_before = finished_folds(out_root, cfg, by)
    if results:
        print(f"resuming: {len(results)} finished fold(s) kept from {out_root}/metrics.json ({', '.join(results)})")
    started = time.time() - seconds_before  # total_seconds counts the earlier, interrupted runs too
    trained = [fold for fold in folds if fold.name not in results]
    for fold in trained:
        fcfg = copy.deepcopy(cfg)
        fcfg.run.output_dir = str(out_root / fold.name)
        if loso.epochs is not None:
            fcfg.train.epochs = loso.epochs
        if loso.max_steps is not None:
            fcfg.train.max_steps = loso.max_steps
        train, dev, held = fold_records(fcfg, fold, cfg.run.seed)
        try:
            for name, part in (("train", train), ("dev", dev)):
                check_classes(part, SENTINEL_LABELS, f"fold {fold.name}: {name}")
        except DataError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        table = count_table({"train": train, "dev": dev, "heldout": held}, SENTINEL_LABELS)
        print(f"== fold {fold.name}: hold out {', '.join(fold.heldout_sources)}\n{table}", flush=True)
        t0 = time.time()
        metrics = run_sequence_classification(fcfg, train, dev, held, SENTINEL_LABELS, table,
                                              post_eval=make_post_eval(fcfg, ood))
        results[fold.name] = fold_result(fold, metrics, time.time() - t0)
        if not loso.keep_models:
            _drop_weights(Path(fcfg.run.output_dir))
        data = write_outputs(out_root, cfg, by, results, time.time() - started, hardware())
    if not trained:  # every fold resumed: the summary (pooled figures included) is still written once
        data = write_outputs(out_root, cfg, by, results, time.time() - started, hardware())
    print(f"leave-one-{by}-out: {len(results)} folds -> {out_root}/metrics.json, report.md")
    if args.apply_to:
        pooled = data["pooled"]
        if not pooled or "calibrated" not in pooled:
            print(f"error: --apply-to: no pooled held-out predictions with fact-seeking prompts in {out_root}",
                  file=sys.stderr)
            return 2
        apply_threshold(Path(args.apply_to), pooled, out_root)
    return 0


def pooled_heldout(out_root: Path, folds: list[str], min_recall: float) -> dict | None:
    """Every fold's held-out predictions together (each made by a model that never saw that group): figures at
    0.5 and at the highest threshold with recall >= min_recall on the pooled fact-seeking prompts. This is a
    threshold chosen on sources the model was not trained on, unlike the dev split of training.sentinel."""
    rows = []
    for name in folds:
        path = out_root / name / TEST_PREDICTIONS_FILE
        if not path.is_file():
            return None
        rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    labels, probs = [r["label"] for r in rows], [r["p_fact"] for r in rows]
    t = calibrate_threshold(labels, probs, min_recall)
    out = {"n": len(rows), "min_recall": min_recall, "0.5": binary_stats(labels, probs, 0.5)}
    if t is not None:
        out["calibrated"] = binary_stats(labels, probs, t)
    return out


def apply_threshold(run_dir: Path, pooled: dict, out_root: Path) -> None:
    """Replace RUN_DIR/sentinel.json's calibration by the pooled held-out one (the dev-split one is kept beside
    it as `dev_calibration`)."""
    path = run_dir / SENTINEL_CALIBRATION_FILE
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    cal = pooled["calibrated"]
    data = {"calibration": {"threshold": cal["threshold"], "label": SENTINEL_LABELS[1],
                            "target": f"recall >= {pooled['min_recall']} on the pooled held-out fact-seeking prompts "
                                      f"of leave-one-group-out ({out_root})",
                            "heldout": cal},
            **({"dev_calibration": old["calibration"]} if "calibration" in old else {})}
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"threshold {cal['threshold']} -> {path}")


def finished_folds(out_root: Path, cfg, by: str) -> tuple[dict, float]:
    """Folds of an earlier run of the same recipe (same resolved config and grouping) in out_root: a rerun after
    an interruption trains only the folds that are missing. A changed config starts over."""
    path = out_root / "metrics.json"
    if not path.exists():
        return {}, 0.0
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}, 0.0
    if old.get("by") != by or old.get("config") != json.loads(json.dumps(to_dict(cfg))):
        log.warning("%s is from another config or grouping: its folds are not reused", path)
        return {}, 0.0
    return dict(old.get("folds", {})), float(old.get("total_seconds", 0.0))


def fold_result(fold, metrics: dict, seconds: float) -> dict:
    by_t = metrics.get("test_by_threshold", {})
    res = {"heldout_sources": fold.heldout_sources, "train_size": metrics.get("train_size"),
           "dev_size": metrics.get("dev_size"), "heldout_size": metrics.get("test_size"),
           "train_seconds": round(seconds, 1), "global_steps": metrics.get("global_steps")}
    for key, stats in by_t.items():
        res[key] = {**stats, **group_summary(stats)}
    res["per_source"] = metrics.get("test_per_source", {})
    if "calibration" in metrics:
        res["calibration_dev"] = metrics["calibration"]["dev"]
    if "ood" in metrics:
        res["ood"] = metrics["ood"]
    return res


def summarize(results: dict) -> dict:
    out = {}
    for key in ("0.5", "calibrated"):
        values = [r[key]["value"] for r in results.values() if key in r and r[key]["value"] is not None]
        if values:
            out[key] = {"mean": round(sum(values) / len(values), 4), "min": min(values), "groups": len(values)}
    return out


def write_outputs(out_root: Path, cfg, by: str, results: dict, seconds: float, hw: str) -> dict:
    summary = summarize(results)
    data = {"by": by, "mean": summary, "pooled": pooled_heldout(out_root, list(results), cfg.calibration.min_recall),
            "folds": results, "total_seconds": round(seconds, 1), "hardware": hw,
            "base_model": cfg.model.base_model, "config": to_dict(cfg)}
    (out_root / "metrics.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_root / "report.md").write_text(report_markdown(data), encoding="utf-8")
    return data


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def report_markdown(data: dict) -> str:
    lines = [f"# Sentinel leave-one-{data['by']}-out ({data['base_model']})", "",
             f"{len(data['folds'])} folds, {data['total_seconds'] / 60:.1f} min on {data['hardware']}.", "",
             ("Each row: the recipe trained without the group, scored on it (recall: fact-seeking group; "
             "specificity: non-factual group; accuracy: mixed). Threshold 0.5 and the threshold calibrated on "
             "the fold's dev split (recall >= target on fact-seeking dev prompts)."), "",
             "| held-out group | sources | n | metric | @0.5 | @calibrated | calibrated t | train n | steps |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in data["folds"].items():
        a, c = r.get("0.5", {}), r.get("calibrated", {})
        lines.append(f"| {name} | {', '.join(r['heldout_sources'])} | {r['heldout_size']} | {a.get('metric', '-')} | "
                     f"{_fmt(a.get('value'))} | {_fmt(c.get('value'))} | {_fmt(c.get('threshold'))} | "
                     f"{r['train_size']} | {r['global_steps']} |")
    for key, s in data["mean"].items():
        lines.append(f"| **mean ({key})** | | | | {'**' + _fmt(s['mean']) + '**' if key == '0.5' else ''} | "
                     f"{'**' + _fmt(s['mean']) + '**' if key == 'calibrated' else ''} | | | |")
    pooled = data.get("pooled")
    if pooled:
        lines += ["", f"## Pooled held-out predictions ({pooled['n']} prompts of every held-out group)", "",
                  "| threshold | recall (fact-seeking) | specificity (others) | precision | accuracy |",
                  "|---|---|---|---|---|"]
        for key in ("0.5", "calibrated"):
            if key in pooled:
                st = pooled[key]
                name = f"{st['threshold']:.4g}" + (f" (recall >= {pooled['min_recall']})" if key == "calibrated" else "")
                lines.append(f"| {name} | {_fmt(st['recall'])} | {_fmt(st['specificity'])} | {_fmt(st['precision'])} | "
                             f"{_fmt(st['accuracy'])} |")
    ood_rows = [(name, src, k, st) for name, r in data["folds"].items() for src, by_t in r.get("ood", {}).items()
                for k, st in by_t.items()]
    if ood_rows:
        lines += ["", "## Out of distribution (never trained on), per fold", "",
                  "| fold | set | threshold | n | recall | specificity |", "|---|---|---|---|---|---|"]
        lines += [f"| {n} | {s} | {k} ({_fmt(st['threshold'])}) | {st['n']} | {_fmt(st['recall'])} | "
                  f"{_fmt(st['specificity'])} |" for n, s, k, st in ood_rows]
    lines += ["", "## Per source (held out), threshold 0.5 / calibrated", "",
              "| group | source | n | recall | specificity |", "|---|---|---|---|---|"]
    for name, r in data["folds"].items():
        half, cal = r["per_source"].get("0.5", {}), r["per_source"].get("calibrated", {})
        for src, st in half.items():
            c = cal.get(src, {})
            lines.append(f"| {name} | {src} | {st['n']} | {_fmt(st['recall'])} / {_fmt(c.get('recall'))} | "
                         f"{_fmt(st['specificity'])} / {_fmt(c.get('specificity'))} |")
    return "\n".join(lines) + "\n"


def _drop_weights(run_dir: Path) -> None:
    for p in run_dir.glob("*.safetensors"):
        p.unlink()
    for sub in ("checkpoints", "adapter"):
        shutil.rmtree(run_dir / sub, ignore_errors=True)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    code = 0

    def _inner(a):
        nonlocal code
        code = run(a)

    rc = run_cli(_inner, argv)
    return rc or code


if __name__ == "__main__":
    raise SystemExit(main())
