"""The three record kinds, typed: a prompt (Sentinel), an NLI pair (Explainer) and a span record (Detector).

Adapters build these dataclasses (`Adapter.load` returns them), the training and evaluation code reads their
attributes, and `to_dict` / `from_dict` are the JSONL form (`test.jsonl`, `--data FILE.jsonl`). Fields one
dataset has and the others lack (WizardLM's `skill`, a curriculum task's `domain`, an augmentation's name) live
in `meta` and are written back beside the declared fields, so that a record survives a JSONL round trip whole.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from training.data.base import DataError


def _check_label(label: Any, where: str) -> int | None:
    if label is None:
        return None
    if isinstance(label, bool) or not isinstance(label, int):
        raise DataError(f"{where}: field 'label': expected an integer class id, got {label!r}")
    return label


def _check_text(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: field {name!r}: expected a string, got {type(value).__name__}")
    return value


class _Record:
    """JSONL form shared by the three kinds: declared fields plus `meta`, flattened into one object."""

    KIND: ClassVar[str]
    REQUIRED: ClassVar[tuple[str, ...]]

    def to_dict(self) -> dict:
        declared = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "meta"}
        return {**self.meta, **declared}

    @classmethod
    def from_dict(cls, row: dict, where: str = "record"):
        """The row as this kind; keys the class does not declare go to `meta`; a DataError names `where`."""
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        missing = [k for k in cls.REQUIRED if k not in row]
        if missing:
            raise DataError(f"{where}: a {cls.KIND} record needs the field(s) {', '.join(missing)} "
                            f"(keys: {', '.join(sorted(row)) or 'none'})")
        names = {f.name for f in dataclasses.fields(cls)} - {"meta"}
        meta = {k: v for k, v in row.items() if k not in names}
        rec = cls(**{k: v for k, v in row.items() if k in names}, meta=meta)
        rec.check(where)
        return rec

    def check(self, where: str) -> None:
        raise NotImplementedError

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


@dataclass
class PromptRecord(_Record):
    """Sentinel: a prompt and whether it needs fact-checking (1) or not (0)."""

    KIND: ClassVar[str] = "prompt"
    REQUIRED: ClassVar[tuple[str, ...]] = ("text",)

    text: str
    label: int | None = None
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def check(self, where: str) -> None:
        _check_text(self.text, "text", where)
        self.label = _check_label(self.label, where)

    def model_inputs(self) -> tuple[str, ...]:
        return (self.text,)


@dataclass
class PairRecord(_Record):
    """Explainer: premise, hypothesis and an NLI label (three-way, or two-way with the loss mask)."""

    KIND: ClassVar[str] = "nli"
    REQUIRED: ClassVar[tuple[str, ...]] = ("premise", "hypothesis")

    premise: str
    hypothesis: str
    label: int | None = None
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def check(self, where: str) -> None:
        _check_text(self.premise, "premise", where)
        _check_text(self.hypothesis, "hypothesis", where)
        self.label = _check_label(self.label, where)

    def model_inputs(self) -> tuple[str, ...]:
        return (self.premise, self.hypothesis)


@dataclass
class SpanRecord(_Record):
    """Detector: an answer with its context (and question), gold hallucinated spans as character offsets
    (`{"start", "end", "text", ...}` into `answer`). `label` is 1 when the answer has a span. Records of this kind
    come out of `training.data.spans.clean_span_records`, which validates and counts what adapters read."""

    KIND: ClassVar[str] = "span"
    REQUIRED: ClassVar[tuple[str, ...]] = ("context", "answer")

    context: str
    answer: str
    question: str | None = None
    spans: list[dict] = field(default_factory=list)
    task_type: str | None = None
    id: str = ""
    label: int | None = None
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def check(self, where: str) -> None:
        _check_text(self.context, "context", where)
        _check_text(self.answer, "answer", where)
        if self.question is not None:
            _check_text(self.question, "question", where)
        if not isinstance(self.spans, list):
            raise DataError(f"{where}: field 'spans': expected a list, got {type(self.spans).__name__}")
        self.label = _check_label(self.label, where)

    def model_inputs(self) -> tuple[str, ...]:
        # (context + question) as the first segment, the answer as the second: the Detector's two segments
        first = self.context if not self.question else f"{self.context}\n{self.question}"
        return (first, self.answer)


Record = PromptRecord | PairRecord | SpanRecord
KINDS: dict[str, type[_Record]] = {cls.KIND: cls for cls in (PromptRecord, PairRecord, SpanRecord)}


def record_class(kind: str) -> type[_Record]:
    if kind not in KINDS:
        raise ValueError(f"unknown record kind {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[kind]

