"""Record hygiene shared by every recipe: dedup, length filtering, stratified splits and count tables."""

from __future__ import annotations

import random
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

from training.data.base import DataError
from training.data.records import Record


def normalize_text(text: str) -> str:
    """Key for dedup: NFKC, casefold, collapsed whitespace."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", text).strip()


def dedup(records: list[Record], key: Callable[[Record], str]) -> tuple[list[Record], int]:
    """Keep the first record per normalised key; returns (kept, number removed)."""
    seen: set[str] = set()
    kept = []
    for rec in records:
        k = normalize_text(key(rec))
        if k in seen:
            continue
        seen.add(k)
        kept.append(rec)
    return kept, len(records) - len(kept)


def length_filter(
    records: list[Record], text: Callable[[Record], str], min_chars: int = 1, max_chars: int | None = None
) -> tuple[list[Record], int]:
    kept = [
        r for r in records
        if len(text(r).strip()) >= min_chars and (max_chars is None or len(text(r)) <= max_chars)
    ]
    return kept, len(records) - len(kept)


def stratified_split(
    records: Sequence[Record],
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    seed: int = 42,
    strata: Callable[[Record], object] = lambda r: (r.source, r.label),
) -> tuple[list[Record], list[Record], list[Record]]:
    """Split each stratum (default: source x label) by the same fractions, with a fixed seed.

    Records are ordered by their normalised text inside a stratum before shuffling, so the split depends only
    on the data and the seed, not on load order.
    """
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must sum to 1, got {fractions}")
    groups: dict[object, list[Record]] = defaultdict(list)
    for rec in records:
        groups[strata(rec)].append(rec)
    # the JSONL form (declared fields and meta) orders a stratum, as it did when records were dicts: splits stay
    # the same across versions
    train, dev, test = [], [], []
    rng = random.Random(seed)
    for key in sorted(groups, key=repr):
        items = sorted(groups[key], key=lambda r: repr(sorted((k, str(v)) for k, v in r.to_dict().items())))
        rng.shuffle(items)
        n = len(items)
        n_test = round(n * fractions[2])
        n_dev = round(n * fractions[1])
        if n >= 3:  # every stratum with enough rows is represented in each split
            n_test, n_dev = max(n_test, 1), max(n_dev, 1)
        test.extend(items[:n_test])
        dev.extend(items[n_test:n_test + n_dev])
        train.extend(items[n_test + n_dev:])
    for part in (train, dev, test):
        rng.shuffle(part)
    return train, dev, test


def count_table(splits: dict[str, list[Record]], label_names: list[str] | None = None) -> str:
    """A plain-text per-source, per-label count table over the given splits."""
    counts: dict[tuple[str, object], Counter] = defaultdict(Counter)
    labels: set = set()
    for split, recs in splits.items():
        for r in recs:
            labels.add(r.label)
            counts[(r.source, r.label)][split] += 1
    def lname(lab):
        if label_names is not None and isinstance(lab, int) and 0 <= lab < len(label_names):
            return label_names[lab]
        return str(lab)
    header = ["source", "label", *splits.keys(), "total"]
    rows = []
    totals = Counter()
    for (src, lab), c in sorted(counts.items(), key=lambda kv: (kv[0][0], repr(kv[0][1]))):
        row_total = sum(c.values())
        totals.update(c)
        rows.append([src, lname(lab), *(str(c[s]) for s in splits), str(row_total)])
    rows.append(["TOTAL", "", *(str(totals[s]) for s in splits), str(sum(totals.values()))])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = lambda cols: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cols, widths)))
    lines = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]
    return "\n".join(lines)


def check_classes(records: list[Record], label_names: list[str], where: str) -> None:
    """Stop with the counts when a class is empty (after filtering there is nothing to learn it from)."""
    counts = Counter(r.label for r in records)
    empty = [name for i, name in enumerate(label_names) if counts.get(i, 0) == 0]
    if empty:
        summary = ", ".join(f"{name}={counts.get(i, 0)}" for i, name in enumerate(label_names))
        raise DataError(f"{where}: class {', '.join(empty)} has no examples after filtering ({summary})")
