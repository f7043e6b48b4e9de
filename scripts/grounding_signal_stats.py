"""How often each grounding signal fires inside and outside the gold hallucinated spans, under the loose rules
(the combiner's token features) and the strict ones (the exact check), on separate groups of CV folds.

    python scripts/grounding_signal_stats.py --data-dir ../shared/data            # folds of eval.detector --cv 5

The strict rules of session 28 were written from the false alarms of folds 0-2 only (the CV's folds of the
recipes' seed 42); folds 3-4 were not read while writing them, so their row is the fair check of the change.
Precision: the share of the words a signal fires on that lie inside a gold span; recall: the share of the words
inside gold spans that it fires on.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eval.detector_cv import fold_of_sources
from inference.grounding import FEATURES, ContextIndex, word_signals
from training.data.base import DataError, get_adapter, resolve_data_dir
from training.detector import group_key

SIGNALS = {"number": FEATURES.index("number_unsupported"), "name": FEATURES.index("entity_unsupported"),
           "word": FEATURES.index("word_unsupported")}


def signal_counts(records, strict: bool) -> Counter:
    """(signal, inside a gold span) -> words, and ("words", inside) -> all answer words."""
    counts: Counter = Counter()
    for rec in records:
        index = ContextIndex(f"{rec.context}\n{rec.question or ''}", strict=strict)
        for start, end, f in word_signals(rec.answer, index, copy=False):
            inside = any(sp["start"] < end and start < sp["end"] for sp in rec.spans)
            counts[("words", inside)] += 1
            for name, col in SIGNALS.items():
                if f[col]:
                    counts[(name, inside)] += 1
    return counts


def table_rows(label: str, counts: Counter) -> list[str]:
    gold = counts[("words", True)]
    cells = []
    for name in SIGNALS:
        hit, miss = counts[(name, True)], counts[(name, False)]
        cells.append(f"{hit + miss} / {hit / max(1, hit + miss):.3f} / {hit / max(1, gold):.3f}")
    return [f"| {label} | {gold} of {gold + counts[('words', False)]} | " + " | ".join(cells) + " |"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", help="public data (default $HALUGATE_DATA_DIR)")
    ap.add_argument("--source", default="ragtruth_test_subset")
    ap.add_argument("--cv", type=int, default=5, help="folds, as eval.detector --cv")
    ap.add_argument("--seed", type=int, default=42, help="the recipes' run.seed, which deals the folds")
    ap.add_argument("--groups", nargs="+", default=["0,1,2", "3,4"], help="fold groups, comma-separated")
    args = ap.parse_args(argv)
    try:
        groups = [{int(x) for x in g.split(",")} for g in args.groups]
    except ValueError:
        print(f"error: --groups: comma-separated fold numbers, got {' '.join(args.groups)}", file=sys.stderr)
        return 2
    try:
        records = list(get_adapter(args.source, kind="span").load(resolve_data_dir(args.data_dir)))
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fold = fold_of_sources(records, args.cv, args.seed)
    print("| folds, rules | words in gold spans | number: fires / precision / recall | name: ... | word: ... |")
    print("|---|---|---|---|---|")
    for g in groups:
        part = [r for r in records if fold[group_key(r)] in g]
        for strict in (False, True):
            label = f"{','.join(map(str, sorted(g)))}, {'strict' if strict else 'loose'}"
            print("\n".join(table_rows(label, signal_counts(part, strict))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
