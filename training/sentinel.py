"""Sentinel: does this prompt need fact-checking? Binary prompt classifier (encoder + LoRA).

    python -m training.sentinel --config configs/sentinel.yaml            # published recipe (Hub)
    python -m training.sentinel --config configs/sentinel.offline.yaml    # offline recipe (local data)
    accelerate launch -m training.sentinel --config configs/sentinel.yaml # several GPUs

The labelling rule is docs/sentinel.md. After training, the decision threshold is calibrated on the dev split
for `calibration.min_recall` on FACT_CHECK_NEEDED prompts and written to RUN_DIR/sentinel.json, which the
export copies and the runtime reads when its config sets no `fact_check_model.threshold`. `data.ood` sources
(never trained on) are scored at the end. Leave-one-source-out: `python -m eval.sentinel_loso`.
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from inference.calibration import SENTINEL_CALIBRATION_FILE
from inference.formatting import sentinel_text
from inference.labels import SENTINEL_LABELS
from training.classify import run_sequence_classification, tokenize_records
from training.cli import resolve_config, run_cli, training_parser
from training.config import ModelConfig, RunConfig, SourceSpec, SplitConfig, TrainArgs
from training.data.augment import (
    AugmentConfig,
    BalanceConfig,
    augment_records,
    balance_by_style,
    style_counts,
)
from training.data.base import get_adapter, resolve_data_dir
from training.data.prep import check_classes, count_table, dedup, length_filter, stratified_split
from training.data.records import PromptRecord
from training.models import resolve_base_model

log = logging.getLogger("halugate.training.sentinel")

POS = 1


@dataclass
class SentinelData:
    sources: list[SourceSpec] = field(default_factory=list)
    min_chars: int = 8
    max_chars: int = 4000
    split: SplitConfig = field(default_factory=SplitConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)   # shortcut-breaking rewrites (train only)
    balance: BalanceConfig = field(default_factory=BalanceConfig)   # label balance per prompt style (train only)
    ood: list[str] = field(default_factory=list)  # prompt datasets scored after training, never trained on
    ood_limit: int | None = None                  # at most this many records per OOD dataset

    def validate(self):
        if not self.sources:
            raise ValueError("data.sources: at least one source is required")
        both = sorted({s.name for s in self.sources} & set(self.ood))
        if both:
            raise ValueError(f"data.ood: {both} are also training sources; an OOD test is never trained on")


@dataclass
class CalibrationConfig:
    """The runtime threshold on P(FACT_CHECK_NEEDED), picked on the dev split: the highest threshold whose recall on
    fact-seeking dev prompts is at least min_recall (a missed fact-seeking prompt skips verification)."""

    enabled: bool = True
    min_recall: float = 0.95

    def validate(self):
        if not 0.0 < self.min_recall <= 1.0:
            raise ValueError("calibration.min_recall: must be in (0, 1]")


@dataclass
class LosoConfig:
    """`python -m eval.sentinel_loso`: train without each group, score the group."""

    by: Literal["family", "source"] = "family"
    families: dict[str, list[str]] = field(default_factory=dict)  # family -> sources; unnamed sources: own group
    only: list[str] = field(default_factory=list)                 # run only these groups (default: all)
    # sources in every fold's training part and never held out: rule-generated ones (synthetic_math), which have
    # no outside distribution of their own to generalise to; a fold of them would only pad the mean
    train_only: list[str] = field(default_factory=list)
    epochs: float | None = None        # per-fold training epochs (None: train.epochs)
    max_steps: int | None = None       # per-fold step cap (None: train.max_steps)
    heldout_limit: int | None = 600    # at most this many held-out records scored per group (seeded sample)
    keep_models: bool = False          # keep each fold's weights (a MiniLM fold is ~90 MB, mpnet ~440 MB)
    output_dir: str | None = None      # default: run.output_dir + "-loso"


@dataclass
class SentinelConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/sentinel"))
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainArgs = field(default_factory=TrainArgs)
    data: SentinelData = field(default_factory=SentinelData)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    loso: LosoConfig = field(default_factory=LosoConfig)


def load_prompt_records(data_cfg: SentinelData, data_dir, seed: int) -> list[PromptRecord]:
    """Load every configured source, dedup (within and across sources), length-filter, then cap per source."""
    rng = random.Random(seed)
    records: list[PromptRecord] = []
    for spec in data_cfg.sources:
        rows = _load_source(spec.name, data_dir, data_cfg)
        if spec.limit is not None and len(rows) > spec.limit:
            rows = rng.sample(rows, spec.limit)
        log.info("%-22s %6d records", spec.name, len(rows))
        records.extend(rows)
    records, n_cross = dedup(records, key=lambda r: r.text)
    if n_cross:
        log.info("dropped %d prompts that appear in more than one source", n_cross)
    check_classes(records, SENTINEL_LABELS, "sentinel data")
    return records


def _load_source(name: str, data_dir, data_cfg: SentinelData) -> list[PromptRecord]:
    rows = get_adapter(name, kind="prompt").load(data_dir)
    rows, n_dup = dedup(rows, key=lambda r: r.text)
    rows, n_len = length_filter(rows, lambda r: r.text, data_cfg.min_chars, data_cfg.max_chars)
    log.debug("%s: dropped %d duplicates, %d by length", name, n_dup, n_len)
    return rows


def load_ood_records(data_cfg: SentinelData, data_dir, seed: int) -> dict[str, list[PromptRecord]]:
    rng = random.Random(seed)
    out = {}
    for name in data_cfg.ood:
        rows = _load_source(name, data_dir, data_cfg)
        if data_cfg.ood_limit is not None and len(rows) > data_cfg.ood_limit:
            rows = rng.sample(rows, data_cfg.ood_limit)
        out[name] = rows
    return out


def finish_train_split(train: list[PromptRecord], data_cfg: SentinelData, seed: int) -> list[PromptRecord]:
    """Add the shortcut-breaking rewrites to the training split, then balance labels per style."""
    added = augment_records(train, data_cfg.augment, seed)
    if added:
        log.info("augmentation added %d training records: %s", len(added),
                 dict(sorted(_count(r.meta["augment"] for r in added).items())))
    out = balance_by_style(train + added, data_cfg.balance, seed)
    log.info("training records by style x label: %s", style_counts(out))
    return out


def _count(items) -> dict:
    counts: dict = {}
    for x in items:
        counts[x] = counts.get(x, 0) + 1
    return counts


def to_model_text(records: list[PromptRecord]) -> list[PromptRecord]:
    return [r.replace(text=sentinel_text(r.text)) for r in records]


# ---- calibration ---------------------------------------------------------------------------------------------------

TEST_PREDICTIONS_FILE = "test_predictions.jsonl"


def positive_probs(logits) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True))[:, POS]


def binary_stats(labels, probs, threshold: float) -> dict:
    """Recall (fact-seeking), specificity (others), precision and accuracy of `p >= threshold`."""
    y = np.asarray(labels, dtype=int)
    pred = np.asarray(probs, dtype=np.float64) >= threshold
    tp, fn = int((pred & (y == 1)).sum()), int((~pred & (y == 1)).sum())
    tn, fp = int((~pred & (y == 0)).sum()), int((pred & (y == 0)).sum())
    def ratio(a, b):
        return round(a / b, 4) if b else None
    return {"threshold": threshold, "n": len(y), "n_pos": tp + fn, "n_neg": tn + fp,
            "recall": ratio(tp, tp + fn), "specificity": ratio(tn, tn + fp), "precision": ratio(tp, tp + fp),
            "accuracy": ratio(tp + tn, len(y))}


def calibrate_threshold(labels, probs, min_recall: float = 0.95) -> float | None:
    """The highest threshold t with recall(p >= t) >= min_recall on the positives; None without positives.

    t is a positive's probability, rounded down to 1e-6 (so that positive is still flagged)."""
    y = np.asarray(labels, dtype=int)
    pos = np.sort(np.asarray(probs, dtype=np.float64)[y == 1])
    if len(pos) == 0:
        return None
    misses = math.floor((1.0 - min_recall) * len(pos) + 1e-9)
    t = float(pos[min(misses, len(pos) - 1)])
    return math.floor(t * 1e6) / 1e6


def per_source_stats(records: list[PromptRecord], probs, threshold: float) -> dict:
    out = {}
    for src in sorted({r.source for r in records}):
        idx = [i for i, r in enumerate(records) if r.source == src]
        out[src] = binary_stats([records[i].label for i in idx], np.asarray(probs)[idx], threshold)
    return out


def make_post_eval(cfg: SentinelConfig, ood: dict[str, list[PromptRecord]] | None = None):
    """post_eval for run_sequence_classification: calibrate on dev, write sentinel.json, score test and OOD."""

    def post_eval(trainer, tokenizer, out, dev_recs, dev_logits, test_recs, test_logits) -> dict:
        dev_p, test_p = positive_probs(dev_logits), positive_probs(test_logits)
        dev_y, test_y = [r.label for r in dev_recs], [r.label for r in test_recs]
        result: dict = {}
        threshold = None
        if cfg.calibration.enabled:
            threshold = calibrate_threshold(dev_y, dev_p, cfg.calibration.min_recall)
        if threshold is not None:
            cal = {"threshold": threshold, "label": SENTINEL_LABELS[POS],
                   "target": f"recall >= {cfg.calibration.min_recall} on {SENTINEL_LABELS[POS]} dev prompts",
                   "dev": binary_stats(dev_y, dev_p, threshold), "test": binary_stats(test_y, test_p, threshold)}
            (out / SENTINEL_CALIBRATION_FILE).write_text(json.dumps({"calibration": cal}, indent=2) + "\n")
            result["calibration"] = cal
            log.info("calibrated threshold %.4f: dev recall %s precision %s; test recall %s precision %s",
                     threshold, cal["dev"]["recall"], cal["dev"]["precision"], cal["test"]["recall"],
                     cal["test"]["precision"])
        thresholds = {"0.5": 0.5, **({"calibrated": threshold} if threshold is not None else {})}
        # per-record probabilities: eval.sentinel_loso pools the held-out groups' ones (a threshold from data the
        # model's sources did not include)
        with open(out / TEST_PREDICTIONS_FILE, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"source": r.source, "label": int(r.label), "p_fact": round(float(p), 6),
                                      "text": r.text}) + "\n" for r, p in zip(test_recs, test_p))
        result["test_by_threshold"] = {k: binary_stats(test_y, test_p, t) for k, t in thresholds.items()}
        result["test_per_source"] = {k: per_source_stats(test_recs, test_p, t) for k, t in thresholds.items()}
        if ood:
            result["ood"] = score_ood(trainer, tokenizer, cfg, ood, thresholds)
        return result

    return post_eval


def score_ood(trainer, tokenizer, cfg: SentinelConfig, ood: dict[str, list[PromptRecord]], thresholds: dict) -> dict:
    out = {}
    for name, recs in ood.items():
        recs = to_model_text(recs)
        pred = trainer.predict(tokenize_records(tokenizer, recs, cfg.model.max_length))
        p = positive_probs(pred.predictions)
        out[name] = {k: binary_stats([r.label for r in recs], p, t) for k, t in thresholds.items()}
        log.info("OOD %-20s %s", name, {k: (v["recall"], v["specificity"]) for k, v in out[name].items()})
    return out


def main(argv=None) -> None:
    parser = training_parser("python -m training.sentinel", __doc__.splitlines()[0], "configs/sentinel.yaml")
    cfg = resolve_config(SentinelConfig, parser.parse_args(argv))

    resolve_base_model(cfg.model.base_model)  # fail in seconds, before loading data, if it can't be fetched
    data_dir = resolve_data_dir(cfg.run.data_dir)
    records = load_prompt_records(cfg.data, data_dir, cfg.run.seed)
    ood = load_ood_records(cfg.data, data_dir, cfg.run.seed)
    train, dev, test = stratified_split(
        records, (1 - cfg.data.split.dev - cfg.data.split.test, cfg.data.split.dev, cfg.data.split.test),
        seed=cfg.run.seed)
    train = finish_train_split(train, cfg.data, cfg.run.seed)
    train, dev, test = to_model_text(train), to_model_text(dev), to_model_text(test)
    for name, part in (("train", train), ("dev", dev), ("test", test)):
        check_classes(part, SENTINEL_LABELS, f"sentinel {name} split")
    table = count_table({"train": train, "dev": dev, "test": test}, SENTINEL_LABELS)
    print(table, flush=True)
    run_sequence_classification(cfg, train, dev, test, SENTINEL_LABELS, table, post_eval=make_post_eval(cfg, ood))


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
