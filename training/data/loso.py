"""Leave-one-source-out / leave-one-family-out folds for measuring generalization (docs/sentinel.md).

A fold holds out every record of one group (a source, or a family of sources such as "trivia" or "code") and
trains on the others. The held-out group never reaches training in any form:

- records are assigned to a fold by their `source` only, after dedup across sources (a prompt that appears in
  two sources is kept once, so the same text cannot sit on both sides);
- augmentation (training.data.augment) runs after the fold split, on the fold's training part only, and
  augmented records keep their origin's `source`;
- `check_no_leak` re-checks both (sources and normalised texts) and is called for every fold.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from training.data.base import DataError
from training.data.prep import normalize_text
from training.data.records import PromptRecord


@dataclass
class Fold:
    name: str                # the held-out group
    heldout_sources: list[str]
    train: list[PromptRecord]        # records of every other group (to be split into train / dev by the caller)
    heldout: list[PromptRecord]      # every record of the held-out group


def group_of(source: str, families: dict[str, list[str]], by: str) -> str:
    if by == "source":
        return source
    for fam, members in families.items():
        if source in members:
            return fam
    return source  # a source no family names is its own group


def check_families(families: dict[str, list[str]], sources: list[str], train_only: list[str] = ()) -> None:
    seen: dict[str, str] = {s: "train_only" for s in train_only}
    for fam, members in families.items():
        for s in members:
            if s in seen:
                raise DataError(f"loso.families: source {s!r} is in both {seen[s]!r} and {fam!r}")
            seen[s] = fam
    unknown = sorted(set(seen) - set(sources))
    if unknown:
        raise DataError(f"loso.families / loso.train_only: {unknown} are not in data.sources")


def loso_folds(records: list[PromptRecord], families: dict[str, list[str]] | None = None, by: str = "family",
               only: list[str] | None = None, train_only: list[str] = ()) -> Iterator[Fold]:
    """One fold per group (sorted by name), or only the named groups. `train_only` sources are in every fold's
    training part and form no group."""
    families = families or {}
    groups: dict[str, list[str]] = {}
    for src in sorted({r.source for r in records} - set(train_only)):
        groups.setdefault(group_of(src, families, by), []).append(src)
    if only:
        missing = sorted(set(only) - set(groups))
        if missing:
            raise DataError(f"loso.only: no group named {missing}; groups: {', '.join(sorted(groups))}")
    for name in sorted(groups):
        if only and name not in only:
            continue
        held = set(groups[name])
        fold = Fold(name, sorted(held), [r for r in records if r.source not in held],
                    [r for r in records if r.source in held])
        check_no_leak(fold.train, fold.heldout)
        yield fold


def check_no_leak(train: list[PromptRecord], heldout: list[PromptRecord]) -> None:
    """Raise when a held-out source, or the normalised text of a held-out record, is in the training records."""
    held_sources = {r.source for r in heldout}
    bad = sorted({r.source for r in train} & held_sources)
    if bad:
        raise DataError(f"leave-one-out leak: held-out source(s) {bad} in the training records")
    held_texts = {normalize_text(r.text) for r in heldout}
    dup = [r for r in train if normalize_text(r.text) in held_texts]
    if dup:
        raise DataError(f"leave-one-out leak: {len(dup)} training record(s) repeat a held-out text, e.g. "
                        f"{dup[0].text[:80]!r} ({dup[0].source})")
