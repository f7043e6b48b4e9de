"""NLI Explainer: entailment / neutral / contradiction for (premise, hypothesis) pairs (sequence classification).

    python -m training.explainer --config configs/explainer.yaml            # published recipe (Hub)
    python -m training.explainer --config configs/explainer.offline.yaml    # offline recipe (local data)
    accelerate launch -m training.explainer --config configs/explainer.yaml # several GPUs

Evaluation sets (MNLI dev matched/mismatched, SNLI test, ANLI dev R1-R3, plus SICK test, RTE dev and the
grounding test sets) never enter training: every training pair whose normalised (premise, hypothesis) text or
upstream pair id appears in one of them is removed, and the count is printed per source.

Two-way datasets (RTE, MED, SummEdits, BEGIN, FaithDial audit) carry label NOT_ENTAILMENT (3). They are trained
with a two-way loss mask: -log(p_neutral + p_contradiction), so the model is told "not entailed" without being
told which of the two it is. They go to the training split only; the held-out dev/test splits (model selection
and metrics.json) are three-way. `data.two_way: neutral` instead maps them to neutral (the common, lossy rule).
"""

from __future__ import annotations

import logging
import random
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from inference.formatting import nli_pair
from inference.labels import EXPLAINER_LABELS
from training.classify import run_sequence_classification
from training.cli import resolve_config, run_cli, training_parser
from training.config import ModelConfig, RunConfig, SourceSpec, SplitConfig, TrainArgs
from training.data.base import DataError, get_adapter, resolve_data_dir
from training.data.nli import (
    CORE_EVAL_SETS,
    EVAL_SETS,
    NEUTRAL,
    NOT_ENTAILMENT,
    TRAIN_LABEL_NAMES,
    TRAINABLE_EVAL_SETS,
)
from training.data.prep import check_classes, count_table, stratified_split
from training.data.records import PairRecord
from training.models import resolve_base_model

log = logging.getLogger("halugate.training.explainer")


@dataclass
class ExplainerSource(SourceSpec):
    """One source of the mixture: `limit` (pairs kept after dedup and filtering, sampled by seed; None = all) is
    its weight in the mixture; `group` names the ablation group it belongs to (data.exclude_groups drops whole
    groups); `max_chars` overrides data.max_chars for this source (passage-length sources)."""

    group: str = "base"
    max_chars: int | None = None


@dataclass
class ExplainerData:
    sources: list[ExplainerSource] = field(default_factory=list)
    min_chars: int = 1  # per side: a pair with an empty premise or hypothesis is dropped
    max_chars: int = 4000  # premise + hypothesis; long grounding documents beyond this are dropped
    two_way: Literal["mask", "neutral"] = "mask"
    eval_sets: list[str] = field(default_factory=lambda: list(EVAL_SETS))  # kept out of training
    split: SplitConfig = field(default_factory=lambda: SplitConfig(dev=0.05, test=0.05))
    exclude_groups: list[str] = field(default_factory=list)  # ablations: drop these source groups
    scale: float = 1.0  # multiplies every source's size (its limit, or all its pairs): same mixture, other size

    def active_sources(self) -> list[SourceSpec]:
        return [s for s in self.sources if getattr(s, "group", "base") not in self.exclude_groups]

    def effective_eval_sets(self) -> list[str]:
        """The evaluation sets training pairs are checked against: data.eval_sets less a trainable evaluation set
        (TRAINABLE_EVAL_SETS: MNLI dev-mismatched) while it is an active training source."""
        trained = {s.name for s in self.active_sources()} & set(TRAINABLE_EVAL_SETS)
        return [e for e in self.eval_sets if e not in trained]

    def validate(self):
        if not self.sources:
            raise ValueError("data.sources: at least one source is required")
        if not self.active_sources():
            raise ValueError(f"data.exclude_groups: {self.exclude_groups} leaves no source")
        if self.min_chars < 0 or self.max_chars <= self.min_chars:
            raise ValueError("data.max_chars: must be greater than data.min_chars")
        if not 0 < self.scale <= 100:
            raise ValueError("data.scale: must be in (0, 100]")
        bad = [s.name for s in self.sources if getattr(s, "max_chars", None) is not None and s.max_chars < 2]
        if bad:
            raise ValueError(f"data.sources: {bad[0]}: max_chars must be >= 2")
        unknown = [s for s in self.eval_sets if s not in EVAL_SETS]
        if unknown:
            raise ValueError(f"data.eval_sets: unknown evaluation set {unknown[0]!r} "
                             f"(known: {', '.join(EVAL_SETS)})")
        missing = [s for s in CORE_EVAL_SETS if s not in self.eval_sets]
        if missing:
            raise ValueError(f"data.eval_sets: {missing[0]!r} is part of the evaluation protocol and must stay "
                             "out of training")


@dataclass
class ExplainerConfig:
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/explainer"))
    model: ModelConfig = field(default_factory=lambda: ModelConfig(max_length=256))
    train: TrainArgs = field(default_factory=TrainArgs)
    data: ExplainerData = field(default_factory=ExplainerData)


# ---- keeping evaluation pairs out of training ------------------------------------------------------------------

def pair_key(premise: str, hypothesis: str) -> str:
    """Dedup key of a pair: ASCII letters and digits only, lower-cased, per side.

    Punctuation, spacing, tokenisation ("church ." vs "church.") and mojibake ("Vedr?┬á" vs "Vedrà") differ
    between copies of the same MNLI/SNLI pair; the key ignores all of them.
    """
    def side(text: str) -> str:
        text = unicodedata.normalize("NFKD", text).casefold()
        return re.sub(r"[^a-z0-9]+", "", text)
    return side(premise) + "\x1f" + side(hypothesis)


@dataclass
class EvalIndex:
    """Pair keys and upstream pair ids of the evaluation sets."""

    keys: set[str] = field(default_factory=set)
    ids: set[str] = field(default_factory=set)
    loaded: dict[str, int] = field(default_factory=dict)  # set -> pairs
    skipped: dict[str, str] = field(default_factory=dict)  # set -> why it could not be loaded

    def add(self, name: str, records: list[PairRecord]) -> None:
        for r in records:
            self.keys.add(pair_key(r.premise, r.hypothesis))
            if r.meta.get("pair_id"):
                self.ids.add(r.meta["pair_id"])
        self.loaded[name] = len(records)

    def contains(self, rec: PairRecord) -> bool:
        pair_id = rec.meta.get("pair_id")
        return pair_key(rec.premise, rec.hypothesis) in self.keys or (bool(pair_id) and pair_id in self.ids)


def load_eval_index(names: list[str], data_dir) -> EvalIndex:
    """Load every evaluation set; the core protocol sets must load, the others are skipped with a warning."""
    index = EvalIndex()
    for name in names:
        try:
            index.add(name, get_adapter(name).load(data_dir))
        except DataError as exc:
            if name in CORE_EVAL_SETS:
                raise DataError(f"evaluation set {name} could not be loaded, so training pairs cannot be checked "
                                f"against it: {exc}") from None
            index.skipped[name] = str(exc).splitlines()[0][:200]
            log.warning("evaluation set %s not available (%s); training pairs are not checked against it",
                        name, index.skipped[name])
    return index


def remove_eval_overlap(records: list[PairRecord], index: EvalIndex) -> tuple[list[PairRecord], int]:
    kept = [r for r in records if not index.contains(r)]
    return kept, len(records) - len(kept)


def dedup_pairs(records: list[PairRecord]) -> tuple[list[PairRecord], int]:
    seen: set[str] = set()
    kept = []
    for r in records:
        k = pair_key(r.premise, r.hypothesis)
        if k not in seen:
            seen.add(k)
            kept.append(r)
    return kept, len(records) - len(kept)


# ---- records -------------------------------------------------------------------------------------------------

def mixture_table(summary: dict[str, dict]) -> str:
    """Per source: group, pairs loaded, removed (duplicates within the source, evaluation overlap, length,
    duplicates of an earlier source), kept and share of the mixture."""
    cols = ("loaded", "duplicates", "eval_overlap", "length_filtered", "cross_duplicates", "kept")
    total = sum(v["kept"] for v in summary.values()) or 1
    head = ("source", "group", "loaded", "dup", "eval", "length", "xdup", "kept", "share")
    rows = [(k, v.get("group", "base"), *(str(v.get(c, 0)) for c in cols), f"{100 * v['kept'] / total:.1f}%")
            for k, v in summary.items()]
    rows.append(("TOTAL", "", *(str(sum(v.get(c, 0) for v in summary.values())) for c in cols), "100.0%"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = lambda r: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def load_nli_records(data_cfg: ExplainerData, data_dir, seed: int) -> tuple[list[PairRecord], dict]:
    """Load, normalise, dedup, drop evaluation pairs, length-filter and cap every source; returns the records
    and a summary (per source: loaded, duplicates, eval_overlap, too_long, kept)."""
    rng = random.Random(seed)
    sources = data_cfg.active_sources()
    for spec in sources:
        if spec.name in EVAL_SETS and spec.name not in TRAINABLE_EVAL_SETS:
            raise DataError(f"data.sources: {spec.name!r} is an evaluation set and cannot be trained on")
    eval_sets = data_cfg.effective_eval_sets()
    trained_eval = [e for e in data_cfg.eval_sets if e not in eval_sets]
    if trained_eval:
        print(f"training on evaluation set(s) {', '.join(trained_eval)}: they are no longer held out; report "
              "the others (e.g. MNLI dev-matched only)", flush=True)
    index = load_eval_index(eval_sets, data_dir)
    log.info("evaluation sets kept out of training: %s",
             ", ".join(f"{k} ({v})" for k, v in index.loaded.items()))
    records: list[PairRecord] = []
    summary: dict[str, dict] = {}
    for spec in sources:
        adapter = get_adapter(spec.name)
        if adapter.kind != "nli":
            raise DataError(f"data.sources: {spec.name!r} is a {adapter.kind} dataset, not an NLI dataset")
        rows = adapter.load(data_dir)
        n_loaded = len(rows)
        for r in rows:
            r.premise, r.hypothesis = nli_pair(r.premise, r.hypothesis)
        rows, n_dup = dedup_pairs(rows)
        rows, n_eval = remove_eval_overlap(rows, index)
        max_chars = getattr(spec, "max_chars", None) or data_cfg.max_chars
        kept = [r for r in rows if min(len(r.premise), len(r.hypothesis)) >= max(data_cfg.min_chars, 1)
                and len(r.premise) + len(r.hypothesis) <= max_chars]
        n_len = len(rows) - len(kept)
        size = spec.limit if spec.limit is not None else len(kept)
        size = max(1, round(size * data_cfg.scale)) if data_cfg.scale != 1.0 else size
        if len(kept) > size:
            kept = rng.sample(kept, size)
        summary[spec.name] = {"group": getattr(spec, "group", "base"), "loaded": n_loaded, "duplicates": n_dup,
                              "eval_overlap": n_eval, "length_filtered": n_len, "kept": len(kept)}
        log.info("%-16s %6d loaded, %5d duplicates, %5d in evaluation sets, %5d by length -> %6d",
                 spec.name, n_loaded, n_dup, n_eval, n_len, len(kept))
        records.extend(kept)
    before = Counter(r.source for r in records)
    records, n_cross = dedup_pairs(records)
    after = Counter(r.source for r in records)
    for name, v in summary.items():  # a pair in several sources is kept in the first one listed
        v["cross_duplicates"] = before[name] - after[name]
        v["kept"] = after[name]
    total_eval = sum(s["eval_overlap"] for s in summary.values())
    per_source = ", ".join(f"{k}: {v['eval_overlap']}" for k, v in summary.items() if v["eval_overlap"])
    print(f"removed {total_eval} training pairs that appear in an evaluation set ({per_source or 'none'})",
          flush=True)
    if n_cross:
        log.info("dropped %d pairs that appear in more than one source", n_cross)
    print("training mixture (pairs per source; a pair found in several sources stays in the first one "
          "listed):\n" + mixture_table(summary), flush=True)
    if data_cfg.two_way == "neutral":
        for r in records:
            if r.label == NOT_ENTAILMENT:
                r.label = NEUTRAL
    info = {"sources": summary, "eval_overlap_removed": total_eval, "cross_source_duplicates": n_cross,
            "eval_sets": index.loaded, "eval_sets_skipped": index.skipped, "two_way": data_cfg.two_way,
            "trained_on_eval_sets": trained_eval, "excluded_groups": list(data_cfg.exclude_groups),
            "scale": data_cfg.scale}
    return records, info


def split_records(records: list[PairRecord], split: SplitConfig, seed: int):
    """Three-way rows are split train/dev/test by (source, label); two-way rows and `train_only` rows (sources
    of near-duplicate minimal pairs, such as CAD) all go to train."""
    three = [r for r in records if r.label != NOT_ENTAILMENT and not r.meta.get("train_only")]
    two = [r for r in records if r.label == NOT_ENTAILMENT or r.meta.get("train_only")]
    # A two-way source keeps its entailment rows with its not_entailment rows (in train): a dev/test split of
    # such a source would be all-entailment and say nothing.
    two_way_sources = {r.source for r in two}
    two += [r for r in three if r.source in two_way_sources]
    three = [r for r in three if r.source not in two_way_sources]
    train, dev, test = stratified_split(three, (1 - split.dev - split.test, split.dev, split.test), seed=seed)
    train = train + two
    random.Random(seed).shuffle(train)
    return train, dev, test


# ---- the two-way loss mask -----------------------------------------------------------------------------------

def two_way_masked_loss(logits, labels, weight=None, label_smoothing: float = 0.0):
    """Cross-entropy over the three classes; rows labelled NOT_ENTAILMENT (3) get -log(p_neutral + p_contradiction).

    `weight` (optional) holds per-label weights indexed by the label value (3 or 4 entries; a two-way row
    without its own entry weighs 1). The mean is weighted like torch's cross_entropy; -100 rows are ignored.
    `label_smoothing` (train.label_smoothing) mixes eps of the uniform target over the three classes into every
    row, as torch's cross_entropy does: on three-way rows the loss is exactly torch's smoothed, weighted one.
    """
    import torch

    logits = logits.reshape(-1, logits.shape[-1]).float()
    labels = labels.reshape(-1)
    logp = torch.log_softmax(logits, dim=-1)
    three = (labels >= 0) & (labels < NOT_ENTAILMENT)
    two = labels == NOT_ENTAILMENT
    nll_three = -logp.gather(1, labels.clamp(0, NOT_ENTAILMENT - 1).unsqueeze(1)).squeeze(1)
    nll_two = -torch.logsumexp(logp[:, [1, 2]], dim=-1)
    nll = torch.where(three, nll_three, torch.where(two, nll_two, torch.zeros_like(nll_three)))
    w = (three | two).to(nll.dtype)
    full = torch.ones(NOT_ENTAILMENT + 1, dtype=nll.dtype, device=nll.device)
    if weight is not None:
        weight = torch.as_tensor(weight, dtype=nll.dtype, device=nll.device)
        full[:len(weight)] = weight[:NOT_ENTAILMENT + 1]
        w = w * full[labels.clamp(0, NOT_ENTAILMENT)]
    total = (nll * w).sum()
    if label_smoothing:
        # torch: (1 - eps) * w[y] * nll + eps / C * sum_c w[c] * -log p_c, divided by the sum of w[y]
        uniform = -(logp * full[:NOT_ENTAILMENT]).sum(-1) / NOT_ENTAILMENT
        total = (1 - label_smoothing) * total + label_smoothing * (uniform * (three | two)).sum()
    return total / w.sum().clamp_min(1e-12)


def main(argv=None) -> None:
    parser = training_parser("python -m training.explainer", __doc__.splitlines()[0], "configs/explainer.yaml")
    cfg = resolve_config(ExplainerConfig, parser.parse_args(argv))

    resolve_base_model(cfg.model.base_model)  # an unreachable Hub fails here in seconds, before any data loading
    data_dir = resolve_data_dir(cfg.run.data_dir)
    records, info = load_nli_records(cfg.data, data_dir, cfg.run.seed)
    train, dev, test = split_records(records, cfg.data.split, cfg.run.seed)
    check_classes(train, EXPLAINER_LABELS, "explainer train split")
    for name, part in (("dev", dev), ("test", test)):
        check_classes(part, EXPLAINER_LABELS, f"explainer {name} split (three-way sources only)")
    table = count_table({"train": train, "dev": dev, "test": test}, TRAIN_LABEL_NAMES)
    table += f"\n\nremoved as evaluation-set pairs: {info['eval_overlap_removed']}"
    print(table, flush=True)
    has_two_way = any(r.label == NOT_ENTAILMENT for r in train)
    run_sequence_classification(cfg, train, dev, test, EXPLAINER_LABELS,
                                "mixture:\n" + mixture_table(info["sources"]) + "\n\nsplits:\n" + table,
                                extra_eval={"data": info},
                                loss_fn=two_way_masked_loss if has_two_way else None)


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
