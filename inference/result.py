"""The detection result: a dataclass with a stable JSON form (fixed key order, fixed types) and x-vsr-* headers.

JSON (`Result.to_dict()` / `to_json()`), keys always present and in this order:

    schema                  "halugate.detect/v1"
    status                  "ok" | "skipped" | "unavailable"
    reason                  why skipped / unavailable ("" when ok): see REASONS
    fact_check_needed       true | false | null (null: Sentinel unavailable)
    fact_check_confidence   float | null (probability of FACT_CHECK_NEEDED; null: no Sentinel ran)
    hallucination_detected  true | false | null (null: not checked or unknown; never false without a check)
    hallucination_score     float | null in [0, 1] (a ranking score for the whole answer, not the span decision:
                            the mean of the Detector's highest token probability plus 0.1 for each number,
                            quantity or name the context lacks, at most three, capped at 1, and the share of the
                            answer's content words the context lacks; null when the Detector did not run)
    hallucination_threshold float | null (the token threshold the Detector applied to this answer: the model's
                            calibrated one, its task type's when it has one; the answer is flagged only where
                            tokens reach it; null when the Detector did not run)
    unverified_factual      true | false (fact-seeking request without context to verify against)
    max_severity            int 0-4 (0: no span)
    spans                   [{start, end, text, confidence, nli_label, nli_confidence, severity, explanation,
                              evidence, premise_coverage}]
                            evidence: null (NLI not run) or {text, start, end, kind, probabilities}: the context
                              passage the Explainer judged the span against (context[start:end]; kind "sentence"
                              or "window") and its NLI probabilities {entailment, neutral, contradiction}
                            premise_coverage: null or the share of the context (non-space characters) inside the
                              premises the Explainer read for this span (1.0: all of it)
    action                  "none" | "header" | "body" | "block" (what was applied)
    blocked                 true | false (the answer is withheld)
    answer                  string | null (what to return: the answer, with a warning for `body`; null if blocked)
    warning                 string | null (the warning appended, or the message returned instead when blocked)
    headers                 {name: value} to add to the response
    decision                string | null (the decision whose hallucination plugin ran)
    errors                  [{stage, message}] (models that failed to load or run)
    context_tokens          int (Detector tokens of the context; 0 when not run)
    detector_windows        int (windows the Detector ran on; 0 when not run)
    detector_context_coverage  float | null (share of the context's tokens the Detector read: 1.0 when its
                            windows cover the whole context; less when max_windows dropped windows or a packed
                            window left out the sentences sharing no words with the answer; null: not run)
    timings_ms              {sentinel, context, detector, explainer, total} floats
    context_truncated_for_nli  true | false | null (null: the Explainer did not run; true: for some span the
                            context was longer than the premises read, see spans[].premise_coverage)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "halugate.detect/v1"
STATUSES = ("ok", "skipped", "unavailable")
STAGES = ("sentinel", "context", "detector", "explainer", "total")
REASONS = {
    "": "checked",
    "disabled": "hallucination_mitigation.enabled is false",
    "no_fact_check_needed": "the Sentinel judged the prompt not fact-seeking; no decision with an enabled plugin matched",
    "no_decision": "no decision's rules matched the request",
    "plugin_disabled": "the matched decision has no enabled hallucination plugin",
    "no_context": "fact-seeking request without context: unverified_factual is set",
    "empty_answer": "the answer is empty: there is nothing to verify",
    "model_unavailable": "a model failed to load or run: see errors",
}

HEADER_FACT_CHECK = "x-vsr-fact-check-needed"
HEADER_DETECTED = "x-vsr-hallucination-detected"
HEADER_SPANS = "x-vsr-hallucination-spans"
HEADER_CONTRADICTIONS = "x-vsr-nli-contradictions"
HEADER_SEVERITY = "x-vsr-max-severity"
HEADER_UNVERIFIED = "x-vsr-unverified-factual-response"
HEADER_CONTEXT_MISSING = "x-vsr-verification-context-missing"
HEADER_STATUS = "x-vsr-verification-status"
HEADER_SPANS_TRUNCATED = "x-vsr-hallucination-spans-truncated"
MAX_SPANS_HEADER_CHARS = 1024  # header values stay well under common proxy limits
TRUNCATION_MARKER = "..."
# Characters a span text keeps as they are in x-vsr-hallucination-spans: visible ASCII and the space, except "%"
# (the escape character) and ";" (the separator). Everything else - CR, LF, other controls, non-ASCII - is
# percent-encoded as UTF-8 bytes (RFC 3986 style, upper-case hex), so a value can never break or inject a header.
_HEADER_KEEP = frozenset(chr(c) for c in range(0x20, 0x7F)) - {"%", ";"}


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


@dataclass
class Evidence:
    """The context passage a span was judged against: context[start:end], and the Explainer's probabilities."""

    text: str
    start: int
    end: int
    kind: str  # "sentence" | "window"
    probabilities: dict[str, float] = field(default_factory=dict)  # entailment, neutral, contradiction

    def to_dict(self) -> dict[str, Any]:
        return {"text": str(self.text), "start": int(self.start), "end": int(self.end), "kind": str(self.kind),
                "probabilities": {k: _r(v) for k, v in self.probabilities.items()}}


@dataclass
class Span:
    start: int
    end: int
    text: str
    confidence: float
    nli_label: str | None = None
    nli_confidence: float | None = None
    severity: int = 0
    explanation: str = ""
    evidence: Evidence | None = None
    premise_coverage: float | None = None
    ungrounded: list[str] = field(default_factory=list)  # numbers / quantities / names in the span the context lacks

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": int(self.start), "end": int(self.end), "text": str(self.text),
            "confidence": _r(self.confidence), "nli_label": self.nli_label,
            "nli_confidence": _r(self.nli_confidence), "severity": int(self.severity),
            "explanation": str(self.explanation),
            "evidence": self.evidence.to_dict() if self.evidence is not None else None,
            "premise_coverage": _r(self.premise_coverage),
            "ungrounded": [str(t) for t in self.ungrounded],
        }


@dataclass
class Result:
    status: str = "ok"
    reason: str = ""
    fact_check_needed: bool | None = None
    fact_check_confidence: float | None = None
    hallucination_detected: bool | None = None
    hallucination_score: float | None = None
    hallucination_threshold: float | None = None
    unverified_factual: bool = False
    spans: list[Span] = field(default_factory=list)
    action: str = "none"
    blocked: bool = False
    answer: str | None = None
    warning: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    decision: str | None = None
    errors: list[dict[str, str]] = field(default_factory=list)
    context_tokens: int = 0
    detector_windows: int = 0
    detector_context_coverage: float | None = None
    timings_ms: dict[str, float] = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    context_truncated_for_nli: bool | None = None

    @property
    def max_severity(self) -> int:
        return max((s.severity for s in self.spans), default=0)

    @property
    def nli_contradictions(self) -> int:
        return sum(1 for s in self.spans if s.nli_label == "contradiction")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "status": self.status,
            "reason": self.reason,
            "fact_check_needed": self.fact_check_needed,
            "fact_check_confidence": _r(self.fact_check_confidence),
            "hallucination_detected": self.hallucination_detected,
            "hallucination_score": _r(self.hallucination_score),
            "hallucination_threshold": _r(self.hallucination_threshold),
            "unverified_factual": bool(self.unverified_factual),
            "max_severity": int(self.max_severity),
            "spans": [s.to_dict() for s in self.spans],
            "action": self.action,
            "blocked": bool(self.blocked),
            "answer": self.answer,
            "warning": self.warning,
            "headers": dict(self.headers),
            "decision": self.decision,
            "errors": [{"stage": e["stage"], "message": e["message"]} for e in self.errors],
            "context_tokens": int(self.context_tokens),
            "detector_windows": int(self.detector_windows),
            "detector_context_coverage": _r(self.detector_context_coverage),
            "timings_ms": {s: _r(self.timings_ms.get(s, 0.0), 3) for s in STAGES},
            "context_truncated_for_nli": self.context_truncated_for_nli,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent)


def detection_headers(result: Result, hallucination_headers: bool, unverified_headers: bool) -> dict[str, str]:
    """x-vsr-* headers for the result; which groups are sent follows the plugin's actions (`none` sends none
    of its group). A result with status unavailable always says so, so that a fail-open pass is visible."""
    headers: dict[str, str] = {}
    if (hallucination_headers or unverified_headers) and result.fact_check_needed is not None:
        headers[HEADER_FACT_CHECK] = "true" if result.fact_check_needed else "false"
    if hallucination_headers and result.hallucination_detected is not None:
        headers[HEADER_DETECTED] = "true" if result.hallucination_detected else "false"
        if result.hallucination_detected:
            headers[HEADER_SPANS], truncated = _spans_header(result.spans)
            if truncated:
                headers[HEADER_SPANS_TRUNCATED] = "true"
            headers[HEADER_CONTRADICTIONS] = str(result.nli_contradictions)
            headers[HEADER_SEVERITY] = str(result.max_severity)
    if unverified_headers and result.unverified_factual:
        headers[HEADER_UNVERIFIED] = "true"
        headers[HEADER_CONTEXT_MISSING] = "true"
    if result.status == "unavailable":
        headers[HEADER_STATUS] = "unavailable"
    return headers


def header_text(text: str) -> str:
    """One span text as it travels in a header: whitespace runs (CR and LF included) folded to one space, then
    every character outside visible ASCII + space, and "%" and ";", percent-encoded as its UTF-8 bytes. Plain
    ASCII text is unchanged ("500 meters"); `urllib.parse.unquote` gives the folded text back."""
    folded = " ".join(text.split())
    if all(c in _HEADER_KEEP for c in folded):
        return folded
    return "".join(c if c in _HEADER_KEEP else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
                   for c in folded)


def _spans_header(spans: list[Span]) -> tuple[str, bool]:
    value = "; ".join(header_text(s.text) for s in spans)
    if len(value) <= MAX_SPANS_HEADER_CHARS:
        return value, False
    cut = value[: MAX_SPANS_HEADER_CHARS - len(TRUNCATION_MARKER)]
    tail = cut[-2:]
    if "%" in tail:  # never split a %XX escape
        cut = cut[: len(cut) - len(tail) + tail.index("%")]
    return cut.rstrip("; ") + TRUNCATION_MARKER, True


def spans_header(spans: list[Span]) -> str:
    """x-vsr-hallucination-spans: the span texts (`header_text`: percent-encoded where not plain ASCII) joined
    with "; ", at most MAX_SPANS_HEADER_CHARS characters; a longer value is cut (never inside an escape) and ends
    with TRUNCATION_MARKER, and x-vsr-hallucination-spans-truncated: true is sent beside it."""
    return _spans_header(spans)[0]
