"""Benchmark items and the `run --data CSV` loader (columns id, question, gold, unknown_ok; extras kept)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from training.data.base import DataError  # the data layer's one DataError (re-exported for gemhall's users)

__all__ = ["REQUIRED_COLUMNS", "DataError", "Item", "load_items_csv", "numbered_rows", "parse_bool"]

REQUIRED_COLUMNS = ("id", "question", "gold", "unknown_ok")
_TRUE = {"1", "true", "yes", "y"}
_FALSE = {"0", "false", "no", "n", ""}


@dataclass
class Item:
    id: str
    question: str
    gold: str
    unknown_ok: bool
    category: str = ""
    choices: dict[str, str] | None = None  # multiple choice (MMLU): letters -> option text
    extra: dict[str, str] = field(default_factory=dict)  # further CSV columns, kept in results.csv


def numbered_rows(reader, path) -> Iterator[tuple[int, list[str]]]:
    """(line where the record starts, row) for each CSV record; a malformed record names its file and line."""
    while True:
        line = reader.line_num + 1  # records may span lines: report where this one starts
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"{path}: line {line}: {exc}") from None
        yield line, row


def parse_bool(value: str, where: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise DataError(f"{where}: expected 0/1 (or true/false), got {value!r}")


def load_items_csv(path: str | Path) -> list[Item]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: data file not found")
    items: list[Item] = []
    first_line: dict[str, int] = {}
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(f"{path}: empty file (expected a header: {', '.join(REQUIRED_COLUMNS)})") from None
        except csv.Error as exc:
            raise DataError(f"{path}: line 1: {exc}") from None
        header = [h.strip() for h in header]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise DataError(f"{path}: line 1: missing column(s) {', '.join(missing)} "
                            f"(header has: {', '.join(header)})")
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise DataError(f"{path}: line 1: duplicate column(s) {', '.join(dupes)}")
        col = {name: i for i, name in enumerate(header)}

        def where(line: int, name: str) -> str:
            return f"{path}: line {line}, column {col[name] + 1} ({name})"

        for line, row in numbered_rows(reader, path):
            if not row or all(not cell.strip() for cell in row):
                continue  # blank line
            if len(row) != len(header):
                raise DataError(f"{path}: line {line}: {len(row)} fields, the header has {len(header)} "
                                "(an unquoted comma?)")
            rec = dict(zip(header, row))
            item_id = rec["id"].strip()
            if not item_id:
                raise DataError(f"{where(line, 'id')}: empty id")
            if item_id in first_line:
                raise DataError(f"{where(line, 'id')}: duplicate id {item_id!r} (first on line {first_line[item_id]})")
            first_line[item_id] = line
            question = rec["question"].strip()
            if not question:
                raise DataError(f"{where(line, 'question')}: empty question")
            unknown_ok = parse_bool(rec["unknown_ok"], where(line, "unknown_ok"))
            gold = rec["gold"].strip()
            if not gold and not unknown_ok:
                raise DataError(f"{where(line, 'gold')}: empty gold answer while unknown_ok is 0 "
                                "(set unknown_ok=1 for items that cannot be answered)")
            extra = {k: v for k, v in rec.items() if k not in REQUIRED_COLUMNS and k != "category"}
            items.append(Item(item_id, question, gold, unknown_ok, rec.get("category", "").strip(), None, extra))
    if not items:
        raise DataError(f"{path}: no items after the header")
    return items
