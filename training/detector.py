"""Detector: token-level hallucination detection (LettuceDetect-style token classification).

    python -m training.detector --config configs/detector.yaml           # published recipe (ModernBERT, RAGTruth)
    python -m training.detector --config configs/detector.offline.yaml   # offline:minilm on the local mixture
    accelerate launch -m training.detector --config configs/detector.yaml

Input format, labels and span logic come from inference.spans (one definition for training, eval and
inference). Only the context is cut to fit max_length; examples whose question + answer alone do not fit are
dropped and listed. Model selection: token-level F1 of the hallucinated class on the dev split.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from inference.labels import DETECTOR_LABELS, IGNORE_INDEX
from inference.spans import AnswerTooLongError, encode_detector_input
from training.cli import resolve_config, run_cli, training_parser
from training.config import LoraConfig, ModelConfig, RunConfig, SourceSpec, SplitConfig, TrainArgs
from training.data.base import DataError, get_adapter, resolve_data_dir
from training.data.prep import count_table, dedup

log = logging.getLogger("halugate.training.detector")

DEV_METRICS = ("token_f1", "token_precision", "token_recall", "example_f1")


@dataclass
class SyntheticConfig:
    sources: list[SourceSpec] = field(default_factory=list)  # span adapters whose faithful records are edited
    faithful_fraction: float = 0.3  # share of those pairs kept unmodified as negatives
    transforms: list[str] = field(default_factory=lambda: ["number", "date", "entity", "negation", "clause"])
    max_edits: int = 1

    def validate(self):
        from training.data.synthetic import TRANSFORMS

        bad = set(self.transforms) - set(TRANSFORMS)
        if bad:
            raise ValueError(f"synthetic.transforms: unknown {sorted(bad)}; known: {', '.join(TRANSFORMS)}")
        if not 0.0 <= self.faithful_fraction <= 1.0:
            raise ValueError("synthetic.faithful_fraction: must be in [0, 1]")
        if self.max_edits < 1:
            raise ValueError("synthetic.max_edits: must be at least 1")


@dataclass
class DetectorData:
    sources: list[SourceSpec] = field(default_factory=list)  # span datasets used as they are
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    eval_sources: list[SourceSpec] = field(default_factory=list)  # evaluation-only sets scored after training
    split: SplitConfig = field(default_factory=lambda: SplitConfig(dev=0.1, test=0.1))
    max_answer_chars: int = 6000
    max_context_chars: int | None = None  # pre-cut very long contexts before tokenising (speed only)

    def validate(self):
        if not self.sources and not self.synthetic.sources:
            raise ValueError("data.sources: at least one span source or synthetic source is required")


@dataclass
class DetectorEval:
    threshold: float = 0.5
    context_mode: Literal["windows", "truncate"] = "windows"
    min_span_chars: int = 1


@dataclass
class DetectorConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/detector"))
    model: ModelConfig = field(default_factory=lambda: ModelConfig(max_length=4096,
                                                                   lora=LoraConfig(enabled=False)))
    train: TrainArgs = field(default_factory=lambda: TrainArgs(
        learning_rate=1e-5, epochs=6, batch_size=8, eval_batch_size=16, metric_for_best_model="token_f1",
        class_weighted=False))
    data: DetectorData = field(default_factory=DetectorData)
    eval: DetectorEval = field(default_factory=DetectorEval)

    def validate(self):
        if self.train.metric_for_best_model not in DEV_METRICS:
            raise ValueError(f"train.metric_for_best_model: must be one of {', '.join(DEV_METRICS)} "
                             f"for the Detector, got {self.train.metric_for_best_model!r}")


# ---- data -------------------------------------------------------------------------------------------------

def _check_trainable(name: str) -> None:
    adapter = get_adapter(name)
    if adapter.kind != "span":
        raise DataError(f"data: {name!r} is a {adapter.kind} dataset, not a span dataset")
    if adapter.extra.get("eval_only"):
        raise DataError(f"data: {name!r} is evaluation-only (RAGTruth test data is never trained on); "
                        "list it under data.eval_sources")


def _sample(rows: list[dict], limit: int | None, seed: int, name: str) -> list[dict]:
    if limit is None or len(rows) <= limit:
        return rows
    rows = sorted(rows, key=lambda r: r["id"])
    return random.Random(f"{seed}:{name}").sample(rows, limit)


def load_mixture(cfg: DetectorConfig, data_dir, report) -> tuple[list[dict], Counter]:
    """Span sources + synthetic records, deduplicated, length-checked; returns (records, synthetic stats)."""
    from training.data.spans import load_span_source
    from training.data.synthetic import generate_synthetic

    d, seed = cfg.data, cfg.run.seed
    loaded: dict[str, list[dict]] = {}

    def load(name: str) -> list[dict]:  # once per source, so its problems are reported once
        _check_trainable(name)
        if name not in loaded:
            loaded[name] = load_span_source(name, data_dir, report)
        return loaded[name]

    records: list[dict] = []
    for spec in d.sources:
        rows = _sample(load(spec.name), spec.limit, seed, spec.name)
        log.info("%-22s %6d records (%d with spans)", spec.name, len(rows), sum(r["label"] for r in rows))
        records.extend(rows)
    stats: Counter = Counter()
    if d.synthetic.sources:
        pairs = []
        for spec in d.synthetic.sources:
            faithful = [r for r in load(spec.name) if not r["spans"]]
            pairs.extend(_sample(faithful, spec.limit, seed, "synthetic:" + spec.name))
        synth, stats = generate_synthetic(pairs, seed=seed, faithful_fraction=d.synthetic.faithful_fraction,
                                          transforms=d.synthetic.transforms, max_edits=d.synthetic.max_edits)
        log.info("synthetic: %d records from %d faithful pairs: %s", len(synth), len(pairs), dict(stats))
        records.extend(synth)
    records, n_dup = dedup(records, key=lambda r: f"{r['answer']}\x00{r['context'][:2000]}")
    if n_dup:
        log.info("dropped %d duplicate (context, answer) records", n_dup)
    long = [r["id"] for r in records if len(r["answer"]) > d.max_answer_chars]
    if long:
        for rid in long:
            report.add("mixture", f"answer longer than data.max_answer_chars={d.max_answer_chars}", rid)
        records = [r for r in records if len(r["answer"]) <= d.max_answer_chars]
    if d.max_context_chars:
        for r in records:
            r["context"] = r["context"][:d.max_context_chars]
    return records, stats


def group_split(records: list[dict], fractions: tuple[float, float, float], seed: int):
    """Train/dev/test by context: records sharing a context (one document, several answers) stay together."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        key = hashlib.sha1(f"{r['source'].split(':')[-1]}\x00{r['context']}".encode()).hexdigest()
        groups.setdefault(key, []).append(r)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    total = len(records)
    bounds = (fractions[2] * total, (fractions[2] + fractions[1]) * total)
    test, dev, train = [], [], []
    seen = 0
    for k in keys:
        part = test if seen < bounds[0] else dev if seen < bounds[1] else train
        part.extend(groups[k])
        seen += len(groups[k])
    rng = random.Random(seed + 1)
    for part in (train, dev, test):
        part.sort(key=lambda r: r["id"])
        rng.shuffle(part)
    return train, dev, test


def encode_records(tokenizer, records: list[dict], max_length: int, report, split: str,
                   with_token_types: bool) -> tuple[list[dict], int]:
    """Features for the collator; returns (features, number of examples whose context was cut)."""
    feats, cut = [], 0
    for r in records:
        try:
            enc = encode_detector_input(tokenizer, r["context"], r.get("question"), r["answer"], max_length,
                                        task_type=r.get("task_type"), spans=r["spans"])
        except AnswerTooLongError as exc:
            report.add(f"{split} split", f"question + answer longer than max_length={max_length}", r["id"])
            log.debug("%s: %s", r["id"], exc)
            continue
        cut += enc.context_truncated
        f = {"input_ids": enc.input_ids, "attention_mask": enc.attention_mask, "labels": enc.labels}
        if with_token_types:
            f["token_type_ids"] = enc.token_type_ids
        feats.append(f)
    return feats, cut


def token_metrics(logits: np.ndarray, labels: np.ndarray) -> dict:
    """Dev metrics from Trainer predictions: token P/R/F1 of HALLUCINATED and example F1 (answer tokens only)."""
    from sklearn.metrics import f1_score, precision_recall_fscore_support

    pred = np.argmax(logits, axis=-1)
    mask = labels != IGNORE_INDEX
    p, r, f, _ = precision_recall_fscore_support(labels[mask], pred[mask], labels=[1], average=None,
                                                 zero_division=0)
    ex_true = [int((labels[i][mask[i]] == 1).any()) for i in range(len(labels))]
    ex_pred = [int((pred[i][mask[i]] == 1).any()) for i in range(len(labels))]
    return {"token_f1": float(f[0]), "token_precision": float(p[0]), "token_recall": float(r[0]),
            "example_f1": float(f1_score(ex_true, ex_pred, zero_division=0))}


# ---- run --------------------------------------------------------------------------------------------------

def main(argv=None) -> None:
    parser = training_parser("python -m training.detector", __doc__.splitlines()[0], "configs/detector.yaml")
    cfg = resolve_config(DetectorConfig, parser.parse_args(argv))

    from datasets import Dataset
    from transformers import DataCollatorForTokenClassification

    from eval.detector import evaluate
    from training.classify import hardware, write_jsonl
    from training.data.spans import SpanDataReport, load_span_source
    from training.models import build_model, load_tokenizer, resolve_base_model
    from training.trainer import class_weights, save_model, setup_run, train, write_json

    out = setup_run(cfg, cfg.run.output_dir)
    data_dir = resolve_data_dir(cfg.run.data_dir)
    for spec in cfg.data.eval_sources:  # fail before training, not after
        get_adapter(spec.name)
    report = SpanDataReport()
    records, synth_stats = load_mixture(cfg, data_dir, report)
    s = cfg.data.split
    train_recs, dev_recs, test_recs = group_split(records, (1 - s.dev - s.test, s.dev, s.test), cfg.run.seed)
    if not train_recs or not dev_recs:
        raise DataError(f"detector data: {len(train_recs)} train / {len(dev_recs)} dev records; need both")
    label_names = ["faithful", "hallucinated"]
    table = count_table({"train": train_recs, "dev": dev_recs, "test": test_recs}, label_names)
    print(table, flush=True)

    base = resolve_base_model(cfg.model.base_model)
    log.info("base model %s -> %s", cfg.model.base_model, base)
    tokenizer = load_tokenizer(base)
    with_types = "token_type_ids" in tokenizer.model_input_names
    ml = cfg.model.max_length
    train_f, train_cut = encode_records(tokenizer, train_recs, ml, report, "train", with_types)
    dev_f, dev_cut = encode_records(tokenizer, dev_recs, ml, report, "dev", with_types)
    cut_line = (f"context cut to fit max_length={ml}: {train_cut} of {len(train_f)} train, "
                f"{dev_cut} of {len(dev_f)} dev examples (answers and questions are never cut)")
    log.info(cut_line)
    n_tokens = sum(len(f["input_ids"]) for f in train_f)
    log.info("train tokens per epoch: %d (mean %.0f per example)", n_tokens, n_tokens / max(1, len(train_f)))
    summary = report.summary()
    log.info("data report:\n%s", summary)
    synth_line = f"synthetic: {dict(synth_stats)}" if synth_stats else "synthetic: none"
    (out / "data_counts.txt").write_text(f"{table}\n\n{synth_line}\n{cut_line}\n\n{summary}\n", encoding="utf-8")
    write_json(out / "data_report.json", report.to_dict())
    write_jsonl(out / "test.jsonl", test_recs)  # eval.detector --data RUN_DIR/test.jsonl re-scores it

    model = build_model(base, "token", DETECTOR_LABELS, cfg.model.lora)
    if hasattr(model, "print_trainable_parameters"):
        model.print_trainable_parameters()
    weights = None
    if cfg.train.class_weighted:
        weights = class_weights([x for f in train_f for x in f["labels"]], len(DETECTOR_LABELS))
        log.info("token class weights: %s", weights)

    def compute_metrics(pred):
        return token_metrics(pred.predictions, pred.label_ids)

    started = time.time()
    trainer = train(model, tokenizer, Dataset.from_list(train_f), Dataset.from_list(dev_f), cfg, out,
                    compute_metrics, DataCollatorForTokenClassification(tokenizer), loss_weights=weights)
    train_seconds = time.time() - started
    dev_metrics = trainer.evaluate()

    model = trainer.model
    e = cfg.eval
    metrics = {
        "dev": dev_metrics,
        "train_size": len(train_f), "dev_size": len(dev_f), "test_size": len(test_recs),
        "train_tokens_per_epoch": n_tokens, "context_cut": {"train": train_cut, "dev": dev_cut},
        "synthetic": dict(synth_stats), "base_model": cfg.model.base_model, "max_length": ml,
        "global_steps": trainer.state.global_step, "train_seconds": round(train_seconds, 1),
        "hardware": hardware(),
    }
    if test_recs:
        res, _, _ = evaluate(model, tokenizer, test_recs, e.threshold, ml, e.context_mode,
                             batch_size=cfg.train.eval_batch_size, min_span_chars=e.min_span_chars,
                             with_sweep=False)
        metrics["test"] = res
        o = res["levels"]
        log.info("test (held-out mixture): example F1 %.4f span F1 %.4f token F1 %.4f (n=%d)",
                 o["example"]["overall"]["f1"], o["span"]["overall"]["f1"], o["token"]["overall"]["f1"],
                 res["n_scored"])
    for spec in cfg.data.eval_sources:
        ev_report = SpanDataReport()
        recs = load_span_source(spec.name, data_dir, ev_report)
        recs = recs[:spec.limit] if spec.limit else recs
        res, _, _ = evaluate(model, tokenizer, recs, e.threshold, ml, e.context_mode,
                             batch_size=cfg.train.eval_batch_size, min_span_chars=e.min_span_chars,
                             with_sweep=False)
        res["data_report"] = ev_report.to_dict()
        metrics.setdefault("eval", {})[spec.name] = res
        o = res["levels"]
        log.info("%s: example F1 %.4f span F1 %.4f token F1 %.4f (n=%d)", spec.name,
                 o["example"]["overall"]["f1"], o["span"]["overall"]["f1"], o["token"]["overall"]["f1"],
                 res["n_scored"])
    save_model(trainer, tokenizer, out, DETECTOR_LABELS)
    write_json(out / "metrics.json", metrics)
    (out / "detector.json").write_text(json.dumps({
        "format": "[CLS] context [SEP] question [SEP] answer [SEP] (inference.spans)",
        "max_length": ml, "threshold": e.threshold, "min_span_chars": e.min_span_chars,
        "model_input_names": list(tokenizer.model_input_names)}, indent=2) + "\n", encoding="utf-8")
    log.info("run dir %s", out)


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
