"""The three record kinds, typed: what a prompt, an NLI pair and a span record hold, and the one place that tells
them apart. Adapters still yield plain dicts (JSONL in, JSONL out, cheap to write); code that needs to know
what a record is asks here instead of probing keys itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.data.base import DataError


@dataclass
class PromptRecord:
    """Sentinel: a prompt and whether it needs fact-checking (1) or not (0)."""

    text: str
    label: int | None = None
    source: str = ""

    def model_inputs(self) -> tuple[str, ...]:
        return (self.text,)


@dataclass
class PairRecord:
    """Explainer: premise, hypothesis and an NLI label (three-way, or two-way with the loss mask)."""

    premise: str
    hypothesis: str
    label: int | None = None
    source: str = ""

    def model_inputs(self) -> tuple[str, ...]:
        return (self.premise, self.hypothesis)


@dataclass
class SpanRecord:
    """Detector: an answer with its context (and question), gold hallucinated spans as character offsets."""

    context: Any
    answer: str
    question: str | None = None
    spans: list[dict] = field(default_factory=list)
    task_type: str | None = None
    source: str = ""

    def model_inputs(self) -> tuple[str, ...]:
        # (context + question) as the first segment, the answer as the second: the Detector's two segments
        first = self.context if not self.question else f"{self.context}\n{self.question}"
        return (str(first), self.answer)


KINDS = {"prompt": PromptRecord, "nli": PairRecord, "span": SpanRecord}
_REQUIRED = {"prompt": ("text",), "nli": ("premise", "hypothesis"), "span": ("context", "answer")}


def record_kind(rec: dict, where: str = "record") -> str:
    """"prompt" | "nli" | "span"; DataError naming the keys for a record of none of the three kinds."""
    for kind, keys in _REQUIRED.items():
        if all(k in rec for k in keys):
            return kind
    raise DataError(f"{where}: record has none of the fields text | premise+hypothesis | context+answer "
                    f"(keys: {', '.join(sorted(rec))})")


def typed(rec: dict, where: str = "record") -> PromptRecord | PairRecord | SpanRecord:
    """The record as its dataclass (fields it does not declare are left out)."""
    cls = KINDS[record_kind(rec, where)]
    return cls(**{k: rec[k] for k in cls.__dataclass_fields__ if k in rec})
