"""Re-score a saved Sentinel on a test set: `python -m eval.sentinel --model RUN_DIR [--data FILE|SOURCE ...]`.

--data takes JSONL files of {"text", "label", "source"} records (label: 0 / 1 or the label names
NO_FACT_CHECK_NEEDED / FACT_CHECK_NEEDED, any case; anything else stops with exit 2 and one line naming the
file, line and field), or prompt-dataset names from the data layer (read from --data-dir / $HALUGATE_DATA_DIR).
Without --data the run's own held-out split (RUN_DIR/test.jsonl) is used. Writes the same metrics as training (accuracy, macro-F1, per-class, per-source, confusion matrix).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from inference.formatting import sentinel_text
from inference.hub import ModelRefError, resolve_model, split_ref
from inference.labels import SENTINEL_LABELS
from inference.runners import ModelLoadError, load_runner
from inference.stages.base import label_index
from training.data.base import DataError, get_adapter, numbered_jsonl
from training.data.records import PromptRecord
from training.hardware import hardware
from training.metrics import classification_metrics
from training.predict import TRUNCATIONS, load_classifier, predict_proba

EPILOG = """\
examples:
  python -m eval.sentinel --model runs/sentinel-offline                      # the run's own test split
  python -m eval.sentinel --model runs/sentinel-offline --data prompts.jsonl truthfulqa
prompts.jsonl: one {"text": ..., "label": 0 | 1 | "FACT_CHECK_NEEDED" | "NO_FACT_CHECK_NEEDED"} per line."""


def parse_label(value, where: str) -> int:
    """0 / 1 (int, or a string of one) or a label name (SENTINEL_LABELS, any case) -> class index."""
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return value
    if isinstance(value, str):
        key = value.strip()
        if key in ("0", "1"):
            return int(key)
        names = [n.upper() for n in SENTINEL_LABELS]
        if key.upper() in names:
            return names.index(key.upper())
    raise DataError(f"{where}: field 'label': {value!r} is not a Sentinel label (expected 0, 1, "
                    f"{SENTINEL_LABELS[0]} or {SENTINEL_LABELS[1]})")


def load_records(specs: list[str], data_dir: str | None) -> list[PromptRecord]:
    records: list[PromptRecord] = []
    for spec in specs:
        path = Path(spec)
        if path.suffix == ".jsonl" or path.is_file():
            if not path.is_file():
                raise DataError(f"{path}: file not found")
            for i, r in numbered_jsonl(path):
                if not isinstance(r, dict):
                    raise DataError(f"{path}:{i}: expected a JSON object with fields text and label")
                missing = [k for k in ("text", "label") if k not in r]
                if missing:
                    raise DataError(f"{path}:{i}: record is missing {', '.join(missing)}")
                if not isinstance(r["text"], str) or not r["text"].strip():
                    raise DataError(f"{path}:{i}: field 'text': expected a non-empty string, got {r['text']!r}")
                r["label"] = parse_label(r["label"], f"{path}:{i}")
                r.setdefault("source", path.stem)
                records.append(PromptRecord.from_dict(r, f"{path}:{i}"))
        else:
            records.extend(get_adapter(spec).load(data_dir))
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.sentinel", description=__doc__.splitlines()[0], epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="Sentinel run dir (or any dir with the merged model)")
    p.add_argument("--data", nargs="*", default=None, help="JSONL files or prompt-dataset names")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=None, help="output dir (default: RUN_DIR/eval)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--truncation", choices=TRUNCATIONS, default="head_tail",
                   help="prompts longer than --max-length keep their beginning and end (head_tail, as the runtime "
                        "reads them) or their beginning only (end, the behaviour before; to measure the difference)")
    p.add_argument("--threshold", type=float, default=0.5, help="P(FACT_CHECK_NEEDED) above which to flag")
    p.add_argument("--backend", choices=("torch", "onnx"), default="torch",
                   help="torch: the run dir through PyTorch at --max-length; onnx: an export dir through the "
                        "runtime's runner (inference.runners), at the length the model was fine-tuned at")
    args = p.parse_args(argv)

    model_dir = Path(args.model)
    if not model_dir.exists() and split_ref(args.model):  # a Hub id: downloaded into the Hugging Face cache
        try:
            model_dir = resolve_model(args.model)
        except ModelRefError as exc:
            print(f"error: --model {exc}", file=sys.stderr)
            return 2
    try:
        specs = args.data or [str(model_dir / "test.jsonl")]
        records = load_records(specs, args.data_dir)
        if not records:
            raise DataError(f"no records in {', '.join(specs)}")
        if not (model_dir / "config.json").is_file():
            raise DataError(f"--model {model_dir}: no config.json there (not a Sentinel run or model directory)")
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    texts = [sentinel_text(r.text) for r in records]
    if args.backend == "onnx":
        try:
            runner = load_runner(model_dir, "sequence", "onnx", batch_size=args.batch_size)
        except ModelLoadError as exc:  # e.g. a run dir: the message names the export command
            print(f"error: --model {exc}", file=sys.stderr)
            return 2
        started = time.perf_counter()
        probs = runner.classify(texts)
        # columns in SENTINEL_LABELS order, whatever the export's label map says
        probs = probs[:, [label_index(runner.labels, name, "sentinel", model_dir) for name in SENTINEL_LABELS]]
        max_length, truncation = runner.text_length, "head_tail"  # what the runtime reads
    else:
        max_length, truncation = args.max_length, args.truncation
        load_classifier(str(model_dir), "auto")  # cached (same key as predict_proba): the timing is inference only
        started = time.perf_counter()
        probs = predict_proba(str(model_dir), texts, batch_size=args.batch_size, max_length=args.max_length,
                              truncation=args.truncation)
    seconds = time.perf_counter() - started
    y_pred = (probs[:, 1] > args.threshold).astype(int)
    metrics = classification_metrics([int(r.label) for r in records], y_pred, SENTINEL_LABELS,
                                     groups=[r.source for r in records])
    metrics.update({"model": str(model_dir), "data": specs, "threshold": args.threshold,
                    "backend": args.backend, "max_length": max_length, "truncation": truncation,
                    "seconds": round(seconds, 2), "ms_per_prompt": round(1000 * seconds / len(records), 2),
                    "batch_size": args.batch_size, "hardware": hardware()})
    out = Path(args.out) if args.out else model_dir / "eval"
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    with open(out / "predictions.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({**r.to_dict(), "p_fact_check_needed": round(float(pr), 6)}, ensure_ascii=False) + "\n" for r, pr in zip(records, probs[:, 1]))
    print(f"accuracy {metrics['accuracy']:.4f}  macro-F1 {metrics['macro_f1']:.4f}  n={metrics['n']}  "
          f"({metrics['ms_per_prompt']:.1f} ms/prompt at batch {args.batch_size}, {args.backend})  -> {out}")
    for src, m in metrics["per_source_accuracy"].items():
        print(f"  {src:24s} {m['accuracy']:.3f}  (n={m['n']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
