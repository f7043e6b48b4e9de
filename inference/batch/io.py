"""Inputs and outputs of `python -m inference.batch`: chunked readers, column mapping, the shard schema.

Inputs (format from the path, or --format): JSONL, a JSON list, CSV, Parquet, and a `datasets` directory
written by `Dataset.save_to_disk` (its Arrow files are read with pyarrow; `datasets` is not needed). Every
format but the JSON list is read in chunks (a JSON list is one document: it is parsed whole), so memory does
not grow with the input.

Each input row travels as (row number, raw JSON text, read error): a JSONL line as written, any other row
serialised to JSON by the reader. The same text reaches the local engine's worker processes and the Ray
actors, so both score exactly the same inputs.

Output: OUTPUT/shards/part-NNNNN.parquet, shard k holding input rows [k * shard_size, (k + 1) * shard_size),
written to a temporary file and renamed into place (a reader never sees half a shard); one fixed Arrow schema
(SCHEMA below + the --group-by columns as strings), so the shards concatenate.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("jsonl", "json", "csv", "parquet", "datasets")
SHARDS = "shards"


class BatchError(ValueError):
    """A mistake in the command or the input file as a whole (the CLI exits 2); bad rows are never this."""


def need(module: str, extra: str = "batch"):
    """Import an optional dependency, or say which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BatchError(f"python -m inference.batch needs {module.split('.')[0]}: "
                         f"pip install 'halugate[{extra}]' ({exc})") from None


# ---- input formats ---------------------------------------------------------------------------------------------

def detect_format(path: Path) -> str:
    if path.is_dir():
        if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():
            return "datasets"
        raise BatchError(f"{path}: a directory, but not a `datasets` save_to_disk directory (no state.json / "
                         "dataset_dict.json)")
    if not path.is_file():
        raise BatchError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix == ".json":
        with path.open("rb") as fh:
            head = fh.read(4096).lstrip()
        return "json" if head.startswith(b"[") else "jsonl"
    raise BatchError(f"{path}: unknown input format {suffix!r}; pass --format ({'|'.join(FORMATS)})")


def _datasets_files(path: Path, split: str | None) -> list[Path]:
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8")).get("splits", [])
        if split is None:
            if len(splits) != 1:
                raise BatchError(f"{path}: a DatasetDict with splits {splits}; pass --split NAME")
            split = splits[0]
        if split not in splits:
            raise BatchError(f"--split {split}: not in {path} (splits: {', '.join(splits)})")
        path = path / split
    elif split is not None:
        raise BatchError(f"--split {split}: {path} is a single Dataset, not a DatasetDict")
    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    files = [path / f["filename"] for f in state.get("_data_files", [])]
    missing = [str(f) for f in files if not f.is_file()]
    if missing or not files:
        raise BatchError(f"{path}/state.json: data files missing: {missing or 'none listed'}")
    return files


def _arrow_batches(files: Sequence[Path]):
    pa = need("pyarrow")
    for f in files:
        with pa.memory_map(str(f)) as source:
            try:
                reader = pa.ipc.open_stream(source)
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)
                continue
            yield from reader


@dataclass
class Source:
    """One input: its path, format, column names (None where a format has no fixed schema) and row count."""

    path: Path
    format: str
    split: str | None = None
    columns: list[str] | None = None
    rows: int = 0
    _json_rows: list | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: str | Path, fmt: str = "auto", split: str | None = None) -> Source:
        path = Path(path)
        fmt = detect_format(path) if fmt == "auto" else fmt
        if fmt not in FORMATS:
            raise BatchError(f"--format {fmt}: expected auto or one of {', '.join(FORMATS)}")
        if not path.exists():
            raise BatchError(f"{path}: no such file")
        src = cls(path, fmt, split)
        src._scan()
        return src

    def _scan(self) -> None:
        """Row count and columns, in one cheap pass (no JSON parsing, memory-mapped Arrow)."""
        if self.format == "jsonl":
            with self.path.open("rb") as fh:
                self.rows = sum(1 for line in fh if line.strip())
        elif self.format == "json":
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise BatchError(f"{self.path}: not valid JSON ({exc})") from None
            if not isinstance(data, list):
                raise BatchError(f"{self.path}: expected a JSON list of rows, got {type(data).__name__}")
            self._json_rows, self.rows = data, len(data)
        elif self.format == "csv":
            with self.path.open(newline="", encoding="utf-8") as fh:
                reader = csv.reader(fh, dialect=self._dialect())
                self.columns = next(reader, None) or []
                self.rows = sum(1 for _ in reader)
        elif self.format == "parquet":
            pq = need("pyarrow.parquet")
            try:
                meta = pq.ParquetFile(self.path)
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
                raise BatchError(f"{self.path}: not a readable Parquet file ({exc})") from None
            self.columns, self.rows = meta.schema_arrow.names, meta.metadata.num_rows
        else:
            files = _datasets_files(self.path, self.split)
            self.rows, self.columns = 0, None
            for batch in _arrow_batches(files):
                self.rows += batch.num_rows
                self.columns = self.columns or batch.schema.names
            self.columns = self.columns or []

    def _dialect(self):
        return "excel-tab" if self.path.suffix.lower() == ".tsv" else "excel"

    def raw_rows(self) -> Iterator[tuple[str | None, str | None]]:
        """(raw JSON text, read error) per row, in order."""
        if self.format == "jsonl":
            with self.path.open("rb") as fh:
                for n, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        yield line.decode("utf-8").strip(), None
                    except UnicodeDecodeError as exc:
                        yield None, f"line {n}: not UTF-8 ({exc.reason} at byte {exc.start})"
        elif self.format == "json":
            for row in self._json_rows or []:
                yield _dumps(row), None
        elif self.format == "csv":
            with self.path.open(newline="", encoding="utf-8") as fh:
                reader = csv.reader(fh, dialect=self._dialect())
                header = next(reader, None) or []
                for values in reader:
                    if len(values) != len(header):
                        yield None, (f"line {reader.line_num}: {len(values)} fields, the header has "
                                     f"{len(header)}")
                        continue
                    yield _dumps(dict(zip(header, values))), None
        elif self.format == "parquet":
            pq = need("pyarrow.parquet")
            for batch in pq.ParquetFile(self.path).iter_batches(batch_size=1024):
                for row in batch.to_pylist():
                    yield _dumps(row), None
        else:
            for batch in _arrow_batches(_datasets_files(self.path, self.split)):
                for row in batch.to_pylist():
                    yield _dumps(row), None

    def describe(self) -> dict:
        return {"input": str(self.path.resolve()), "format": self.format, "split": self.split}


def _dumps(row: Any) -> str:
    return json.dumps(row, ensure_ascii=False, default=str)


@dataclass
class Chunk:
    index: int
    first_row: int
    raws: list[str | None]
    errors: list[str | None]

    @property
    def rows(self) -> list[int]:
        return list(range(self.first_row, self.first_row + len(self.raws)))


def plan(total: int, shard_size: int) -> list[int]:
    """Rows per shard for `total` rows."""
    n = math.ceil(total / shard_size) if total else 0
    return [min(shard_size, total - k * shard_size) for k in range(n)]


def chunks(source: Source, shard_size: int, limit: int, skip: set[int]) -> Iterator[Chunk]:
    """The input in shard-sized chunks, the finished ones (`skip`) read past without being kept."""
    raws: list = []
    errors: list = []
    k = 0
    for n, (raw, err) in enumerate(source.raw_rows()):
        if n >= limit:
            break
        if k not in skip:
            raws.append(raw)
            errors.append(err)
        if (n + 1) % shard_size == 0:
            if k not in skip:
                yield Chunk(k, k * shard_size, raws, errors)
            raws, errors, k = [], [], k + 1
    if raws:
        yield Chunk(k, k * shard_size, raws, errors)


# ---- column mapping ----------------------------------------------------------------------------------------

@dataclass
class Columns:
    """Which input column holds what; None: not read. Defaults are found by name."""

    id: str | None = "id"
    context: str | None = "context"
    question: str | None = "question"
    answer: str | None = "answer"
    messages: str | None = "messages"
    task_type: str | None = "task_type"
    group_by: list[str] = field(default_factory=list)

    def check(self, available: list[str] | None, explicit: set[str]) -> None:
        """Columns named by a flag must exist where the format has a schema; at least answer or messages."""
        if available is None:
            return
        for role in sorted(explicit):
            name = getattr(self, role)
            if name is not None and name not in available:
                raise BatchError(f"--{role.replace('_', '-')}-column {name}: no such column "
                                 f"(columns: {', '.join(available)})")
        for name in self.group_by:
            if name not in available:
                raise BatchError(f"--group-by {name}: no such column (columns: {', '.join(available)})")
        if self.answer not in available and self.messages not in available:
            raise BatchError(f"no answer column ({self.answer!r}) and no messages column ({self.messages!r}) in "
                             f"the input (columns: {', '.join(available)}); name one with --answer-column or "
                             "--messages-column")


def row_input(row: Any, cols: Columns) -> dict:
    """The detect input of one row (raises InputError for a row that is not an object or has bad fields)."""
    from inference.messages import InputError

    if not isinstance(row, dict):
        raise InputError(f"row: expected an object, got {type(row).__name__}")
    messages = row.get(cols.messages) if cols.messages else None
    if messages is not None:
        if isinstance(messages, str):  # CSV, or a column of JSON text
            try:
                messages = json.loads(messages)
            except json.JSONDecodeError as exc:
                raise InputError(f"{cols.messages}: not a JSON messages list ({exc.msg})") from None
        return {"messages": messages}
    item = {"context": row.get(cols.context) if cols.context else None,
            "question": row.get(cols.question) if cols.question else None,
            "answer": row.get(cols.answer) if cols.answer else None}
    if cols.task_type and row.get(cols.task_type) not in (None, ""):
        item["task_type"] = row[cols.task_type]
    if item["answer"] is None:
        raise InputError(f"{cols.answer}: missing (the answer to check), and no {cols.messages} column")
    return item


def row_id(row: Any, cols: Columns, n: int) -> str:
    value = row.get(cols.id) if isinstance(row, dict) and cols.id else None
    return str(n) if value is None else (value if isinstance(value, str) else _dumps(value))


def group_value(row: Any, name: str) -> str | None:
    value = row.get(name) if isinstance(row, dict) else None
    return None if value is None else (value if isinstance(value, str) else _dumps(value))


# ---- the shard schema --------------------------------------------------------------------------------------

def schema(group_by: Sequence[str] = ()):
    pa = need("pyarrow")
    f64, i32, s = pa.float64(), pa.int32(), pa.string()
    probabilities = pa.struct([("entailment", f64), ("neutral", f64), ("contradiction", f64)])
    evidence = pa.struct([("text", s), ("start", i32), ("end", i32), ("kind", s), ("probabilities", probabilities)])
    span = pa.struct([("start", i32), ("end", i32), ("text", s), ("confidence", f64), ("nli_label", s),
                      ("nli_confidence", f64), ("severity", i32), ("explanation", s), ("evidence", evidence),
                      ("premise_coverage", f64), ("ungrounded", pa.list_(s))])
    from inference.result import STAGES

    fields = [
        ("row", pa.int64()), ("id", s), ("schema", s), ("status", s), ("reason", s),
        ("fact_check_needed", pa.bool_()), ("fact_check_confidence", f64),
        ("hallucination_detected", pa.bool_()), ("hallucination_score", f64), ("hallucination_threshold", f64),
        ("unverified_factual", pa.bool_()), ("max_severity", i32), ("spans", pa.list_(span)),
        ("action", s), ("blocked", pa.bool_()), ("answer", s), ("warning", s),
        ("headers", pa.map_(s, s)), ("decision", s),
        ("errors", pa.list_(pa.struct([("stage", s), ("message", s)]))),
        ("context_tokens", i32), ("detector_windows", i32), ("detector_context_coverage", f64),
        ("timings_ms", pa.struct([(k, f64) for k in STAGES])), ("context_truncated_for_nli", pa.bool_()),
        ("checked_answer", s),
    ]
    names = {n for n, _ in fields}
    for g in group_by:
        if g in names:
            raise BatchError(f"--group-by {g}: clashes with the output column of that name; rename the column")
        fields.append((g, s))
    return pa.schema(fields)


def result_record(result: dict) -> dict:
    """A Result.to_dict() in the shard schema's shapes (headers as pairs for the Arrow map)."""
    rec = dict(result)
    rec["headers"] = list((result.get("headers") or {}).items())
    return rec


def record_result(rec: dict) -> dict:
    """A shard row back in the result JSON's shapes (halugate.detect/v1 keys, in their order)."""
    from inference.result import Result

    keys = list(Result().to_dict())
    out = {k: rec.get(k) for k in keys}
    out["headers"] = dict(rec.get("headers") or [])
    for s in out.get("spans") or []:
        if s.get("evidence") is not None:
            s["evidence"]["probabilities"] = {k: v for k, v in s["evidence"]["probabilities"].items()
                                              if v is not None}
    return out


def invalid_record(message: str) -> dict:
    from inference.result import SCHEMA

    return {"schema": SCHEMA, "status": "invalid", "reason": message, "unverified_factual": False,
            "max_severity": 0, "spans": [], "action": "none", "blocked": False, "headers": [], "errors": [],
            "context_tokens": 0, "detector_windows": 0}


# ---- shards ----------------------------------------------------------------------------------------------------

def shard_path(out_dir: Path, k: int) -> Path:
    return out_dir / SHARDS / f"part-{k:05d}.parquet"


def shard_paths(out_dir: Path) -> list[Path]:
    """The finished shards in input order."""
    d = out_dir / SHARDS
    if not d.is_dir():
        return []
    return sorted(d.glob("part-*.parquet"), key=lambda p: int(p.stem.split("-")[1]))


def read_rows(out_dir: Path, drop: Sequence[str] = ("timings_ms",)) -> list[dict]:
    """Every finished shard's rows in input order, as dicts; `drop` leaves out columns that differ between any
    two runs (the timings), so two outputs of the same input compare equal."""
    pq = need("pyarrow.parquet")
    rows = [r for p in shard_paths(out_dir) for r in pq.read_table(p).to_pylist()]
    for r in rows:
        for key in drop:
            r.pop(key, None)
    return sorted(rows, key=lambda r: r["row"])


def finished(out_dir: Path, sizes: list[int]) -> set[int]:
    """Shards already written whole: the file is there and holds its chunk's row count."""
    pq = need("pyarrow.parquet")
    done = set()
    for k, size in enumerate(sizes):
        path = shard_path(out_dir, k)
        if path.is_file():
            try:
                if pq.read_metadata(path).num_rows == size:
                    done.add(k)
            except Exception as exc:  # noqa: BLE001 - an unreadable shard is redone
                logging.getLogger("halugate.batch").info("%s: unreadable (%s); scoring it again", path, exc)
    return done


def clean_partial(out_dir: Path) -> int:
    """Remove temporary files a killed run left behind."""
    d = out_dir / SHARDS
    removed = 0
    for tmp in d.glob(".part-*.tmp*") if d.is_dir() else []:
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed


def write_shard(out_dir: Path, k: int, table) -> Path:
    """Write a shard atomically: a temporary file in the same directory, fsync, then rename over the name."""
    pq = need("pyarrow.parquet")
    path = shard_path(out_dir, k)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    pq.write_table(table, tmp, compression="zstd")
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path
