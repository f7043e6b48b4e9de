"""Evaluation records: (context, question) to answer, or (context, question, answer) to score.

--data is one of
  - `halueval_qa`: HaluEval QA (knowledge + question) through the data layer (training.data adapter
    `halueval_qa_spans`; --data-dir / $HALUGATE_DATA_DIR, else the Hub). Generate mode: one record per
    question, with the right answer kept as `reference_answer`. Score mode: the right answer (gold: no span) and
    the hallucinated answer (gold: the whole answer) of each question.
  - `ragtruth_test_subset` (or any span adapter: `ragtruth_test`, `faithbench`, ...): generate mode, one record
    per distinct (context, question); score mode, every response with its gold spans (category = the model
    that wrote it, task_type = QA / Summary / Data2txt).
  - a file: .jsonl, .json (a list) or .csv with fields `context` (a string, or a list of documents), `question`,
    `answer` (needed to score), and optional `id`, `category`, `task_type`, `reference_answer`, `spans` (gold);
    RAGTruth-schema rows (`response`, `source_info` / `reference`) are read too, and so is a halurate
    results.jsonl (to score another run's answers).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inference.spans import normalize_task_type, render_context
from inference.windowing import join_documents
from training.data.base import DataError, get_adapter, numbered_jsonl, read_csv, read_json
from training.data.records import SpanRecord
from training.data.spans import SpanDataReport, load_span_source, ragtruth_row_record

BUILTIN_ALIASES = {"halueval": "halueval_qa", "ragtruth": "ragtruth_test_subset"}
FILE_SUFFIXES = (".jsonl", ".json", ".csv")


@dataclass
class EvalRecord:
    id: str
    context: str
    question: str | None = None
    answer: str | None = None               # pre-recorded answer (score mode)
    task_type: str | None = None
    category: str | None = None
    reference_answer: str | None = None     # a known right answer (HaluEval), for a rough correctness check
    gold_spans: list[dict] | None = None    # gold hallucinated spans of `answer`, when the data has them
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def input_hash(self) -> str:
        """What an answer depends on: a changed context or question means the logged answer is stale."""
        text = json.dumps([self.context, self.question], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _context_text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(d, str) for d in value):
        return join_documents(value)
    try:
        return render_context(value)
    except TypeError:
        raise DataError(f"{where}: context must be a string, a list of strings or structured data (a JSON "
                        f"object), got {type(value).__name__}") from None


def _opt_str(row: dict, key: str, where: str) -> str | None:
    value = row.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise DataError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return str(value)


# ---- span adapters (data layer) -----------------------------------------------------------------------------

def _from_span_adapter(name: str, data_dir, mode: str) -> list[EvalRecord]:
    adapter = get_adapter(name)
    if adapter.kind != "span":
        raise DataError(f"--data {name}: a {adapter.kind} dataset; halurate needs (context, question) records "
                        "(a span dataset such as halueval_qa_spans or ragtruth_test_subset, or a file)")
    report = SpanDataReport()
    rows = load_span_source(name, data_dir, report)
    if not rows:
        raise DataError(f"--data {name}: no usable records ({report.summary()})")
    if mode == "score":
        return [EvalRecord(id=r.id, context=r.context, question=r.question, answer=r.answer,
                           task_type=r.task_type, category=r.meta.get("model"), gold_spans=r.spans, source=name)
                for r in rows]
    out: dict[tuple[str, str | None], EvalRecord] = {}
    for r in rows:
        key = (r.context, r.question)
        rid = _question_id(name, r)
        if key not in out:
            out[key] = EvalRecord(id=rid, context=r.context, question=r.question, task_type=r.task_type, source=name)
        if name == "halueval_qa_spans" and not r.spans:
            out[key].reference_answer = r.answer
    return list(out.values())


def _question_id(name: str, rec: SpanRecord) -> str:
    if name == "halueval_qa_spans":
        return rec.id.rsplit("-", 1)[0]  # halueval_qa-17-right -> halueval_qa-17
    if rec.meta.get("source_id"):
        return f"{name}-src-{rec.meta['source_id']}"
    digest = hashlib.sha256(json.dumps([rec.context, rec.question]).encode()).hexdigest()[:12]
    return f"{name}-{digest}"


# ---- files ---------------------------------------------------------------------------------------------------

def _rows(path: Path) -> list[tuple[str, dict]]:
    """(where, row) pairs; `where` is file:line for error messages."""
    if not path.is_file():
        raise DataError(f"{path}: data file not found")
    if path.suffix == ".csv":
        return [(f"{path}:{i + 2}", dict(r)) for i, r in enumerate(read_csv(path))]
    if path.suffix == ".json":
        data = read_json(path)
        if not isinstance(data, list):
            raise DataError(f"{path}: expected a JSON list of records, got a JSON {type(data).__name__}")
        return [(f"{path}[{i}]", r) for i, r in enumerate(data)]
    return [(f"{path}:{n}", row) for n, row in numbered_jsonl(path)]


def _ragtruth_row(row: dict, where: str) -> dict:
    rec = ragtruth_row_record(row)  # the data layer's RAGTruth schema reader
    rec["category"] = rec.get("model")
    return rec


def _from_file(path: Path, mode: str) -> list[EvalRecord]:
    out: list[EvalRecord] = []
    seen: dict[str, str] = {}
    for i, (where, row) in enumerate(_rows(path)):
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected an object, got {type(row).__name__}")
        if "response" in row and "answer" not in row:
            row = _ragtruth_row(row, where)
        rid = _opt_str(row, "id", where) or f"{path.stem}-{i}"
        if rid in seen:
            raise DataError(f"{where}: duplicate id {rid!r} (first at {seen[rid]})")
        seen[rid] = where
        answer = row.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise DataError(f"{where}: field 'answer' must be a string, got {type(answer).__name__}")
        if mode == "score" and answer is None:
            raise DataError(f"{where}: field 'answer' is required to score existing answers (--mode score)")
        question = row.get("question")
        if question is not None and not isinstance(question, str):
            raise DataError(f"{where}: field 'question' must be a string, got {type(question).__name__}")
        context = _context_text(row.get("context"), where)
        if mode == "generate" and not context.strip() and not (question or "").strip():
            raise DataError(f"{where}: neither 'context' nor 'question': nothing to answer")
        task_raw = _opt_str(row, "task_type", where)
        spans = row.get("spans")
        if spans is not None and not isinstance(spans, list):
            raise DataError(f"{where}: field 'spans' must be a list of {{start, end, text}} objects")
        out.append(EvalRecord(
            id=rid, context=context, question=question or None, answer=answer if mode == "score" else None,
            task_type=normalize_task_type(task_raw) or task_raw, category=_opt_str(row, "category", where),
            reference_answer=_opt_str(row, "reference_answer", where),
            gold_spans=spans if mode == "score" else None, source=str(path)))
    if not out:
        raise DataError(f"{path}: no records")
    return out


def load_records(source: str, *, mode: str = "generate", data_dir=None, limit: int | None = None,
                 offset: int = 0) -> list[EvalRecord]:
    """Records of `source` (see the module docstring), in order, `offset` skipped, at most `limit`."""
    if mode not in ("generate", "score"):
        raise DataError(f"mode must be generate or score, got {mode!r}")
    path = Path(source)
    if path.suffix in FILE_SUFFIXES or path.is_file():
        records = _from_file(path, mode)
    else:
        name = BUILTIN_ALIASES.get(source, source)
        name = "halueval_qa_spans" if name == "halueval_qa" else name
        records = _from_span_adapter(name, data_dir, mode)
    records = records[offset:]
    return records[:limit] if limit is not None else records
