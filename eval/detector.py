"""Evaluate a token-level Detector (RAGTruth-style): example, span and token levels by task type, AUROC per task.

    python -m eval.detector --model runs/detector-offline --data RUN_DIR/test.jsonl --out DIR     # torch run dir
    python -m eval.detector --model runs/detector-offline-onnx --data FILE.jsonl --out DIR        # ONNX export
    python -m eval.detector --cv 5 --config configs/detector.offline.yaml --out runs/detector-cv  # grouped CV

Scoring goes through the runtime (inference.detect.HaluGate's Detector stage: windows, aggregation, calibrated
combiner, threshold and spans), so the figures describe the detector that ships.

--data is an adapter name (read from --data-dir / $HALUGATE_DATA_DIR), a folder (RAGTruth's
response.jsonl + source_info.jsonl, or the ragtruth_test_subset folder), or a JSONL file of span records or of
RAGTruth-schema rows. Writes DIR/metrics.json, DIR/report.md, DIR/pr_curve.png, DIR/predictions.jsonl.

Reference rows are computed on the same records in the same run: "flag everything" (every answer is one
hallucinated span), "lexical" (answer words absent from the context and question) and "grounding rule" (answer
numbers, quantities and names absent from the context; inference.grounding).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from inference.grounding import unsupported_spans
from inference.hub import ModelRefError, resolve_model
from inference.spans import token_labels
from training.data.base import DataError, resolve_data_dir
from training.data.records import SpanRecord
from training.data.spans import (
    SpanDataReport,
    clean_span_records,
    join_ragtruth,
    load_ragtruth_subset_folder,
    load_span_source,
    read_span_file,
)
from training.detector_scoring import Prediction, evaluate, runtime_gate
from training.hardware import hardware
from training.span_metrics import Scored, detection_metrics
from training.trainer import write_json

log = logging.getLogger("halugate.eval.detector")

# Published RAGTruth test figures (full test split, 2,700 responses) quoted for context: not comparable 1:1
# with a subset, and not computed here.
PUBLISHED = [
    ("LettuceDetect-large (ModernBERT-large)", 79.22, 58.93),
    ("LettuceDetect-base (ModernBERT-base)", 76.07, 55.44),
    ("RAGTruth fine-tuned Llama-2-13B", 78.7, None),
    ("Luna (DeBERTa-large)", 65.4, None),
    ("GPT-4-turbo, prompted", 63.4, 28.3),
]


# ---- data -------------------------------------------------------------------------------------------------

def load_eval_records(data: str, data_dir=None) -> tuple[list[SpanRecord], dict]:
    """Records + the data report (problems with ids) for an adapter name, a folder or a JSONL file."""
    report = SpanDataReport()
    path = Path(data).expanduser()
    if path.is_file():
        recs = read_span_file(path, report)
    elif path.is_dir():
        if (path / "response.jsonl").is_file() and (path / "source_info.jsonl").is_file():
            rows = join_ragtruth(path / "response.jsonl", path / "source_info.jsonl", "test")
            recs = clean_span_records(rows, "ragtruth_test", report)
        else:
            recs = clean_span_records(load_ragtruth_subset_folder(path), path.name, report)
    elif "/" in data or data.endswith(".jsonl"):
        raise DataError(f"--data {data}: no such file or folder")
    else:
        recs = load_span_source(data, resolve_data_dir(data_dir), report)
    if not recs:
        raise DataError(f"--data {data}: no usable records\n{report.summary()}")
    return recs, report.to_dict()


# ---- reference rows --------------------------------------------------------------------------------------

def lexical_spans(rec: SpanRecord) -> list[dict]:
    """Answer words (not stopwords) absent from the context and question, merged when adjacent."""
    return unsupported_spans(rec.answer, rec.context, rec.question, words=True, strict=False)  # the floor as before


def grounding_rule_spans(rec: SpanRecord) -> list[dict]:
    """Numbers, quantities and names of the answer that the context lacks (inference.grounding), nothing else."""
    return unsupported_spans(rec.answer, rec.context, rec.question)


def whole_answer_span(answer: str) -> list[dict]:
    s, e = 0, len(answer)
    while s < e and answer[s].isspace():
        s += 1
    while e > s and answer[e - 1].isspace():
        e -= 1
    return [{"start": s, "end": e, "text": answer[s:e]}] if e > s else []


# ---- scoring ----------------------------------------------------------------------------------------------

REFERENCE_ROWS = {"flag_everything": lambda rec: whole_answer_span(rec.answer), "lexical": lexical_spans,
                  "grounding_rule": grounding_rule_spans}


def baseline_items(records: list[SpanRecord], preds: list[Prediction], kind: str) -> list[Scored]:
    """A reference row scored on the same records (and the same answer tokens) as the model."""
    items = []
    for rec, p in zip(records, preds):
        if p.scores is None:
            continue
        offsets = p.scores.answer_offsets
        spans = REFERENCE_ROWS[kind](rec)
        items.append(Scored(rec.task_type, rec.spans, spans, token_labels(rec.answer, offsets, rec.spans),
                            token_labels(rec.answer, offsets, spans)))
    return items


def prediction_rows(records: list[SpanRecord], preds: list[Prediction], **extra) -> list[dict]:
    return [{"id": r.id, "task_type": r.task_type, **extra,
             "score": None if p.scores is None else round(p.scores.score, 5),
             "windows": 0 if p.scores is None else p.scores.windows, "skipped": p.error or None,
             "gold_spans": r.spans, "pred_spans": p.spans} for r, p in zip(records, preds)]


def pr_plot(records, predictions, baselines: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import precision_recall_curve

    tok_true, tok_prob, ex_true, ex_prob = [], [], [], []
    for rec, pred in zip(records, predictions):
        if pred.scores is None:
            continue
        tok_true.extend(token_labels(rec.answer, pred.scores.answer_offsets, rec.spans))
        tok_prob.extend(pred.scores.probs.tolist())
        ex_true.append(int(bool(rec.spans)))
        ex_prob.append(pred.scores.score)
    fig, ax = plt.subplots(figsize=(6, 5))
    for name, yt, yp in (("token", tok_true, tok_prob), ("example (hallucination_score)", ex_true, ex_prob)):
        if len(set(yt)) > 1:
            p, r, _ = precision_recall_curve(yt, yp)
            ax.plot(r, p, label=f"Detector, {name} level")
    markers = {"flag_everything": "x", "lexical": "o", "grounding_rule": "^"}
    for name, m in baselines.items():
        for lvl, color in (("token", "C0"), ("example", "C1")):
            o = m[lvl]["overall"]
            ax.scatter([o["recall"]], [o["precision"]], marker=markers.get(name, "s"), color=color,
                       label=f"{name} ({lvl})")
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_title("Detector precision-recall (hallucinated class)")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- report -----------------------------------------------------------------------------------------------

def _row(name: str, m: dict) -> str:
    cells = []
    for lvl in ("example", "span", "token"):
        o = m[lvl]["overall"]
        cells += [f"{100 * o['precision']:.1f}", f"{100 * o['recall']:.1f}", f"**{100 * o['f1']:.1f}**"]
    return f"| {name} | " + " | ".join(cells) + " |"


def _task_table(rows: dict, tasks: list[str], n_of: dict) -> list[str]:
    lines = ["| | " + " | ".join(f"{t} (n={n_of.get(t, 0)})" for t in tasks) + " |", "|---|" + "---|" * len(tasks)]
    for name, m in rows.items():
        cells = []
        for t in tasks:
            vals = [m[lvl]["by_task_type"].get(t, {}).get("f1", 0.0) for lvl in ("example", "span", "token")]
            cells.append(" / ".join(f"{100 * v:.1f}" for v in vals))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def write_report(path: Path, result: dict) -> None:
    rows = {f"Detector (runtime: threshold {result['threshold']}, {result['window_aggregation']} over windows, "
            f"combiner {'on' if result['combiner'] else 'off'})": result["levels"]}
    ref = result.get("fp32_reference")
    if ref:
        rows["the same Detector, fp32 (`model.onnx`)"] = ref["levels"]
    rows.update({k.replace("_", " "): v for k, v in result["baselines"].items()})
    tasks = sorted(result["levels"]["example"]["by_task_type"])
    n_of = {t: result["levels"]["example"]["by_task_type"][t]["n"] for t in tasks}
    lines = [
        f"# Detector evaluation: {result['data']}", "",
        (f"Model `{result['model']}` ({result['backend']}"
         + (f", `{result['onnx_file']}`" if result.get("onnx_file") else "")
         + f"), {result['n_scored']} responses scored "
         f"({result['n_skipped']} refused by the runtime, listed in metrics.json). Scored through "
         f"inference.detect (the runtime's windows, aggregation, calibration and spans). Hardware: "
         f"{result['hardware']}. Command: `{result['command']}`."), "",
        "Precision / recall / F1 of the hallucinated class, in %.", "",
        "| | example P | example R | example F1 | span P | span R | span F1 | token P | token R | token F1 |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *[_row(k, v) for k, v in rows.items()], "",
        "Example-level AUROC of the per-answer score (hallucination_score: model, check terms and word share): " + ", ".join(
            f"{k} {v:.3f}" if v is not None else f"{k} -" for k, v in result["auroc"].items()), "",
        *([(f"int8 against fp32 at the runtime's decision: the same spans on {ref['same_spans']} of "
            f"{ref['answers']} answers, the same flag on {ref['same_flag']}; "
            f"{100 * ref['flagged_chars_differing'] / max(1, ref['flagged_chars_either']):.1f}% of the flagged "
            f"characters differ, {ref['char_agreement']:.4f} of all answer characters are decided alike (the "
            f"export's check compares argmax labels)."), ""] if ref else []),
        "## By task type (F1, %: example / span / token)", "", *_task_table(rows, tasks, n_of), "",
        "## Published RAGTruth figures (full test split; quoted, not computed here)", "",
        "| model | example F1 | span F1 |", "|---|---|---|",
        *[f"| {n} | {e} | {s if s is not None else '-'} |" for n, e, s in PUBLISHED], "",
    ]
    if result.get("sweep"):
        lines += [("## Threshold sweep (overall F1, %; for reading only: the shipped threshold comes from the "
                  "calibration split)"), "", "| threshold | example F1 | span F1 | token F1 |", "|---|---|---|---|"]
        lines += [f"| {r['threshold']} | {100 * r['example_f1']:.1f} | {100 * r['span_f1']:.1f} | "
                  f"{100 * r['token_f1']:.1f} |" for r in result["sweep"]]
    lines += ["", "![precision-recall](pr_curve.png)", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


# ---- entry points -----------------------------------------------------------------------------------------

def evaluate_model(model: str, records: list[SpanRecord], backend: str | None = None, threshold: float | None = None,
                   with_sweep: bool = True, overrides: list[str] | None = None, precision: str = "auto",
                   fp32_reference: bool = True) -> tuple[dict, list[Prediction]]:
    """Metrics of a run dir (torch) or export dir (onnx) through the runtime, with the reference rows. `precision`
    (ONNX): "auto" scores the file the runtime runs by default on this CPU (inference.precision); an int8 file
    is then also compared with the export's fp32 file at the runtime's decision (`fp32_reference`)."""
    backend = backend or ("onnx" if any(Path(model).glob("*.onnx")) else "torch")
    gate = runtime_gate(model, backend, precision=precision, overrides=overrides)
    if threshold is not None:  # an explicit threshold replaces the calibrated one (nothing else changes)
        gate.detector_calibration = dataclasses.replace(gate.detector_calibration, threshold=threshold,
                                                        task_thresholds=None)
    result, preds = evaluate(gate, records, with_sweep=with_sweep)
    result["backend"] = backend
    result["precision"] = getattr(gate.runners["detector"], "precision", "fp32")
    result["onnx_file"] = getattr(getattr(gate.runners["detector"], "onnx_path", None), "name", None)
    result["baselines"] = {k: detection_metrics(baseline_items(records, preds, k)) for k in REFERENCE_ROWS}
    if fp32_reference and result["precision"] == "int8":
        # the export's check compares argmax labels; the runtime decides at its calibrated threshold after the
        # combiner, so say what int8 changes there: the same records through the fp32 file
        reference = runtime_gate(model, backend, precision="fp32", overrides=overrides)
        reference.detector_calibration = gate.detector_calibration
        ref_result, ref_preds = evaluate(reference, records, with_sweep=False)
        result["fp32_reference"] = {"levels": ref_result["levels"], "auroc": ref_result["auroc"],
                                    **decision_agreement(preds, ref_preds, [r.answer for r in records])}
    return result, preds


def decision_agreement(preds: list[Prediction], reference: list[Prediction], answers: list[str]) -> dict:
    """How far two scorings of the same records decide alike: answers with identical spans, answers flagged by
    both or neither, flagged answer characters that only one of them flags (of those either flags), and the
    share of all answer characters both decide alike (per-character agreement)."""
    def chars(p):
        return {i for s in p.spans for i in range(s["start"], s["end"])}

    same_spans = same_flag = differing = either = 0
    for a, b in zip(preds, reference):
        same_spans += [(s["start"], s["end"]) for s in a.spans] == [(s["start"], s["end"]) for s in b.spans]
        same_flag += bool(a.spans) == bool(b.spans)
        ca, cb = chars(a), chars(b)
        differing, either = differing + len(ca ^ cb), either + len(ca | cb)
    total = sum(len(a) for a in answers)
    return {"answers": len(preds), "same_spans": same_spans, "same_flag": same_flag,
            "flagged_chars_differing": differing, "flagged_chars_either": either,
            "char_agreement": round(1.0 - differing / total, 5) if total else 1.0}


def _command(argv) -> str:
    return "python -m eval.detector " + " ".join(argv if argv is not None else sys.argv[1:])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m eval.detector", description=__doc__.splitlines()[0],
        epilog="example: python -m eval.detector --model runs/detector-offline --data RUN_DIR/test.jsonl --out DIR\n"
               "         python -m eval.detector --cv 5 --config configs/detector.offline.yaml --out runs/detector-cv",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="run dir (torch) or export dir (onnx) of a Detector")
    p.add_argument("--backend", choices=["torch", "onnx"], help="default: onnx when the dir has an .onnx file")
    p.add_argument("--precision", choices=["auto", "fp32", "int8"], default="auto",
                   help="ONNX file to score: auto (default) = the runtime's default, the faster of fp32 and the "
                        "shipped int8 on this CPU (inference.precision; the result names the file)")
    p.add_argument("--no-fp32-reference", action="store_true",
                   help="an int8 file is not also scored in fp32 (by default the report says what int8 changes)")
    p.add_argument("--data", help="adapter name, RAGTruth folder, or JSONL of span records")
    p.add_argument("--data-dir", help="data dir for adapter names (default $HALUGATE_DATA_DIR)")
    p.add_argument("--threshold", type=float, help="override the model's calibrated token threshold")
    p.add_argument("--limit", type=int, help="score only the first N records (smoke runs)")
    p.add_argument("--cv", type=int, metavar="K", help="K-fold cross-validation grouped by source (trains K models)")
    p.add_argument("--config", help="with --cv: the training recipe (YAML) each fold trains")
    p.add_argument("--cv-source", default="ragtruth_test_subset", help="with --cv: the span source that is folded")
    p.add_argument("--folds", type=int, nargs="*", help="with --cv: run only these folds (0-based); finished "
                   "others are included in the summary")
    p.add_argument("--recalibrate", action="store_true",
                   help="with --cv: keep trained fold models, redo their calibration and scoring")
    p.add_argument("--train-fraction", type=float, default=1.0, metavar="F",
                   help="with --cv: each fold trains on a seeded fraction F of its training sources and is scored "
                        "whole (a learning curve; default 1)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="with --cv: override a recipe value")
    p.add_argument("--apply-to", metavar="RUN_DIR",
                   help="with --cv, once every fold is trained: write the calibration fitted on all folds' "
                        "out-of-fold predictions into RUN_DIR/detector.json (the shipped model of the recipe)")
    p.add_argument("--out", required=True, help="output folder")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    if args.threshold is not None and not 0.0 < args.threshold < 1.0:
        raise DataError("--threshold: must be in (0, 1)")
    if args.cv is not None:
        from eval.detector_cv import run_cv  # eval.detector_cv imports this module

        if not args.config:
            raise DataError("--cv needs --config (the recipe each fold trains)")
        run_cv(args.config, args.cv, Path(args.out), data_dir=args.data_dir, source=args.cv_source,
               folds=args.folds, overrides=args.overrides, command=_command(argv), recalibrate=args.recalibrate,
               apply_to=Path(args.apply_to) if args.apply_to else None, train_fraction=args.train_fraction)
        return
    if not args.model or not args.data:
        raise DataError("--model and --data are required (or --cv K --config FILE)")
    try:  # a run dir, an export dir or a Hub id (inference.hub: downloaded into the Hugging Face cache)
        run = resolve_model(args.model)
    except ModelRefError as exc:
        raise DataError(f"--model {exc}") from None
    if not (run / "config.json").is_file():
        raise DataError(f"--model {run}: no config.json: not a Detector run or export directory")
    records, data_report = load_eval_records(args.data, args.data_dir)
    if args.limit:
        records = records[:args.limit]
    log.info("%d records from %s", len(records), args.data)
    started = time.time()
    result, preds = evaluate_model(str(run), records, args.backend, args.threshold, precision=args.precision,
                                   fp32_reference=not args.no_fp32_reference)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"model": str(run), "data": args.data, "command": _command(argv), "hardware": hardware(),
              "seconds": round(time.time() - started, 1), **result, "data_report": data_report}
    write_json(out / "metrics.json", result)
    with open(out / "predictions.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in prediction_rows(records, preds))
    pr_plot(records, preds, result["baselines"], out / "pr_curve.png")
    write_report(out / "report.md", result)
    o = result["levels"]
    print(f"example F1 {o['example']['overall']['f1']:.4f}  span F1 {o['span']['overall']['f1']:.4f}  "
          f"token F1 {o['token']['overall']['f1']:.4f}  AUROC {result['auroc']}  (n={result['n_scored']}); "
          f"report: {out / 'report.md'}")
    if "fp32_reference" in result:
        ref = result["fp32_reference"]
        print(f"int8 against fp32 at the runtime's decision: the same spans on {ref['same_spans']} of "
              f"{ref['answers']} answers, character agreement {ref['char_agreement']:.4f}")


if __name__ == "__main__":
    from training.cli import run_cli

    raise SystemExit(run_cli(main))
