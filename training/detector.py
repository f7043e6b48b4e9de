"""Detector: token-level hallucination detection (LettuceDetect-style token classification).

    python -m training.detector --config configs/detector.yaml           # published recipe (ModernBERT, RAGTruth)
    python -m training.detector --config configs/detector.offline.yaml   # offline:minilm on the local mixture
    accelerate launch -m training.detector --config configs/detector.yaml

Input format, labels and span logic come from inference.spans (one definition for training, eval and
inference). Long contexts: each training example is the runtime window (same grid as inference) that overlaps
the answer most, and "supported" labels of answer sentences whose evidence lies outside that window are masked
(counted in the report). Examples whose question + answer alone do not fit are dropped and listed. Model
selection: token-level F1 of the hallucinated class on the dev split; the dev split then calibrates the runtime
(window aggregation, grounding combiner, threshold: detector.json), scored through inference.detect.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from inference.config import ConfigError, from_dict, read_yaml, to_dict
from inference.detector_stage import Calibration
from inference.grounding import (
    GROUNDING_TYPE_VOCAB,
    ContextIndex,
    answer_type_ids,
    grounding_features,
    word_signals,
)
from inference.labels import DETECTOR_LABELS, IGNORE_INDEX
from inference.runners import softmax
from inference.spans import AnswerTooLongError, context_windows, encode_detector_input
from inference.structured import as_structured_text
from inference.windowing import rank_windows
from training.classify import write_jsonl
from training.cli import resolve_config, run_cli, training_parser
from training.config import LoraConfig, ModelConfig, RunConfig, SourceSpec, SplitConfig, TrainArgs
from training.data.base import DataError, get_adapter, read_json, resolve_data_dir
from training.data.prep import count_table, dedup
from training.data.recombine import context_edits, recombine, sentences
from training.data.records import SpanRecord
from training.data.spans import SpanDataReport, load_span_source
from training.data.synthetic import TRANSFORMS, generate_synthetic
from training.detector_scoring import (
    COMBINER_MODES,
    SELECTIONS,
    SMALL_TASKS,
    TASK_INDICATORS,
    THRESHOLD_CHOICES,
    calibrate,
    evaluate,
    runtime_gate,
)
from training.hardware import hardware
from training.models import build_model, extend_token_types, load_tokenizer, resolve_base_model
from training.trainer import (
    class_weights,
    save_config,
    save_model,
    setup_logging,
    setup_run,
    train,
    write_json,
)

log = logging.getLogger("halugate.training.detector")

# token_ap: average precision of P(HALLUCINATED) over the dev answer tokens, threshold-free like the calibration
# that follows training (the F1s are read at the argmax, a threshold the calibration then replaces)
DEV_METRICS = ("token_f1", "token_precision", "token_recall", "example_f1", "token_ap")


@dataclass
class SyntheticConfig:
    sources: list[SourceSpec] = field(default_factory=list)  # span adapters whose faithful records are edited
    faithful_fraction: float = 0.3  # share of those pairs kept unmodified as negatives
    transforms: list[str] = field(default_factory=lambda: ["number", "date", "entity", "negation", "clause"])
    max_edits: int = 1

    def validate(self):
        bad = set(self.transforms) - set(TRANSFORMS)
        if bad:
            raise ValueError(f"synthetic.transforms: unknown {sorted(bad)}; known: {', '.join(TRANSFORMS)}")
        if not 0.0 <= self.faithful_fraction <= 1.0:
            raise ValueError("synthetic.faithful_fraction: must be in [0, 1]")
        if self.max_edits < 1:
            raise ValueError("synthetic.max_edits: must be at least 1")


@dataclass
class AugmentConfig:
    """In-domain augmentation of the training split (training.data.recombine); needs records with source_id."""

    sources: list[str] = field(default_factory=list)  # span sources to augment (e.g. ragtruth_test_subset)
    splice_per_record: int = 1  # hallucinated sentences of sibling responses spliced into each response
    remove: bool = True  # faithful variants: hallucinated sentences removed
    edits: bool = True  # number / date / entity swaps of faithful responses from their own context


@dataclass
class DetectorData:
    sources: list[SourceSpec] = field(default_factory=list)  # span datasets used as they are
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    # long contexts (see module doc): the contiguous window overlapping the answer most, the head of the
    # context, or one window packed with the context sentences sharing the most words with the answer (the
    # runtime then reads the model's contexts the same way: detector.json "window_fill": "packed")
    training_windows: Literal["answer_overlap", "head", "packed"] = "answer_overlap"
    window_overlap: int = 128  # context tokens shared by consecutive windows (as the runtime's default)
    # a context that is one JSON object / array (RAGTruth's Data2txt rows): compact JSON as the data has it, or
    # "key: value" lines (inference.structured); the runtime reads the model's contexts the same way
    # (detector.json "structured_context": "text")
    structured_context: Literal["json", "text"] = "json"
    # answer token types (inference.grounding.ANSWER_TYPES): "plain" (the answer segment is type 1) or
    # "grounding" (types 2 / 3 on the tokens of content words / numbers and names the context lacks; BERT-family
    # encoders only, the new type embeddings start as copies of type 1); the runtime reads the model's answers
    # the same way (detector.json "answer_types")
    answer_types: Literal["plain", "grounding"] = "plain"
    eval_sources: list[SourceSpec] = field(default_factory=list)  # evaluation-only sets scored after training
    split: SplitConfig = field(default_factory=lambda: SplitConfig(dev=0.1, test=0.1))
    max_answer_chars: int = 6000
    max_context_chars: int | None = None  # pre-cut very long contexts before tokenising (speed only)
    # sources that only ever train: the dev (checkpoint + calibration) and test splits come from the others, so
    # that thresholds are chosen on the target domain (an auxiliary set such as WiCE is another domain)
    train_only: list[str] = field(default_factory=list)

    def validate(self):
        if not self.sources and not self.synthetic.sources:
            raise ValueError("data.sources: at least one span source or synthetic source is required")
        unknown = sorted(set(self.train_only) - {s.name for s in self.sources})
        if unknown:
            raise ValueError(f"data.train_only: {unknown} are not in data.sources")
        if self.sources and not {s.name for s in self.sources} - set(self.train_only):
            raise ValueError("data.train_only: every source is train-only; nothing is left for the dev split")


@dataclass
class DetectorEval:
    threshold: float = 0.5  # used when calibration is off
    min_span_chars: int = 1


@dataclass
class CalibrationConfig:
    """Fit on the dev split after training (never on a test set): written to detector.json for the runtime."""

    enabled: bool = True
    window_aggregation: list[str] = field(default_factory=lambda: ["max", "min"])
    combiner: list[str] = field(default_factory=lambda: ["off", "on"])  # off / on / all / copy (detector_scoring)
    smoothing: list[int] = field(default_factory=lambda: [0])  # moving-average widths over answer tokens (0: none)
    # best: the highest objective; one_se: the simplest candidate within one bootstrap standard error of it
    # (training.detector_scoring.SELECTIONS)
    selection: str = "best"
    # qualified: task-type indicators in the combiner only for task types that may have their own threshold;
    # all: every one (training.detector_scoring.TASK_INDICATORS)
    task_indicators: str = "qualified"
    # a flagged span grows over neighbours with P >= this x the threshold (hysteresis); the thresholds are fitted
    # with it and detector.json records it (docs/detector.md, "Calibration"); 1.0: none
    span_extension: float = 0.5
    # global: a task type too small for its own threshold uses the global one; stricter: its own when higher
    # (training.detector_scoring.SMALL_TASKS)
    small_tasks: str = "global"
    # best: each threshold at the top of its objective curve; bagged: the median of that choice over bootstrap
    # resamples of the calibration responses (training.detector_scoring.THRESHOLD_CHOICES)
    threshold_choice: str = "best"

    def validate(self):
        if set(self.window_aggregation) - {"max", "min", "mean"} or not self.window_aggregation:
            raise ValueError("calibration.window_aggregation: a non-empty list of max / min / mean")
        if set(self.combiner) - set(COMBINER_MODES) or not self.combiner:
            raise ValueError(f"calibration.combiner: a non-empty list of {' / '.join(COMBINER_MODES)}")
        if not self.smoothing:
            raise ValueError("calibration.smoothing: a non-empty list of token counts >= 0 (0: no smoothing)")
        if self.selection not in SELECTIONS:
            raise ValueError(f"calibration.selection: one of {', '.join(SELECTIONS)}, got {self.selection!r}")
        if self.task_indicators not in TASK_INDICATORS:
            raise ValueError(f"calibration.task_indicators: one of {', '.join(TASK_INDICATORS)}, "
                             f"got {self.task_indicators!r}")
        if self.small_tasks not in SMALL_TASKS:
            raise ValueError(f"calibration.small_tasks: one of {', '.join(SMALL_TASKS)}, got {self.small_tasks!r}")
        if self.threshold_choice not in THRESHOLD_CHOICES:
            raise ValueError(f"calibration.threshold_choice: one of {', '.join(THRESHOLD_CHOICES)}, "
                             f"got {self.threshold_choice!r}")
        for width in self.smoothing:
            Calibration(smoothing=width)  # the runtime's own check of one width
        Calibration(span_extension=self.span_extension)

    def choices(self) -> dict:
        """The keyword arguments of training.detector_scoring.fit_calibration / calibrate that this section sets
        (every call site passes them by name, so a new option cannot land in another's place)."""
        return {"aggregations": self.window_aggregation, "combiner_modes": self.combiner,
                "smoothings": self.smoothing, "selection": self.selection, "task_indicators": self.task_indicators,
                "span_extension": self.span_extension, "small_tasks": self.small_tasks,
                "threshold_choice": self.threshold_choice}


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
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)

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
        raise DataError(f"data: {name!r} is evaluation-only (the full RAGTruth test split is never trained "
                        "on); list it under data.eval_sources")


def _sample(rows: list[SpanRecord], limit: int | None, seed: int, name: str) -> list[SpanRecord]:
    if limit is None or len(rows) <= limit:
        return rows
    rows = sorted(rows, key=lambda r: r.id)
    return random.Random(f"{seed}:{name}").sample(rows, limit)


def load_mixture(cfg: DetectorConfig, data_dir, report) -> tuple[list[SpanRecord], Counter]:
    """Span sources + synthetic records, deduplicated, length-checked; returns (records, synthetic stats)."""
    d, seed = cfg.data, cfg.run.seed
    loaded: dict[str, list[SpanRecord]] = {}

    def load(name: str) -> list[SpanRecord]:  # once per source, so its problems are reported once
        _check_trainable(name)
        if name not in loaded:
            loaded[name] = load_span_source(name, data_dir, report)
        return loaded[name]

    records: list[SpanRecord] = []
    for spec in d.sources:
        rows = _sample(load(spec.name), spec.limit, seed, spec.name)
        log.info("%-22s %6d records (%d with spans)", spec.name, len(rows), sum(r.label for r in rows))
        records.extend(rows)
    stats: Counter = Counter()
    if d.synthetic.sources:
        pairs = []
        for spec in d.synthetic.sources:
            faithful = [r for r in load(spec.name) if not r.spans]
            pairs.extend(_sample(faithful, spec.limit, seed, "synthetic:" + spec.name))
        synth, stats = generate_synthetic(pairs, seed=seed, faithful_fraction=d.synthetic.faithful_fraction,
                                          transforms=d.synthetic.transforms, max_edits=d.synthetic.max_edits)
        log.info("synthetic: %d records from %d faithful pairs: %s", len(synth), len(pairs), dict(stats))
        records.extend(synth)
    if d.structured_context == "text":
        for r in records:
            r.context = as_structured_text(r.context) or r.context
    records, n_dup = dedup(records, key=lambda r: f"{r.answer}\x00{r.context[:2000]}")
    if n_dup:
        log.info("dropped %d duplicate (context, answer) records", n_dup)
    long = [r.id for r in records if len(r.answer) > d.max_answer_chars]
    if long:
        for rid in long:
            report.add("mixture", f"answer longer than data.max_answer_chars={d.max_answer_chars}", rid)
        records = [r for r in records if len(r.answer) <= d.max_answer_chars]
    if d.max_context_chars:
        for r in records:
            r.context = r.context[:d.max_context_chars]
    return records, stats


def group_key(r: SpanRecord) -> str:
    """Records of one source document stay together: RAGTruth's source_id, else the context itself."""
    origin = r.source.split(":")[-1]
    if r.meta.get("source_id") is not None:
        return f"{origin}\x00id:{r.meta['source_id']}"
    return hashlib.sha1(f"{origin}\x00{r.context}".encode()).hexdigest()


def group_split(records: list[SpanRecord], fractions: tuple[float, float, float], seed: int,
                train_only=()):
    """Train/dev/test by context: records sharing a context (one document, several answers) stay together.
    Records of `train_only` sources all go to train (first) and do not move the split of the others."""
    only = set(train_only)
    groups: dict[str, list[SpanRecord]] = {}
    for r in records:
        if r.source not in only:
            groups.setdefault(group_key(r), []).append(r)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    total = sum(len(g) for g in groups.values())
    bounds = (fractions[2] * total, (fractions[2] + fractions[1]) * total)
    test, dev, train = [], [], []
    seen = 0
    for k in keys:
        part = test if seen < bounds[0] else dev if seen < bounds[1] else train
        part.extend(groups[k])
        seen += len(groups[k])
    rng = random.Random(seed + 1)
    for part in (train, dev, test):
        part.sort(key=lambda r: r.id)
        rng.shuffle(part)
    return [r for r in records if r.source in only] + train, dev, test


def run_split(cfg: DetectorConfig, records: list[SpanRecord]):
    """The run's train / dev / test records (data.split fractions, grouped by source, seeded by run.seed); records
    of `data.train_only` sources all go to train."""
    s = cfg.data.split
    return group_split(records, (1 - s.dev - s.test, s.dev, s.test), cfg.run.seed, cfg.data.train_only)


def training_example(tokenizer, rec: SpanRecord, max_length: int, overlap: int, mode: str):
    """(DetectorInput with labels, masked token count): one window per record (see the module docstring)."""
    q, a, task = rec.question, rec.answer, rec.task_type
    if mode == "head":
        return encode_detector_input(tokenizer, rec.context, q, a, max_length, task_type=task, spans=rec.spans), 0
    wins = context_windows(tokenizer, rec.context, q, a, max_length, overlap=overlap, task_type=task,
                           spans=rec.spans, fill="packed" if mode == "packed" else "full")
    if len(wins) == 1 and not wins[0].context_truncated:
        return wins[0], 0
    context = rec.context
    best = rank_windows(wins, context, a)[0]  # the window the runtime ranks first (max_windows)
    enc = wins[best]
    ranges = enc.meta.get("context_char_ranges") or [enc.context_char_range]
    texts = {best: "\n".join(context[s:e] for s, e in ranges)}
    # Answer sentences whose evidence lies largely outside this window: their "supported" labels would be wrong
    # here, so those tokens are masked (their "hallucinated" labels stay: unsupported anywhere). "Largely": a
    # number the context has but the window lacks, or >= 30% of the sentence's content words.
    full, seen = ContextIndex(f"{context}\n{q or ''}"), ContextIndex(f"{texts[best]}\n{q or ''}")
    words = [(s, bool(fw[0] or fw[2]) and not (ff[0] or ff[2]), bool(fw[0]) and not ff[0], bool(fw[3]))
             for (s, _, fw), (_, _, ff) in zip(word_signals(a, seen, copy=False), word_signals(a, full, copy=False))]
    masked = 0
    for s0, e0 in sentences(a):
        inside = [w for w in words if s0 <= w[0] < e0 and not w[3]]
        lost = [w for w in inside if w[1]]
        if not lost or not (any(w[2] for w in lost) or len(lost) >= 0.3 * len(inside)):
            continue
        for i, (ts, _) in enumerate(enc.answer_offsets):
            pos = enc.answer_start + i
            if s0 <= ts < e0 and enc.labels[pos] == 0:
                enc.labels[pos] = IGNORE_INDEX
                masked += 1
    return enc, masked


def check_answer_types(cfg: DetectorConfig, base: str | None = None, tokenizer=None) -> None:
    """ConfigError when data.answer_types needs token types the base model does not have (ModernBERT, MPNet):
    checked before any data is loaded."""
    if cfg.data.answer_types == "plain":
        return
    from transformers import AutoConfig

    base = base or resolve_base_model(cfg.model.base_model)
    tokenizer = tokenizer or load_tokenizer(base)
    config = AutoConfig.from_pretrained(base)
    if "token_type_ids" not in tokenizer.model_input_names or getattr(config, "type_vocab_size", 0) < 2:
        raise ConfigError(f"data.answer_types: {cfg.data.answer_types!r} needs an encoder with token types (BERT "
                          f"family); {cfg.model.base_model} ({config.model_type}) has none")


def grounding_types(enc, rec: SpanRecord):
    """`enc` with the answer token types of data.answer_types "grounding", computed against the record's whole
    context and question: what the runtime computes them against when its windows read the whole context."""
    grounding = grounding_features(rec.answer, rec.context, rec.question, enc.answer_offsets, copy=False)
    return enc.with_answer_types(answer_type_ids(grounding))


def encode_records(tokenizer, records: list[SpanRecord], max_length: int, report, split: str,
                   with_token_types: bool, overlap: int = 128, mode: str = "answer_overlap",
                   answer_types: str = "plain"):
    """Features for the collator; returns (features, {"context_cut": n, "masked_tokens": n})."""
    feats, counts = [], Counter()
    for r in records:
        try:
            enc, masked = training_example(tokenizer, r, max_length, overlap, mode)
        except AnswerTooLongError as exc:
            report.add(f"{split} split", f"question + answer longer than max_length={max_length}", r.id)
            log.debug("%s: %s", r.id, exc)
            continue
        if answer_types == "grounding":
            enc = grounding_types(enc, r)
            counts["typed_tokens"] += sum(t > 1 for t in enc.token_type_ids[enc.answer_slice])
        counts["context_cut"] += enc.context_truncated
        counts["masked_tokens"] += masked
        counts["examples_with_masked_tokens"] += bool(masked)
        f = {"input_ids": enc.input_ids, "attention_mask": enc.attention_mask, "labels": enc.labels}
        if with_token_types:
            f["token_type_ids"] = enc.token_type_ids
        feats.append(f)
    return feats, counts


def augment_training(cfg: DetectorConfig, train_recs: list[SpanRecord]) -> tuple[list[SpanRecord], Counter]:
    """Recombination and context edits of the configured sources' training records (after the split)."""
    a, stats = cfg.data.augment, Counter()
    base = [r for r in train_recs if r.source in a.sources]
    if not base:
        return train_recs, stats
    extra, st = recombine(base, cfg.run.seed, a.splice_per_record, a.remove)
    stats.update(st)
    if a.edits:
        edits, st = context_edits(base, cfg.run.seed)
        extra += edits
        stats.update({f"edit_{k}": v for k, v in st.items()})
    for r in extra:
        r.source = f"augment:{r.source}"
    return train_recs + extra, stats


def token_metrics(logits: np.ndarray, labels: np.ndarray) -> dict:
    """Dev metrics from Trainer predictions: token P/R/F1 of HALLUCINATED at the argmax, example F1, and the
    token-level average precision of P(HALLUCINATED) (answer tokens only; 0.0 without a hallucinated token)."""
    from sklearn.metrics import average_precision_score, f1_score, precision_recall_fscore_support

    pred = np.argmax(logits, axis=-1)
    mask = labels != IGNORE_INDEX
    p, r, f, _ = precision_recall_fscore_support(labels[mask], pred[mask], labels=[1], average=None,
                                                 zero_division=0)
    ex_true = [int((labels[i][mask[i]] == 1).any()) for i in range(len(labels))]
    ex_pred = [int((pred[i][mask[i]] == 1).any()) for i in range(len(labels))]
    prob = softmax(logits[mask])[:, 1]
    ap = average_precision_score(labels[mask] == 1, prob) if (labels[mask] == 1).any() else 0.0
    return {"token_f1": float(f[0]), "token_precision": float(p[0]), "token_recall": float(r[0]),
            "example_f1": float(f1_score(ex_true, ex_pred, zero_division=0)), "token_ap": float(ap)}


# ---- run --------------------------------------------------------------------------------------------------

def train_and_calibrate(cfg: DetectorConfig, train_recs: list[SpanRecord], dev_recs: list[SpanRecord], out, report,
                        calibrate_run: bool = True) -> dict:
    """Train on train_recs (augmented here), select the checkpoint and calibrate on dev_recs; save the run dir.

    Returns the metrics dict (written to RUN_DIR/metrics.json by the caller). Used by main() and by the
    cross-validation in eval.detector (one call per fold, with `calibrate_run=False`: the fold calibrates from
    its own predictions of the same records, and one model pass over them is enough; mpnet spent 3.5 min on the
    second).
    """
    from datasets import Dataset
    from transformers import DataCollatorForTokenClassification

    train_recs, aug_stats = augment_training(cfg, train_recs)
    base = resolve_base_model(cfg.model.base_model)
    log.info("base model %s -> %s", cfg.model.base_model, base)
    tokenizer = load_tokenizer(base)
    with_types = "token_type_ids" in tokenizer.model_input_names
    ml, d = cfg.model.max_length, cfg.data
    check_answer_types(cfg, base, tokenizer)
    train_f, train_c = encode_records(tokenizer, train_recs, ml, report, "train", with_types, d.window_overlap,
                                      d.training_windows, d.answer_types)
    dev_f, dev_c = encode_records(tokenizer, dev_recs, ml, report, "dev", with_types, d.window_overlap,
                                  d.training_windows, d.answer_types)
    if d.answer_types != "plain":
        log.info("answer types %s: %d train / %d dev answer tokens typed as unsupported", d.answer_types,
                 train_c["typed_tokens"], dev_c["typed_tokens"])
    n_tokens = sum(len(f["input_ids"]) for f in train_f)
    window_line = (f"training windows ({d.training_windows}, max_length={ml}): context cut in {train_c['context_cut']}"
                   f" of {len(train_f)} train examples; {train_c['masked_tokens']} answer tokens in "
                   f"{train_c['examples_with_masked_tokens']} examples masked (evidence outside the window); "
                   f"dev: {dev_c['context_cut']} cut, {dev_c['masked_tokens']} masked")
    log.info(window_line)
    log.info("train: %d examples, %d tokens per epoch; augmentation %s", len(train_f), n_tokens, dict(aug_stats))

    model = build_model(base, "token", DETECTOR_LABELS, cfg.model.lora, attention_dropout=cfg.model.attention_dropout,
                        seed=cfg.run.seed, reinit_top=cfg.model.reinit_top_layers)
    if d.answer_types == "grounding":
        extend_token_types(model, GROUNDING_TYPE_VOCAB)
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
    save_model(trainer, tokenizer, out, DETECTOR_LABELS)
    plan = {"window_fill": "packed"} if d.training_windows == "packed" else {}
    if d.structured_context != "json":
        plan["structured_context"] = d.structured_context
    if d.answer_types != "plain":
        plan["answer_types"] = d.answer_types
    if plan:  # the runtime (calibration below, CV scoring) reads the model's plan
        write_json(out / "detector.json", plan)
    calibration, table = None, []
    c = cfg.calibration
    if c.enabled and dev_recs and calibrate_run:
        calibration, table, _ = calibrate(out, dev_recs, **c.choices())
    write_json(out / "detector.json", {
        "format": "[CLS] context [SEP] question [SEP] answer [SEP] (inference.spans)",
        "max_length": ml, "threshold": cfg.eval.threshold, "min_span_chars": cfg.eval.min_span_chars,
        "model_input_names": list(tokenizer.model_input_names), **plan,
        "calibration": calibration.to_dict() if calibration else None,
        "calibration_candidates": table, "calibration_records": len(dev_recs)})
    return {
        "dev": dev_metrics, "train_size": len(train_f), "dev_size": len(dev_f),
        "train_tokens_per_epoch": n_tokens, "training_windows": {"train": dict(train_c), "dev": dict(dev_c)},
        "augmentation": dict(aug_stats), "base_model": cfg.model.base_model, "max_length": ml,
        "global_steps": trainer.state.global_step, "train_seconds": round(train_seconds, 1),
        "calibration": calibration.to_dict() if calibration else None, "calibration_candidates": table,
        "hardware": hardware(), "window_line": window_line,
    }


def write_parity_sample(out: Path, records: list[SpanRecord], n: int = 512, seed: int = 0) -> Path:
    """RUN_DIR/parity.jsonl: inputs (context, question, answer) of n training records, for training.export: its
    parity check when the run has no test split, and the inputs its int8 scheme is chosen on, which the check
    then does not read (2 x export's default --samples; a test split of ~100 records leaves none over). Numeric
    agreement only: no labels, no scores are read from it."""
    picked = random.Random(seed).sample(records, min(n, len(records)))
    rows = [SpanRecord(context=r.context, answer=r.answer, question=r.question) for r in picked]
    path = out / "parity.jsonl"
    write_jsonl(path, rows)
    return path


def recalibrate_run(cfg: DetectorConfig) -> None:
    """Keep the trained model of cfg.run.output_dir and redo its calibration on the same dev split (rebuilt from
    the run's config and seed), after a change to the calibration code or to the config's `calibration`
    section (the only section that may differ from the run's); detector.json, metrics.json and the run's
    config.yaml (its calibration section) are rewritten, the weights are not touched. An ONNX export made before
    must be exported again."""
    out = Path(cfg.run.output_dir)
    for name in ("model.safetensors", "detector.json", "config.yaml"):
        if not (out / name).is_file():
            raise ConfigError(f"run.output_dir: {out} has no {name}; --recalibrate needs a finished Detector run")
    setup_logging(out)

    def comparable(c):
        d = to_dict(c)
        d["run"] = {k: v for k, v in d["run"].items() if k not in ("data_dir", "output_dir")}
        d.pop("calibration")  # what is being redone
        return d

    saved = from_dict(DetectorConfig, read_yaml(out / "config.yaml"), str(out / "config.yaml"))
    if comparable(saved) != comparable(cfg):
        raise ConfigError(f"--config differs from the config {out} was trained with; pass --config "
                          f"{out / 'config.yaml'} to recalibrate that run")
    report = SpanDataReport()
    records, _ = load_mixture(cfg, resolve_data_dir(cfg.run.data_dir), report)
    _, dev_recs, _ = run_split(cfg, records)
    detector_json = read_json(out / "detector.json")
    if detector_json.get("calibration_records") not in (None, len(dev_recs)):
        raise DataError(f"the dev split now has {len(dev_recs)} records, the run calibrated on "
                        f"{detector_json['calibration_records']}: the data changed; train again instead")
    c = cfg.calibration
    calibration, table, _ = calibrate(out, dev_recs, **c.choices())
    fields = {"calibration": calibration.to_dict(), "calibration_candidates": table,
              "calibration_records": len(dev_recs)}
    write_json(out / "detector.json", {**detector_json, **fields})
    saved.calibration = cfg.calibration
    save_config(saved, out / "config.yaml")
    metrics_path = out / "metrics.json"
    metrics = read_json(metrics_path) if metrics_path.is_file() else {}
    write_json(metrics_path, {**metrics, **fields, "recalibrated": time.strftime("%Y-%m-%dT%H:%M:%S")})
    log.info("recalibrated %s on %d dev records; export it again (training.export --overwrite)", out, len(dev_recs))


def main(argv=None) -> None:
    parser = training_parser("python -m training.detector", __doc__.splitlines()[0], "configs/detector.yaml")
    parser.add_argument("--recalibrate", action="store_true",
                        help="keep the trained model of the run dir and redo its calibration on the same dev split")
    args = parser.parse_args(argv)
    cfg = resolve_config(DetectorConfig, args)
    if args.recalibrate:
        recalibrate_run(cfg)
        return

    check_answer_types(cfg)
    out = setup_run(cfg, cfg.run.output_dir)
    data_dir = resolve_data_dir(cfg.run.data_dir)
    for spec in cfg.data.eval_sources:  # fail before training, not after
        get_adapter(spec.name)
    report = SpanDataReport()
    records, synth_stats = load_mixture(cfg, data_dir, report)
    train_recs, dev_recs, test_recs = run_split(cfg, records)
    if not train_recs or not dev_recs:
        raise DataError(f"detector data: {len(train_recs)} train / {len(dev_recs)} dev records; need both")
    table = count_table({"train": train_recs, "dev": dev_recs, "test": test_recs}, [x.lower() for x in DETECTOR_LABELS])
    print(table, flush=True)
    write_jsonl(out / "test.jsonl", test_recs)  # eval.detector --data RUN_DIR/test.jsonl re-scores it
    # training.export's int8 choice (and its parity check, when there is no test split) reads real Detector inputs
    write_parity_sample(out, [*train_recs, *dev_recs])

    metrics = train_and_calibrate(cfg, train_recs, dev_recs, out, report)
    metrics.update(test_size=len(test_recs), synthetic=dict(synth_stats))
    summary = report.summary()
    log.info("data report:\n%s", summary)
    synth_line = f"synthetic: {dict(synth_stats)}" if synth_stats else "synthetic: none"
    (out / "data_counts.txt").write_text(
        f"{table}\n\n{synth_line}\naugmentation: {metrics['augmentation']}\n{metrics.pop('window_line')}\n\n"
        f"{summary}\n", encoding="utf-8")
    write_json(out / "data_report.json", report.to_dict())

    gate = runtime_gate(out)
    if test_recs:
        res, _ = evaluate(gate, test_recs)
        metrics["test"] = res
        o = res["levels"]
        log.info("test (held-out mixture): example F1 %.4f span F1 %.4f token F1 %.4f (n=%d)",
                 o["example"]["overall"]["f1"], o["span"]["overall"]["f1"], o["token"]["overall"]["f1"],
                 res["n_scored"])
    for spec in cfg.data.eval_sources:
        ev_report = SpanDataReport()
        recs = load_span_source(spec.name, data_dir, ev_report)
        recs = recs[:spec.limit] if spec.limit else recs
        res, _ = evaluate(gate, recs)
        res["data_report"] = ev_report.to_dict()
        metrics.setdefault("eval", {})[spec.name] = res
        o = res["levels"]
        log.info("%s: example F1 %.4f span F1 %.4f token F1 %.4f (n=%d)", spec.name,
                 o["example"]["overall"]["f1"], o["span"]["overall"]["f1"], o["token"]["overall"]["f1"],
                 res["n_scored"])
    write_json(out / "metrics.json", metrics)
    log.info("run dir %s", out)


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
