"""Sequence classification runs (Sentinel, Explainer): tokenise, train, evaluate on the held-out split, save."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

from training.data.records import PairRecord, PromptRecord, Record
from training.hardware import hardware
from training.metrics import classification_metrics
from training.models import build_model, load_tokenizer, resolve_base_model
from training.predict import encode_inputs
from training.trainer import class_weights, save_model, setup_run, train, write_json

log = logging.getLogger("halugate.training")


def tokenize_records(tokenizer, records: list[PromptRecord | PairRecord], max_length: int):
    """A `datasets.Dataset` of the records' model inputs (one text, or a pair) and `labels`."""
    from datasets import Dataset

    inputs = [r.model_inputs() for r in records]
    segments = [f"segment_{i}" for i in range(len(inputs[0]) if inputs else 1)]
    cols = {name: [x[i] for x in inputs] for i, name in enumerate(segments)}
    ds = Dataset.from_dict({**cols, "labels": [int(r.label) for r in records]})

    def enc(batch):  # truncated as the runtime truncates (training.predict.encode_inputs)
        return encode_inputs(tokenizer, batch[segments[0]], batch[segments[1]] if len(segments) > 1 else None,
                             max_length)

    return ds.map(enc, batched=True, remove_columns=segments)


def write_jsonl(path: Path, records: list[Record]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records)


def input_chars(rec: PromptRecord | PairRecord) -> int:
    return sum(len(x) for x in rec.model_inputs())


def run_sequence_classification(cfg, train_recs, dev_recs, test_recs, labels: list[str], count_text: str,
                                extra_eval: dict | None = None, loss_fn=None, post_eval=None) -> dict:
    """Train on train_recs, select on dev_recs, report on test_recs; returns the metrics written to metrics.json.

    `post_eval(trainer=, tokenizer=, out=, dev_recs=, dev_logits=, test_recs=, test_logits=)` (optional) runs
    after the final predictions (records in the order of the logits); the dict it returns is added to the metrics.
    """
    from transformers import DataCollatorWithPadding

    out = setup_run(cfg, cfg.run.output_dir)
    (out / "data_counts.txt").write_text(count_text + "\n", encoding="utf-8")
    write_jsonl(out / "test.jsonl", test_recs)  # eval.* re-scores this split by default

    base = resolve_base_model(cfg.model.base_model)
    log.info("base model %s -> %s", cfg.model.base_model, base)
    tokenizer = load_tokenizer(base)
    model = build_model(base, "sequence", labels, cfg.model.lora, attention_dropout=cfg.model.attention_dropout,
                        seed=cfg.run.seed, reinit_top=cfg.model.reinit_top_layers)
    if hasattr(model, "print_trainable_parameters"):
        model.print_trainable_parameters()

    train_ds = tokenize_records(tokenizer, train_recs, cfg.model.max_length)
    # Evaluation order does not change the metrics; sorting by length cuts padding (and CPU time) a lot.
    dev_recs = sorted(dev_recs, key=input_chars)
    test_recs = sorted(test_recs, key=input_chars)
    dev_ds = tokenize_records(tokenizer, dev_recs, cfg.model.max_length)
    test_ds = tokenize_records(tokenizer, test_recs, cfg.model.max_length)

    def compute_metrics(pred):
        m = classification_metrics(pred.label_ids, np.argmax(pred.predictions, -1), labels)
        return {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"]}

    weights = class_weights([r.label for r in train_recs], len(labels)) if cfg.train.class_weighted else None
    log.info("class weights: %s", weights)
    started = time.time()
    trainer = train(model, tokenizer, train_ds, dev_ds, cfg, out, compute_metrics,
                    DataCollatorWithPadding(tokenizer), loss_weights=weights, loss_fn=loss_fn)
    train_seconds = time.time() - started

    dev_pred = trainer.predict(dev_ds)
    test_pred = trainer.predict(test_ds)
    y_pred = np.argmax(test_pred.predictions, -1)
    metrics = {
        "test": classification_metrics(test_pred.label_ids, y_pred, labels,
                                       groups=[r.source for r in test_recs]),
        "dev": classification_metrics(dev_pred.label_ids, np.argmax(dev_pred.predictions, -1), labels),
        "train_size": len(train_recs), "dev_size": len(dev_recs), "test_size": len(test_recs),
        "base_model": cfg.model.base_model,
        "global_steps": trainer.state.global_step,
        "train_seconds": round(train_seconds, 1),
        "hardware": hardware(),
    }
    if extra_eval:
        metrics.update(extra_eval)
    if post_eval is not None:
        metrics.update(post_eval(trainer=trainer, tokenizer=tokenizer, out=out, dev_recs=dev_recs,
                                 dev_logits=dev_pred.predictions, test_recs=test_recs,
                                 test_logits=test_pred.predictions) or {})
    save_model(trainer, tokenizer, out, labels)
    write_json(out / "metrics.json", metrics)
    t = metrics["test"]
    log.info("test accuracy %.4f macro-F1 %.4f (n=%d); run dir %s", t["accuracy"], t["macro_f1"], t["n"], out)
    return metrics
