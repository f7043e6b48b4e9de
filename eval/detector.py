"""Evaluate a token-level Detector run (RAGTruth-style): example, span and token levels by task type.

    python -m eval.detector --model runs/detector-offline --data ragtruth_test_subset --out runs/eval-detector
    python -m eval.detector --model RUN_DIR --data RUN_DIR/test.jsonl --threshold 0.5 --out DIR

--data is an adapter name (read from --data-dir / $HALUGATE_DATA_DIR), a folder (RAGTruth's
response.jsonl + source_info.jsonl, or the ragtruth_test_subset folder), or a JSONL file of span records or of
RAGTruth-schema rows. Writes DIR/metrics.json, DIR/report.md, DIR/pr_curve.png, DIR/predictions.jsonl.

Two reference rows are computed on the same records in the same run: "flag everything" (every answer is
one hallucinated span) and a lexical baseline (answer words absent from the context and question).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path

import numpy as np

from eval.span_metrics import Scored, detection_metrics
from inference.spans import (
    AnswerTooLongError,
    context_windows,
    encode_detector_input,
    iter_answer_words,
    token_labels,
    token_probs_to_spans,
)

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

SWEEP = [round(float(t), 2) for t in np.arange(0.05, 1.0, 0.05)]


# ---- data -------------------------------------------------------------------------------------------------

def load_eval_records(data: str, data_dir=None) -> tuple[list[dict], dict]:
    """Records + the data report (problems with ids) for an adapter name, a folder or a JSONL file."""
    from training.data.base import DataError, resolve_data_dir
    from training.data.spans import (
        SpanDataReport,
        clean_span_records,
        join_ragtruth,
        load_ragtruth_subset_folder,
        load_span_source,
        read_span_file,
    )

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


# ---- model predictions ------------------------------------------------------------------------------------

def encode_record(tokenizer, rec: dict, max_length: int, context_mode: str, overlap: int):
    if context_mode == "windows":
        return context_windows(tokenizer, rec["context"], rec.get("question"), rec["answer"], max_length,
                               overlap=overlap, task_type=rec.get("task_type"))
    return [encode_detector_input(tokenizer, rec["context"], rec.get("question"), rec["answer"], max_length,
                                  task_type=rec.get("task_type"))]


def predict_token_probs(model, tokenizer, records: list[dict], max_length: int, context_mode: str = "windows",
                        overlap: int = 64, batch_size: int = 16, progress: bool = True):
    """Per record: (answer_offsets, P(hallucinated) per answer token, number of windows) or None when the
    question + answer do not fit in max_length. Windows are combined with the minimum: a token that some
    window's context supports is supported."""
    import torch
    from tqdm.auto import tqdm

    names = [n for n in getattr(tokenizer, "model_input_names", ["input_ids", "attention_mask"])
             if n in ("input_ids", "attention_mask", "token_type_ids")]
    from inference.spans import SpecialTokens

    pad_id = SpecialTokens.from_tokenizer(tokenizer).pad_id
    items = []  # (record index, DetectorInput)
    results: list = [None] * len(records)
    for i, rec in enumerate(records):
        try:
            for enc in encode_record(tokenizer, rec, max_length, context_mode, overlap):
                items.append((i, enc))
        except AnswerTooLongError:
            continue
    items.sort(key=lambda x: len(x[1]))
    model.eval()
    device = next(model.parameters()).device
    combined: dict[int, np.ndarray] = {}
    windows: dict[int, int] = {}
    batches = range(0, len(items), batch_size)
    for b in tqdm(batches, desc="detector", disable=not progress or not sys.stderr.isatty(), leave=False):
        chunk = items[b:b + batch_size]
        width = max(len(e) for _, e in chunk)
        feats = {n: [] for n in names}
        for _, e in chunk:
            pad = width - len(e)
            for n in names:
                seq = getattr(e, n)
                feats[n].append(seq + [pad_id if n == "input_ids" else 0] * pad)
        with torch.no_grad():
            logits = model(**{n: torch.tensor(v, device=device) for n, v in feats.items()}).logits
        probs = torch.softmax(logits.float(), dim=-1)[..., 1].cpu().numpy()
        for row, (i, e) in enumerate(chunk):
            p = probs[row, e.answer_slice]
            combined[i] = p if i not in combined else np.minimum(combined[i], p)
            windows[i] = windows.get(i, 0) + 1
            results[i] = (e.answer_offsets, None, 0)
    for i, p in combined.items():
        results[i] = (results[i][0], p, windows[i])
    return results


# ---- baselines --------------------------------------------------------------------------------------------

_STOP = frozenset(["a", "an", "the", "and", "or", "but", "if", "then", "than", "of", "to", "in", "on", "at",
                   "by", "for", "with", "from", "as", "is", "are", "was", "were", "be", "been", "being", "it",
                   "its", "this", "that", "these", "those", "there", "their", "they", "them", "he", "she",
                   "his", "her", "we", "our", "you", "your", "i", "me", "my", "not", "no", "do", "does",
                   "did", "has", "have", "had", "can", "could", "will", "would", "should", "may", "might",
                   "must", "also", "which", "who", "whom", "whose", "what", "when", "where", "why", "how",
                   "all", "any", "each", "some", "such", "so", "very", "more", "most", "other", "into",
                   "about", "over", "after", "before", "between", "during", "through", "up", "down", "out",
                   "only", "own", "same", "too", "just", "both", "few", "many", "much", "one", "two", "s", "t"])
_WORDS = re.compile(r"\w+")


def _norm(w: str) -> str:
    w = w.lower().replace("’", "'")
    w = w.removesuffix("'s")
    return w


def lexical_spans(rec: dict) -> list[dict]:
    """Answer words (not stopwords) that occur nowhere in the context or question, merged when adjacent."""
    known = {_norm(w) for w in _WORDS.findall(f"{rec['context']} {rec.get('question') or ''}")}
    known |= {w.rstrip("s") for w in known}
    answer = rec["answer"]
    spans: list[dict] = []
    for s, e in iter_answer_words(answer):
        w = _norm(answer[s:e])
        parts = [_norm(p) for p in _WORDS.findall(w)]
        if w in _STOP or all(p in known or p.rstrip("s") in known or p in _STOP for p in parts):
            continue
        if spans and not re.search(r"\w", answer[spans[-1]["end"]:s]) and s - spans[-1]["end"] <= 2:
            spans[-1]["end"] = e
        else:
            spans.append({"start": s, "end": e})
    for sp in spans:
        sp["text"] = answer[sp["start"]:sp["end"]]
    return spans


def whole_answer_span(answer: str) -> list[dict]:
    s, e = 0, len(answer)
    while s < e and answer[s].isspace():
        s += 1
    while e > s and answer[e - 1].isspace():
        e -= 1
    return [{"start": s, "end": e, "text": answer[s:e]}] if e > s else []


# ---- scoring ----------------------------------------------------------------------------------------------

def score(records, predictions, threshold: float, min_span_chars: int = 1) -> tuple[list[Scored], list[dict]]:
    """Scored items + JSON-able predictions for the records that have model predictions."""
    items, preds = [], []
    for rec, pred in zip(records, predictions):
        if pred is None or pred[1] is None:
            continue
        offsets, probs, n_win = pred
        spans = token_probs_to_spans(rec["answer"], offsets, probs, threshold, min_span_chars)
        items.append(Scored(rec.get("task_type"), rec["spans"], spans,
                            token_labels(rec["answer"], offsets, rec["spans"]),
                            [int(p >= threshold) for p in probs]))
        preds.append({"id": rec["id"], "task_type": rec.get("task_type"), "windows": n_win,
                      "gold_spans": rec["spans"], "pred_spans": spans})
    return items, preds


def baseline_items(records, predictions, kind: str) -> list[Scored]:
    items = []
    for rec, pred in zip(records, predictions):
        if pred is None or pred[1] is None:
            continue
        offsets = pred[0]
        spans = whole_answer_span(rec["answer"]) if kind == "flag_everything" else lexical_spans(rec)
        items.append(Scored(rec.get("task_type"), rec["spans"], spans,
                            token_labels(rec["answer"], offsets, rec["spans"]),
                            token_labels(rec["answer"], offsets, spans)))
    return items


def sweep(records, predictions, thresholds=SWEEP) -> list[dict]:
    rows = []
    for t in thresholds:
        m = detection_metrics(score(records, predictions, t)[0])
        rows.append({"threshold": t, **{f"{lvl}_{k}": m[lvl]["overall"][k] for lvl in ("example", "span", "token")
                                         for k in ("precision", "recall", "f1")}})
    return rows


def pr_plot(records, predictions, baselines: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import precision_recall_curve

    tok_true, tok_prob, ex_true, ex_prob = [], [], [], []
    for rec, pred in zip(records, predictions):
        if pred is None or pred[1] is None:
            continue
        offsets, probs, _ = pred
        tok_true.extend(token_labels(rec["answer"], offsets, rec["spans"]))
        tok_prob.extend(probs.tolist())
        ex_true.append(int(bool(rec["spans"])))
        ex_prob.append(float(np.max(probs)) if len(probs) else 0.0)
    fig, ax = plt.subplots(figsize=(6, 5))
    for name, yt, yp in (("token", tok_true, tok_prob), ("example (max token prob)", ex_true, ex_prob)):
        if len(set(yt)) > 1:
            p, r, _ = precision_recall_curve(yt, yp)
            ax.plot(r, p, label=f"Detector, {name} level")
    markers = {"flag_everything": "x", "lexical": "o"}
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


def write_report(path: Path, result: dict) -> None:
    rows = {f"Detector @ {result['threshold']}": result["levels"]}
    best = result["best_threshold_on_this_data"]
    rows[f"Detector @ {best['threshold']} (best example F1 on this data; optimistic)"] = best["levels"]
    rows["flag everything"] = result["baselines"]["flag_everything"]
    rows["lexical (answer words absent from context)"] = result["baselines"]["lexical"]
    lines = [
        f"# Detector evaluation: {result['data']}",
        "",
        (f"Model `{result['model']}`, {result['n_scored']} responses scored "
         f"({result['n_skipped']} skipped: question + answer longer than max_length), context mode "
         f"`{result['context_mode']}`, max_length {result['max_length']}. Hardware: {result['hardware']}. "
         f"Command: `{result['command']}`."),
        "",
        "Precision / recall / F1 of the hallucinated class, in %.",
        "",
        "| | example P | example R | example F1 | span P | span R | span F1 | token P | token R | token F1 |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *[_row(k, v) for k, v in rows.items()],
        "",
        "## By task type (F1, %: example / span / token)",
        "",
    ]
    tasks = sorted(result["levels"]["example"]["by_task_type"])
    lines += ["| | " + " | ".join(f"{t} (n={result['levels']['example']['by_task_type'][t]['n']})"
                                  for t in tasks) + " |",
              "|---|" + "---|" * len(tasks)]
    for name, m in rows.items():
        cells = []
        for t in tasks:
            vals = [m[lvl]["by_task_type"].get(t, {}).get("f1", 0.0) for lvl in ("example", "span", "token")]
            cells.append(" / ".join(f"{100 * v:.1f}" for v in vals))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Published RAGTruth figures (full test split; quoted, not computed here)", "",
              "| model | example F1 | span F1 |", "|---|---|---|"]
    lines += [f"| {n} | {e} | {s if s is not None else '-'} |" for n, e, s in PUBLISHED]
    lines += ["", "## Threshold sweep (overall F1, %)", "", "| threshold | example F1 | span F1 | token F1 |",
              "|---|---|---|---|"]
    lines += [f"| {r['threshold']} | {100 * r['example_f1']:.1f} | {100 * r['span_f1']:.1f} | "
              f"{100 * r['token_f1']:.1f} |" for r in result["sweep"]]
    lines += ["", "![precision-recall](pr_curve.png)", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


# ---- entry points -----------------------------------------------------------------------------------------

def evaluate(model, tokenizer, records: list[dict], threshold: float = 0.5, max_length: int = 512,
             context_mode: str = "windows", overlap: int = 64, batch_size: int = 16, min_span_chars: int = 1,
             with_sweep: bool = True) -> tuple[dict, list[dict], list]:
    """Metrics dict (levels, baselines, sweep), per-record predictions, raw token probabilities."""
    predictions = predict_token_probs(model, tokenizer, records, max_length, context_mode, overlap, batch_size)
    items, preds = score(records, predictions, threshold, min_span_chars)
    skipped = [r["id"] for r, p in zip(records, predictions) if p is None or p[1] is None]
    result = {
        "threshold": threshold, "max_length": max_length, "context_mode": context_mode,
        "n_scored": len(items), "n_skipped": len(skipped), "skipped_ids": skipped[:50],
        "levels": detection_metrics(items),
        "baselines": {k: detection_metrics(baseline_items(records, predictions, k))
                      for k in ("flag_everything", "lexical")},
    }
    if with_sweep:
        rows = sweep(records, predictions)
        result["sweep"] = rows
        best = max(rows, key=lambda r: (r["example_f1"], r["span_f1"]))
        result["best_threshold_on_this_data"] = {
            "threshold": best["threshold"],
            "levels": detection_metrics(score(records, predictions, best["threshold"], min_span_chars)[0])}
    return result, preds, predictions


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m eval.detector", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="run directory of training.detector (merged model + tokenizer)")
    p.add_argument("--data", required=True, help="adapter name, RAGTruth folder, or JSONL of span records")
    p.add_argument("--data-dir", help="data dir for adapter names (default $HALUGATE_DATA_DIR)")
    p.add_argument("--threshold", type=float, default=0.5, help="P(hallucinated) threshold per token")
    p.add_argument("--max-length", type=int, help="default: the run's model.max_length")
    p.add_argument("--context-mode", choices=["windows", "truncate"], default="windows",
                   help="long contexts: overlapping windows (as at inference) or cut like in training")
    p.add_argument("--overlap", type=int, default=64, help="context tokens shared by consecutive windows")
    p.add_argument("--min-span-chars", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--limit", type=int, help="score only the first N records (smoke runs)")
    p.add_argument("--out", required=True, help="output folder")
    args = p.parse_args(argv)
    if not 0.0 < args.threshold < 1.0:
        raise SystemExit("error: --threshold must be in (0, 1)")

    import yaml
    from transformers import AutoModelForTokenClassification

    from training.classify import hardware
    from training.models import load_tokenizer
    from training.trainer import write_json

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    run = Path(args.model)
    if not (run / "config.json").is_file():
        raise SystemExit(f"error: {run} has no config.json: not a Detector run directory")
    max_length = args.max_length
    if max_length is None and (run / "config.yaml").is_file():
        max_length = (yaml.safe_load((run / "config.yaml").read_text()) or {}).get("model", {}).get("max_length")
    max_length = max_length or 512
    records, data_report = load_eval_records(args.data, args.data_dir)
    if args.limit:
        records = records[:args.limit]
    log.info("%d records from %s", len(records), args.data)
    tokenizer = load_tokenizer(str(run))
    model = AutoModelForTokenClassification.from_pretrained(str(run))
    started = time.time()
    result, preds, predictions = evaluate(model, tokenizer, records, args.threshold, max_length, args.context_mode,
                                          args.overlap, args.batch_size, args.min_span_chars)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"model": str(run), "data": args.data, "command": "python -m eval.detector " + " ".join(
        argv if argv is not None else sys.argv[1:]), "hardware": hardware(),
              "seconds": round(time.time() - started, 1), **result, "data_report": data_report}
    write_json(out / "metrics.json", result)
    with open(out / "predictions.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in preds)
    pr_plot(records, predictions, result["baselines"], out / "pr_curve.png")
    write_report(out / "report.md", result)
    o = result["levels"]
    print(f"example F1 {o['example']['overall']['f1']:.4f}  span F1 {o['span']['overall']['f1']:.4f}  "
          f"token F1 {o['token']['overall']['f1']:.4f}  (n={result['n_scored']}); report: {out / 'report.md'}")


if __name__ == "__main__":
    from training.cli import run_cli

    raise SystemExit(run_cli(main))
