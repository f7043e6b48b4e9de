"""K-fold cross-validation of the Detector recipe, grouped by source (`python -m eval.detector --cv 5 ...`).

Protocol (small in-domain data, no test set to spare):
- the folded source's records (default: the local RAGTruth responses) are grouped by `source_id` (about six
  responses share one context) and the groups dealt into K folds by a seeded shuffle: no source is in two folds;
- fold k's model trains on the other folds (plus every other source of the recipe), exactly as
  `training.detector` trains the shipped model: 15% of the training sources (recipe `data.split.dev`) select the
  checkpoint and calibrate the runtime (aggregation, grounding combiner, threshold), never fold k;
- fold k is scored through the runtime (inference.detect), next to reference rows computed on the same records:
  the detector alone (its own calibration without the combiner), flag-everything, lexical, grounding rule;
- once every fold is trained, a second calibration of fold k's model is fitted on the *other* folds'
  out-of-fold predictions (each by the model that never saw them; ~4/5 of the responses instead of the ~75 of a
  15% split) and scored on fold k as the row `detector_cross_fold_calibration`: fold k's labels enter neither
  (`--apply-to RUN_DIR` fits the same on every fold's out-of-fold predictions and writes it into the shipped
  model's detector.json).

Writes OUT/fold-k/ (run dir + fold_metrics.json; a rerun resumes finished folds), OUT/metrics.json (mean and
standard deviation over folds of every figure), OUT/predictions.jsonl (every response, out of fold, with its
score) and OUT/report.md.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import statistics
import time
from pathlib import Path

from eval.detector import PUBLISHED, baseline_items, prediction_rows
from inference.detector_stage import Calibration
from training.cli import resolve_config_file
from training.data.base import DataError, resolve_data_dir
from training.data.records import SpanRecord
from training.data.spans import SpanDataReport
from training.detector import (
    DetectorConfig,
    check_answer_types,
    group_key,
    group_split,
    load_mixture,
    train_and_calibrate,
)
from training.detector_scoring import apply_calibration, fit_calibration, metrics_of, predict, runtime_gate
from training.hardware import hardware
from training.span_metrics import detection_metrics
from training.trainer import setup_run, write_json

log = logging.getLogger("halugate.eval.detector")

LEVELS = ("example", "span", "token")
ROWS = ("detector", "detector_without_combiner", "flag_everything", "lexical", "grounding_rule")
CROSS_FOLD_ROW = "detector_cross_fold_calibration"  # present once every fold is trained
CROSS_FOLD_FILE = "cross_fold_calibration.json"


def fold_of_sources(records: list[SpanRecord], k: int, seed: int) -> dict[str, int]:
    """source group key -> fold, groups dealt round-robin after a seeded shuffle (sizes differ by one group)."""
    keys = sorted({group_key(r) for r in records})
    random.Random(f"cv:{seed}").shuffle(keys)
    return {key: i % k for i, key in enumerate(keys)}


def check_train_fraction(fraction: float, out: Path | None = None) -> None:
    """A fraction in (0, 1], and the one any fold already finished in `out` was trained with (a rerun resumes
    finished folds, so another fraction would silently mix two learning-curve points)."""
    if not 0.0 < fraction <= 1.0:
        raise DataError(f"--train-fraction: must be in (0, 1], got {fraction}")
    for done in sorted(out.glob("fold-*/fold_metrics.json")) if out is not None else []:
        trained = json.loads(done.read_text()).get("train_fraction", 1.0)
        if trained != fraction:
            raise DataError(f"--train-fraction {fraction}: {done} was trained with {trained}; use another --out")


def subsample_sources(records: list[SpanRecord], fraction: float, seed: int, fold: int) -> list[SpanRecord]:
    """The records of a seeded `fraction` of the source groups (at least one group), for a learning curve: fold
    k's model trains on part of its training sources while fold k is scored whole, so every fraction is scored
    on the same responses. Whole groups, so a kept source keeps all its responses (what recombination needs)."""
    check_train_fraction(fraction)
    if fraction == 1.0:
        return list(records)
    keys = sorted({group_key(r) for r in records})
    random.Random(f"fraction:{seed}:{fold}").shuffle(keys)
    kept = set(keys[:max(1, round(fraction * len(keys)))])
    return [r for r in records if group_key(r) in kept]


def _flat(levels: dict) -> dict[str, float]:
    """{"example_f1": ..., "span_precision": ..., "Summary/span_f1": ...} from detection_metrics output."""
    out = {}
    for lvl in LEVELS:
        for metric in ("precision", "recall", "f1"):
            out[f"{lvl}_{metric}"] = levels[lvl]["overall"][metric]
            for task, m in levels[lvl]["by_task_type"].items():
                out[f"{task}/{lvl}_{metric}"] = m.get(metric, 0.0)
    return out


def _mean_std(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "folds": [round(v, 4) for v in values]}


def fold_split(cfg, train_recs: list[SpanRecord], extra_train: list[SpanRecord] = ()
               ) -> tuple[list[SpanRecord], list[SpanRecord]]:
    """(training records, calibration records) of one fold: the recipe's dev share of the folded source's
    training part calibrates; `extra_train` (the recipe's other sources) only trains."""
    s = cfg.data.split
    fit, calib, _ = group_split([*extra_train, *train_recs], (1 - s.dev, s.dev, 0.0), cfg.run.seed,
                                train_only={r.source for r in extra_train})
    return fit, calib


def add_fold_model_arguments(parser) -> None:
    """The arguments of a script that re-scores the fold models of `eval.detector --cv`."""
    parser.add_argument("--cv-dir", required=True, help="output of eval.detector --cv (fold-0 ... fold-K-1)")
    parser.add_argument("--config", required=True, help="the recipe the CV ran (for the same records and folds)")
    parser.add_argument("--data-dir", help="default $HALUGATE_DATA_DIR")
    parser.add_argument("--source", default="ragtruth_test_subset")


def run_fold(cfg, fold: int, train_recs: list[SpanRecord], test_recs: list[SpanRecord], out: Path,
             recalibrate: bool = False, extra_train: list[SpanRecord] = (), train_fraction: float = 1.0) -> dict:
    """Train (unless the fold's model exists and only a recalibration is asked), calibrate, score fold k.
    `train_recs` (the folded source outside fold k) give the training and calibration splits; `extra_train`
    (the recipe's other sources) is trained on only, so that thresholds are chosen on the folded source's
    domain."""
    done = out / "fold_metrics.json"
    if done.is_file() and not recalibrate:
        log.info("fold %d: done already (%s)", fold, done)
        return json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    fit, calib = fold_split(cfg, train_recs, extra_train)
    log.info("fold %d: %d train / %d calibration / %d test records", fold, len(fit), len(calib), len(test_recs))
    cfg.run.output_dir = str(out)
    info_path = out / "train_info.json"
    if recalibrate and info_path.is_file() and (out / "model.safetensors").is_file():
        train_info = json.loads(info_path.read_text())
    elif recalibrate and done.is_file() and (out / "model.safetensors").is_file():  # a fold scored before
        old = json.loads(done.read_text())
        train_info = {k: old[k] for k in ("train_size", "augmentation", "training_windows", "train_seconds",
                                          "global_steps")}
    else:
        train_info = train_and_calibrate(cfg, fit, calib, out, SpanDataReport(), calibrate_run=False)
        train_info.pop("window_line", None)
        write_json(info_path, train_info)
        shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the final weights are at the top of the run dir

    # One model pass over the calibration split and one over fold k; every calibration candidate is then
    # applied to the same window probabilities.
    gate = runtime_gate(out, calibration=Calibration())
    hm = gate.settings.hallucination_mitigation.hallucination_model
    c = cfg.calibration
    cal, table, by_mode = fit_calibration(calib, predict(gate, calib), hm, **c.choices())
    detector_json = out / "detector.json"  # the fold's model dir then carries the calibration it was scored with
    old = json.loads(detector_json.read_text()) if detector_json.is_file() else {}
    write_json(detector_json, {**old, "calibration": cal.to_dict(),
                               "calibration_candidates": table, "calibration_records": len(calib)})
    raw = predict(gate, test_recs, progress=True)
    preds = apply_calibration(test_recs, raw, hm, cal)
    result = metrics_of(test_recs, preds, hm, cal)
    rows = {"detector": result["levels"]}
    alone_cal = by_mode.get("off", cal)
    alone = metrics_of(test_recs, apply_calibration(test_recs, raw, hm, alone_cal), hm, alone_cal)
    rows["detector_without_combiner"] = alone["levels"]
    for kind in ("flag_everything", "lexical", "grounding_rule"):
        rows[kind] = detection_metrics(baseline_items(test_recs, preds, kind))
    fold_result = {"fold": fold, "n_test": len(test_recs), "n_scored": result["n_scored"],
                   "n_skipped": result["n_skipped"], "skipped": result["skipped"], "rows": rows,
                   "auroc": result["auroc"], "auroc_without_combiner": alone["auroc"],
                   "calibration": cal.to_dict(), "calibration_without_combiner": alone_cal.to_dict(),
                   "calibration_candidates": table, "train_size": train_info["train_size"],
                   "augmentation": train_info["augmentation"], "training_windows": train_info["training_windows"],
                   "train_seconds": train_info["train_seconds"], "global_steps": train_info["global_steps"],
                   "train_fraction": train_fraction}
    with open(out / "predictions.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in prediction_rows(test_recs, preds, fold=fold))
    write_json(done, fold_result)
    return fold_result


def summarize(folds: list[dict]) -> dict:
    summary: dict = {"rows": {}, "auroc": {}, "auroc_without_combiner": {}}
    for row in (*ROWS, CROSS_FOLD_ROW):
        if not all(row in f["rows"] for f in folds):  # the cross-fold row needs every fold
            continue
        flat = [_flat(f["rows"][row]) for f in folds]
        keys = sorted(set().union(*flat))
        summary["rows"][row] = {k: _mean_std([fl.get(k, 0.0) for fl in flat]) for k in keys}
    keys = ["auroc", "auroc_without_combiner"] + (["auroc_cross_fold"] if all("auroc_cross_fold" in f for f in folds)
                                                  else [])
    for key in keys:
        # A task without both classes in a fold has no AUROC there (None); one with none in any fold run (a
        # single-fold run, `--folds 1`) is left out of the summary, which the report shows as "-".
        values = {t: [f[key][t] for f in folds if f[key].get(t) is not None]
                  for t in sorted(set().union(*(f[key] for f in folds)))}
        summary[key] = {t: _mean_std(v) for t, v in values.items() if v}
    return summary


def write_cv_report(path: Path, result: dict) -> None:
    rows, k = result["summary"]["rows"], result["k"]
    names = {"detector": "**Detector (shipped procedure: model + calibrated grounding combiner)**",
             "detector_without_combiner": "Detector alone (same model, calibrated without the combiner)",
             "flag_everything": "flag everything", "lexical": "lexical (answer words absent from context)",
             "grounding_rule": "grounding rule (numbers / names absent from context)",
             CROSS_FOLD_ROW: "Detector, calibrated on the other folds' out-of-fold predictions"}
    shown = [row for row in (*ROWS, CROSS_FOLD_ROW) if row in rows]

    def cell(row, key):
        m = rows[row].get(key)
        return "-" if m is None else f"{100 * m['mean']:.1f} ± {100 * m['std']:.1f}"

    intro = (f"Recipe `{result['config']}`, folded source `{result['source']}`: {result['n_records']} responses, "
             f"{result['n_groups']} sources. Each fold's model never saw its fold's sources; calibration "
             f"(threshold, aggregation, combiner) used 15% of the training sources only. Mean ± standard deviation "
             f"over folds, %. Command: `{result['command']}`. Hardware: {result['hardware']}. "
             f"Wall time {result['seconds'] / 60:.0f} min. Records the data layer could not use are counted "
             f"and named in metrics.json (`data_report`).")
    if result.get("train_fraction", 1.0) < 1.0:
        intro += (f" **Learning-curve point: each fold trained and calibrated on a seeded "
                  f"{100 * result['train_fraction']:.0f}% of its training sources** (whole sources); every fold is "
                  f"scored whole, so the figures compare with a full run of the same recipe and seed.")
    done = result["folds_done"]
    if len(done) < k:
        intro += (f" **Only folds {', '.join(map(str, done))} of {k} were run** (time budget); the mean and "
                  f"standard deviation are over those {len(done)} folds.")
    lines = [f"# Detector {k}-fold cross-validation, grouped by source", "", intro, "",
             "| | example P | example R | example F1 | span P | span R | span F1 | token P | token R | token F1 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in shown:
        cells = [cell(row, f"{lvl}_{m}") for lvl in LEVELS for m in ("precision", "recall", "f1")]
        lines.append(f"| {names[row]} | " + " | ".join(cells) + " |")
    tasks = sorted(t for t in result["summary"]["auroc"] if t != "overall")
    lines += ["", "## By task type (F1, %, mean ± std: example / span)", "",
              "| | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for row in shown:
        lines.append(f"| {names[row]} | " + " | ".join(
            f"{cell(row, f'{t}/example_f1')} / {cell(row, f'{t}/span_f1')}" for t in tasks) + " |")
    au, au0 = result["summary"]["auroc"], result["summary"]["auroc_without_combiner"]
    lines += ["", "## Example-level AUROC (per-answer score = hallucination_score: the mean of [highest token probability + 0.1 per ungrounded term, at most 3, at most 1] and the share of content words the context lacks), mean ± std", "",
              "| | overall | " + " | ".join(tasks) + " |", "|---|---|" + "---|" * len(tasks)]
    named = [("Detector (shipped)", au), ("Detector alone", au0)]
    if "auroc_cross_fold" in result["summary"]:
        named.append(("Detector, cross-fold calibration", result["summary"]["auroc_cross_fold"]))
    for name, a in named:
        lines.append(f"| {name} | " + " | ".join(
            f"{a[t]['mean']:.3f} ± {a[t]['std']:.3f}" if t in a else "-" for t in ["overall", *tasks]) + " |")
    cross = all("calibration_cross_fold" in f for f in result["folds"])
    lines += ["", "## Per fold", "", "| fold | test | train examples | steps | train min | calibration |"
              + (" cross-fold calibration |" if cross else ""), "|---|---|---|---|---|---|" + ("---|" if cross else "")]

    def calibration_cell(c: dict | None) -> str:
        c = c or {}
        feats = len((c.get("combiner") or {}).get("features", []))
        return (f"threshold {c.get('threshold')} (per task {c.get('task_thresholds')}), "
                f"{c.get('window_aggregation')}, combiner {f'{feats} features' if feats else 'off'}")

    for f in result["folds"]:
        lines.append(f"| {f['fold']} | {f['n_scored']} | {f['train_size']} | {f['global_steps']} | "
                     f"{f['train_seconds'] / 60:.1f} | {calibration_cell(f['calibration'])} |"
                     + (f" {calibration_cell(f['calibration_cross_fold'])} |" if cross else ""))
    lines += ["", "## Published RAGTruth figures (full test split; quoted, not computed here)", "",
              "| model | example F1 | span F1 |", "|---|---|---|",
              *[f"| {n} | {e} | {s if s is not None else '-'} |" for n, e, s in PUBLISHED], ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def out_of_fold_predictions(out: Path, folded: list[SpanRecord], assignment: dict[str, int], folds: list[int]
                            ) -> dict[int, tuple[list[SpanRecord], list]]:
    """fold -> (its records, the runtime's raw predictions of the fold's own model on them): every response
    scored by the one model that never saw its source (one model pass per fold; calibrations are then applied
    to the same window probabilities)."""
    oof = {}
    for j in folds:
        test = [r for r in folded if assignment[group_key(r)] == j]
        gate = runtime_gate(out / f"fold-{j}", calibration=Calibration())
        oof[j] = (test, predict(gate, test, progress=True))
    return oof


def pooled_calibration(cfg, oof: dict[int, tuple[list[SpanRecord], list]], folds: list[int], hm) -> Calibration:
    """The calibration (aggregation, combiner, smoothing, thresholds: the recipe's candidates) fitted on the
    pooled out-of-fold predictions of `folds`."""
    recs = [r for j in folds for r in oof[j][0]]
    raws = [p for j in folds for p in oof[j][1]]
    c = cfg.calibration
    cal, _, _ = fit_calibration(recs, raws, hm, **c.choices())
    return cal


def _settings():
    """The Detector settings every fold is scored with (runtime_gate's, which differ only in model paths)."""
    from inference.settings import InferenceSettings

    return InferenceSettings().hallucination_mitigation.hallucination_model


def cross_fold_rows(cfg, out: Path, oof: dict[int, tuple[list[SpanRecord], list]]) -> dict[int, dict]:
    """For each fold k: its model scored under the calibration fitted on the other folds' out-of-fold
    predictions. Why: a 15% calibration split holds ~75 responses, and the combiner and thresholds chosen on
    so few swung between folds (span F1 1.3 to 24.9 under the same recipe); the other folds hold ~490, each
    scored by a model that never saw it, as the shipped model's own answers will be. Fold k's labels enter
    neither its model nor this calibration. Written to OUT/fold-k/cross_fold_calibration.json."""
    hm = _settings()
    rows = {}
    for fold in sorted(oof):
        others = [j for j in sorted(oof) if j != fold]
        cal = pooled_calibration(cfg, oof, others, hm)
        test, raw = oof[fold]
        m = metrics_of(test, apply_calibration(test, raw, hm, cal), hm, cal)
        rows[fold] = {"levels": m["levels"], "auroc": m["auroc"], "calibration": cal.to_dict(),
                      "calibration_records": sum(len(oof[j][0]) for j in others)}
        write_json(out / f"fold-{fold}" / CROSS_FOLD_FILE, rows[fold])
        log.info("fold %d, cross-fold calibration on %d responses: span F1 %.4f (fold calibration: see "
                 "fold_metrics.json)", fold, rows[fold]["calibration_records"], m["levels"]["span"]["overall"]["f1"])
    return rows


def check_apply_to(run_dir: Path) -> None:
    """DataError unless RUN_DIR is a model directory --apply-to can write a calibration into."""
    if not (Path(run_dir) / "config.json").is_file():
        raise DataError(f"--apply-to {run_dir}: no config.json: not a Detector run directory")


def apply_to_run(cfg, out: Path, oof: dict[int, tuple[list[SpanRecord], list]], run_dir: Path) -> dict:
    """Fit the calibration on every fold's out-of-fold predictions (all folded responses) and write it into
    RUN_DIR/detector.json (the shipped model of the same recipe); the run's own dev-split calibration stays
    beside it as `dev_calibration`. Export the run again afterwards (training.export copies detector.json)."""
    path = run_dir / "detector.json"
    check_apply_to(run_dir)
    cal = pooled_calibration(cfg, oof, sorted(oof), _settings())
    old = json.loads(path.read_text()) if path.is_file() else {}
    dev = old.get("dev_calibration", old.get("calibration"))
    n = sum(len(v[0]) for v in oof.values())
    # calibration_records stays the dev split's count (training.detector --recalibrate checks it; a recalibration
    # puts the dev-split calibration back)
    write_json(path, {**old, "calibration": cal.to_dict(), "dev_calibration": dev,
                      "calibration_source": {"kind": "cross_fold", "cv_dir": str(out), "folds": len(oof),
                                             "records": n}})
    log.info("calibration from %d out-of-fold predictions written to %s: %s", n, path, cal.to_dict())
    return cal.to_dict()


def cv_records(config: str, data_dir, source: str, k: int):
    """(records, fold of each source group, group_key) exactly as run_cv folds them (same recipe and seed): for
    evaluations that re-score the fold models (eval.detector_nli)."""
    cfg = resolve_config_file(DetectorConfig, config, [], data_dir)
    records, _ = load_mixture(cfg, resolve_data_dir(cfg.run.data_dir), SpanDataReport())
    folded = [r for r in records if r.source == source]
    return folded, fold_of_sources(folded, k, cfg.run.seed), group_key


def run_cv(config: str, k: int, out: Path, data_dir=None, source: str = "ragtruth_test_subset",
           folds: list[int] | None = None, overrides: list[str] | None = None, command: str = "",
           recalibrate: bool = False, apply_to: Path | None = None, train_fraction: float = 1.0) -> dict:
    import copy

    if k < 2:
        raise DataError("--cv: K must be at least 2")
    check_train_fraction(train_fraction, out)  # before hours of training
    if apply_to is not None and train_fraction < 1.0:
        raise DataError("--apply-to writes the shipped model's calibration: it needs the full training folds, "
                        f"not --train-fraction {train_fraction}")
    if apply_to is not None:  # before hours of training
        check_apply_to(apply_to)
    cfg = resolve_config_file(DetectorConfig, config, overrides, data_dir)
    check_answer_types(cfg)  # before hours of training
    out.mkdir(parents=True, exist_ok=True)
    setup_run(cfg, out)  # resolved recipe + log file of the whole CV
    started = time.time()
    report = SpanDataReport()  # records without context, spans outside the answer...: counted and named
    records, _ = load_mixture(cfg, resolve_data_dir(cfg.run.data_dir), report)
    log.info("data report:\n%s", report.summary())
    folded = [r for r in records if r.source == source]
    others = [r for r in records if r.source != source]
    if not folded:
        raise DataError(f"--cv-source {source}: not among the recipe's data.sources")
    assignment = fold_of_sources(folded, k, cfg.run.seed)
    results = []
    for fold in range(k):
        test = [r for r in folded if assignment[group_key(r)] == fold]
        train = subsample_sources([r for r in folded if assignment[group_key(r)] != fold], train_fraction,
                                  cfg.run.seed, fold)
        if folds and fold not in folds:
            if (out / f"fold-{fold}" / "fold_metrics.json").is_file():
                results.append(json.loads((out / f"fold-{fold}" / "fold_metrics.json").read_text()))
            continue
        fold_dir = out / f"fold-{fold}"
        results.append(run_fold(copy.deepcopy(cfg), fold, train, test, fold_dir,
                                recalibrate and (fold_dir / "model.safetensors").is_file(), extra_train=others,
                                train_fraction=train_fraction))
    if len(results) == k:  # every fold trained: the calibration from the other folds' out-of-fold predictions
        oof = out_of_fold_predictions(out, folded, assignment, list(range(k)))
        by_fold = {f["fold"]: f for f in results}
        for fold, row in cross_fold_rows(cfg, out, oof).items():
            by_fold[fold]["rows"][CROSS_FOLD_ROW] = row["levels"]
            by_fold[fold]["auroc_cross_fold"] = row["auroc"]
            by_fold[fold]["calibration_cross_fold"] = row["calibration"]
        if apply_to is not None:
            apply_to_run(cfg, out, oof, Path(apply_to))
    result = {"config": config, "source": source, "k": k, "n_records": len(folded),
              "n_groups": len(set(assignment)), "train_fraction": train_fraction, "folds_done": [f["fold"] for f in results],
              "command": command, "hardware": hardware(), "seconds": round(time.time() - started, 1),
              "summary": summarize(results) if results else {}, "folds": results,
              "data_report": report.to_dict()}
    write_json(out / "metrics.json", result)
    with open(out / "predictions.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines((out / f"fold-{f['fold']}" / "predictions.jsonl").read_text(encoding="utf-8") for f in results)
    if results:
        write_cv_report(out / "report.md", result)
        det = result["summary"]["rows"]["detector"]
        print(f"{len(results)}/{k} folds: example F1 {det['example_f1']['mean']:.4f}  span F1 "
              f"{det['span_f1']['mean']:.4f}  token F1 {det['token_f1']['mean']:.4f}  AUROC "
              + ", ".join(f"{t} {v['mean']:.3f}" for t, v in result["summary"]["auroc"].items())
              + f"; report: {out / 'report.md'}")
    if apply_to is not None and len(results) < k:  # after the summary of the folds done is written
        raise DataError(f"--apply-to needs all {k} folds trained in {out}; done: {[f['fold'] for f in results]}")
    return result


