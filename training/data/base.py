"""Dataset adapters: one per public dataset, loading from the Hub (users' default) or a local data dir.

`Adapter.load` returns typed records (`training.data.records`: PromptRecord, PairRecord, SpanRecord) whose
`source` is the dataset's name.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA_DIR_ENV = "HALUGATE_DATA_DIR"


class DataError(ValueError):
    """Missing or malformed data; the message names the file, the dataset and what was expected."""


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """--data-dir wins over $HALUGATE_DATA_DIR; None means "load from the Hub"."""
    value = data_dir or os.environ.get(DATA_DIR_ENV)
    return Path(value).expanduser() if value else None


@dataclass
class Adapter:
    """One public dataset.

    `local_files` are paths relative to the data dir; `load_local` reads them, `load_hub` reads the Hub copy.
    """

    name: str
    kind: str  # "prompt" | "span" | "nli"
    local_files: list[str]
    load_local: Callable[[Path], Iterable[dict]] | None
    hub_id: str | None = None
    load_hub: Callable[[], Iterable[dict]] | None = None
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def missing_files(self, data_dir: Path) -> list[Path]:
        return [data_dir / f for f in self.local_files if not (data_dir / f).exists()]

    def load_rows(self, data_dir: str | os.PathLike | None = None, limit: int | None = None) -> list:
        """The rows as the dataset's reader yields them (records, or raw dicts for span datasets)."""
        root = resolve_data_dir(data_dir)
        if root is not None and self.load_local is None and self.load_hub is not None:
            root = None  # no local copy of this dataset exists: the Hub is the only source
        if root is not None:
            if not root.is_dir() and self.local_files:  # a generated dataset (no files) needs no data dir
                raise DataError(
                    f"data dir {root} does not exist; dataset {self.name!r} expects: "
                    + ", ".join(self.local_files)
                )
            missing = self.missing_files(root)
            if missing:
                raise DataError(
                    f"dataset {self.name!r}: missing under {root}: " + ", ".join(str(m) for m in missing)
                )
            rows = self.load_local(root)
        else:
            if self.load_hub is None:
                if self.load_local is not None:
                    raise DataError(
                        f"dataset {self.name!r} is read from a local data dir; pass --data-dir or set "
                        f"{DATA_DIR_ENV} to a folder with: {', '.join(self.local_files)}"
                    )
                raise DataError(
                    f"dataset {self.name!r} has no Hub loader; pass --data-dir or set {DATA_DIR_ENV} "
                    f"to a folder with: {', '.join(self.local_files)}"
                )
            rows = self.load_hub()
        out = []
        for row in rows:
            out.append(row)
            if limit is not None and len(out) >= limit:
                break
        return out

    def load(self, data_dir: str | os.PathLike | None = None, limit: int | None = None, report=None) -> list:
        """The dataset as typed records of this adapter's kind (`training.data.records`), `source` set to its name.

        Prompt and NLI rows are checked field by field (a DataError names the dataset and row). Span rows go
        through `clean_span_records`, which fixes, drops and counts what it must into `report` (a
        `SpanDataReport`; a fresh one when None), since span datasets carry known-bad rows.
        """
        from training.data.records import record_class  # records imports this module

        rows = self.load_rows(data_dir, limit)
        if self.kind == "span":
            from training.data.spans import SpanDataReport, clean_span_records  # spans imports this module

            return clean_span_records(rows, self.name, report if report is not None else SpanDataReport(),
                                      require_context=self.extra.get("has_context", True))
        cls = record_class(self.kind)
        out = []
        for i, row in enumerate(rows):
            where = f"dataset {self.name!r} row {i}"
            if isinstance(row, cls):  # built by the adapter: checked here (from_dict checks what it builds)
                row.check(where)
                rec = row
            else:
                rec = cls.from_dict(row, where)
            if not rec.source:
                rec.source = self.name
            out.append(rec)
        return out


REGISTRY: dict[str, Adapter] = {}


def register(adapter: Adapter) -> Adapter:
    if adapter.name in REGISTRY:
        raise ValueError(f"adapter {adapter.name!r} registered twice")
    REGISTRY[adapter.name] = adapter
    return adapter


def get_adapter(name: str, kind: str | None = None) -> Adapter:
    """The registered adapter `name`; with `kind`, a DataError unless it is a dataset of that kind."""
    _import_all()
    if name not in REGISTRY:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join(sorted(REGISTRY))}")
    adapter = REGISTRY[name]
    if kind is not None and adapter.kind != kind:
        raise DataError(f"{name!r} is a {adapter.kind} dataset, not a {kind} dataset")
    return adapter


def _import_all() -> None:
    """Import every module of this package: adapters register themselves on import, so a new dataset module
    needs no list to be named in. The modules are cheap (no torch, no `datasets` at import)."""
    import importlib
    import pkgutil

    package = __name__.rpartition(".")[0]
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if not info.name.startswith("_") and info.name != "base":
            importlib.import_module(f"{package}.{info.name}")


# ---- small readers shared by adapters ----------------------------------------------------------------------

def numbered_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """(line number in the file, parsed value) per non-empty line; invalid JSON is a DataError naming file:line."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None


def read_jsonl(path: Path) -> Iterator[dict]:
    for _, record in numbered_jsonl(path):
        yield record


def read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


def read_csv(path: Path, **kwargs) -> Iterator[dict]:
    csv.field_size_limit(1 << 28)
    with open(path, encoding="utf-8", newline="") as fh:
        yield from csv.DictReader(fh, **kwargs)


_HUB_CHECKED: set[str] = set()


def _check_hub_reachable(hub_id: str) -> None:
    """One short metadata request, so an unreachable Hub fails in seconds instead of a retry loop."""
    if hub_id in _HUB_CHECKED or os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return  # offline mode: `datasets` reads its local cache
    from huggingface_hub import HfApi

    try:
        HfApi().dataset_info(hub_id, timeout=10)
    except Exception as exc:  # noqa: BLE001 - any failure means the Hub copy can't be read
        raise DataError(
            f"cannot reach dataset {hub_id!r} on the Hugging Face Hub ({type(exc).__name__}). Without Hub "
            f"access pass --data-dir (or set {DATA_DIR_ENV}) and use the offline config (configs/*.offline.yaml)."
        ) from None
    _HUB_CHECKED.add(hub_id)


def hub_rows(hub_id: str, config: str | None = None, split: str = "train") -> Iterator[dict]:
    """Rows of a Hub dataset; imported lazily so that local-only use never touches `datasets`."""
    from datasets import load_dataset

    _check_hub_reachable(hub_id)
    try:
        ds = load_dataset(hub_id, config, split=split)
    except Exception as exc:  # noqa: BLE001 - re-raised with the offline hint
        raise DataError(
            f"could not load {hub_id!r} ({config or 'default'}, {split}) from the Hugging Face Hub: "
            f"{type(exc).__name__}: {str(exc)[:200]}. Without Hub access pass --data-dir (or set "
            f"{DATA_DIR_ENV}) and use the offline config."
        ) from None
    yield from ds
