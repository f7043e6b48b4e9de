"""The Detector's input format and span logic: defined once, used by training, evaluation and inference.

API (numpy + `tokenizers` only; works with a transformers fast tokenizer *or* a raw `tokenizers.Tokenizer`
loaded from tokenizer.json):

    enc = encode_detector_input(tokenizer, context, question, answer, max_length=512,
                                task_type="QA", spans=None)          # -> DetectorInput
    enc.input_ids / enc.attention_mask / enc.token_type_ids           # feed the encoder (batch of 1)
    enc.answer_slice                                                  # positions of the answer tokens
    enc.answer_offsets                                                # (start, end) chars in `answer`
    enc.labels                                                        # only when `spans` was given
    enc.context_truncated                                             # context was cut to fit

    windows = context_windows(tokenizer, context, question, answer, max_length, overlap=64, task_type=...)
    # -> one DetectorInput per context window (same answer tokens in each; combine per-token probs, e.g. max)

    spans = token_probs_to_spans(answer, enc.answer_offsets, probs, threshold=0.5, min_span_chars=1)
    # probs: P(HALLUCINATED) per answer token -> [{"start", "end", "text", "confidence"}]

    clean, problems = check_spans(answer, raw_spans)   # validate/repair gold spans (data + eval)

Input format: ``[CLS] <template prefix> context [SEP] <question prefix> question [SEP] answer [SEP]``; with no
question the middle segment and its [SEP] are left out. The template prefixes are RAGTruth-style instructions
for the task type (QA / Summary / Data2txt; none for an unknown type). Dict/list contexts (Data2txt structured
data) are rendered as compact JSON. token_type_ids are 0 up to and including the [SEP] before the answer and
1 for the answer and its [SEP] (BERT-style pair segments); models without token types (ModernBERT) ignore them.

Labels: answer tokens are 1 when their characters overlap a hallucinated span, else 0; every other token
(specials, template, context, question) is -100. Whitespace around a token or a span never counts as
overlap, so a token " is" right after span "Paris " stays 0.

Truncation: only the context is cut (its tail), never the question, the answer or the template. When the
question + answer alone do not fit, AnswerTooLongError is raised (training counts and reports those ids;
inference should split the answer).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from inference.grounding import content_words
from inference.labels import IGNORE_INDEX

TASK_TYPES = ("QA", "Summary", "Data2txt")

# RAGTruth's generation prompts (Niu et al. 2024), shortened; the context comes first in the Detector's input.
CONTEXT_PREFIX = {
    "QA": "Bear in mind that your response should be strictly based on the following passages:\n",
    "Summary": "Summarize the following news:\n",
    "Data2txt": ("Write an objective overview about the following local business based only on the provided "
                 "structured data in the JSON format. Don't make up information.\nStructured data:\n"),
}
QUESTION_PREFIX = {
    "QA": "Briefly answer the following question:\n",
}

_TASK_ALIASES = {
    "qa": "QA", "question answering": "QA", "question_answering": "QA",
    "summary": "Summary", "summarization": "Summary", "summarisation": "Summary",
    "data2txt": "Data2txt", "data-to-text": "Data2txt", "data_to_text": "Data2txt", "data2text": "Data2txt",
}


class AnswerTooLongError(ValueError):
    """The question + answer (+ template and special tokens) alone exceed max_length."""

    def __init__(self, needed: int, max_length: int):
        super().__init__(f"question + answer need {needed} tokens with the template and special tokens, "
                         f"more than max_length={max_length}; the answer is never truncated")
        self.needed = needed
        self.max_length = max_length


def normalize_task_type(task_type: str | None) -> str | None:
    """'qa' / 'summarization' / 'data-to-text' ... -> 'QA' / 'Summary' / 'Data2txt'; unknown -> None."""
    if not task_type:
        return None
    if task_type in TASK_TYPES:
        return task_type
    return _TASK_ALIASES.get(str(task_type).strip().lower())


def render_context(context: Any) -> str:
    """Structured data (dict/list) -> compact JSON; strings unchanged; None -> ''."""
    if context is None:
        return ""
    if isinstance(context, (dict, list)):
        return json.dumps(context, ensure_ascii=False)
    if not isinstance(context, str):
        raise TypeError(f"context must be a string, dict or list, got {type(context).__name__}")
    return context


# ---- tokenizer access ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SpecialTokens:
    cls_id: int
    sep_id: int
    pad_id: int = 0

    @classmethod
    def from_tokenizer(cls, tokenizer) -> SpecialTokens:
        """From a transformers tokenizer (cls/sep/pad attributes) or a raw tokenizers.Tokenizer (by name)."""
        if hasattr(tokenizer, "cls_token_id") and getattr(tokenizer, "cls_token_id", None) is not None:
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            return cls(int(tokenizer.cls_token_id), int(tokenizer.sep_token_id), int(pad))
        backend = _backend(tokenizer)

        def first(*names):
            for n in names:
                i = backend.token_to_id(n)
                if i is not None:
                    return int(i)
            return None

        cls_id, sep_id = first("[CLS]", "<s>", "<cls>"), first("[SEP]", "</s>", "<sep>")
        if cls_id is None or sep_id is None:
            raise ValueError("tokenizer has no [CLS]/[SEP] (or <s>/</s>) tokens; pass special_tokens=...")
        pad = first("[PAD]", "<pad>")
        return cls(cls_id, sep_id, pad if pad is not None else 0)


def _backend(tokenizer):
    """The `tokenizers.Tokenizer` behind a transformers fast tokenizer, or the tokenizer itself."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not hasattr(backend, "encode") or not hasattr(backend, "token_to_id"):
        raise TypeError("a transformers *fast* tokenizer or a tokenizers.Tokenizer is required "
                        f"(offset mappings are needed), got {type(tokenizer).__name__}")
    return backend


@contextlib.contextmanager
def _plain(backend):
    """Encode without the truncation/padding a tokenizer.json (or a previous HF call) may carry; restore after."""
    trunc, pad = backend.truncation, backend.padding
    if trunc:
        backend.no_truncation()
    if pad:
        backend.no_padding()
    try:
        yield backend
    finally:
        if trunc:
            backend.enable_truncation(**trunc)
        if pad:
            backend.enable_padding(**pad)


def tokenize_segment(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and (start, end) character offsets into `text`, without special tokens or truncation."""
    if not text:
        return [], []
    backend = _backend(tokenizer)
    with _plain(backend):
        enc = backend.encode(text, add_special_tokens=False)
    return list(enc.ids), [tuple(o) for o in enc.offsets]


# ---- the input format ------------------------------------------------------------------------------------

@dataclass
class DetectorInput:
    """One encoded (context, question, answer) example; lists, ready for a collator or np.asarray([...])."""

    input_ids: list[int]
    attention_mask: list[int]
    token_type_ids: list[int]
    answer_start: int  # index in input_ids of the first answer token
    answer_offsets: list[tuple[int, int]]  # per answer token: (start, end) characters in the answer
    labels: list[int] | None = None  # per input token: 0/1 on answer tokens, -100 elsewhere
    context_truncated: bool = False
    context_tokens: int = 0  # tokens of the whole context
    context_token_range: tuple[int, int] = (0, 0)  # [start, end) of the context tokens kept
    context_char_range: tuple[int, int] = (0, 0)  # [start, end) of the context characters kept
    task_type: str | None = None
    meta: dict = field(default_factory=dict)

    @property
    def answer_slice(self) -> slice:
        return slice(self.answer_start, self.answer_start + len(self.answer_offsets))

    def __len__(self) -> int:
        return len(self.input_ids)

    def model_inputs(self, names: Sequence[str] = ("input_ids", "attention_mask")) -> dict[str, np.ndarray]:
        """A batch of one as int64 arrays, for ONNX Runtime / numpy backends."""
        return {n: np.asarray([getattr(self, n)], dtype=np.int64) for n in names}

    def with_answer_types(self, types: Sequence[int]) -> DetectorInput:
        """A copy whose answer tokens carry `types` (one per answer token; inference.grounding.answer_type_ids)
        as their token types; the rest (context, question, the answer's closing separator) keep theirs."""
        if len(types) != len(self.answer_offsets):
            raise ValueError(f"{len(types)} answer types for {len(self.answer_offsets)} answer tokens")
        token_types = list(self.token_type_ids)
        token_types[self.answer_slice] = list(types)
        return replace(self, token_type_ids=token_types)


@dataclass
class _Parts:
    special: SpecialTokens
    prefix_ids: list[int]
    ctx_ids: list[int]
    ctx_offsets: list[tuple[int, int]]
    q_ids: list[int]
    ans_ids: list[int]
    ans_offsets: list[tuple[int, int]]
    has_question: bool
    ctx_text: str = ""
    q_text: str = ""

    @property
    def fixed_len(self) -> int:
        """Everything but the context tokens: [CLS] prefix [SEP] (question [SEP]) answer [SEP]."""
        return len(self.prefix_ids) + len(self.q_ids) + len(self.ans_ids) + (4 if self.has_question else 3)


def _parts(tokenizer, context, question, answer, task_type, special) -> _Parts:
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a string, got {type(answer).__name__}")
    task = normalize_task_type(task_type)
    ctx = render_context(context)
    q = (question or "").strip() if isinstance(question, str) or question is None else str(question)
    special = special or SpecialTokens.from_tokenizer(tokenizer)
    prefix_ids, _ = tokenize_segment(tokenizer, CONTEXT_PREFIX.get(task, ""))
    ctx_ids, ctx_offsets = tokenize_segment(tokenizer, ctx)
    q_ids, _ = tokenize_segment(tokenizer, QUESTION_PREFIX.get(task, "") + q) if q else ([], [])
    ans_ids, ans_offsets = tokenize_segment(tokenizer, answer)
    return _Parts(special, prefix_ids, ctx_ids, ctx_offsets, q_ids, ans_ids, ans_offsets, bool(q), ctx, q)


def _assemble(p: _Parts, ctx_start: int, ctx_end: int, answer: str, spans, task, max_length) -> DetectorInput:
    return _assemble_ranges(p, [(ctx_start, ctx_end)] if ctx_end > ctx_start else [], answer, spans, task,
                            max_length)


def _assemble_ranges(p: _Parts, ranges: Sequence[tuple[int, int]], answer: str, spans, task, max_length
                     ) -> DetectorInput:
    """One window whose context is the given [start, end) context-token ranges, in that order (one range: a
    contiguous window; several: a packed window, see pack_context_ranges)."""
    s = p.special
    ctx_ids = [t for a, b in ranges for t in p.ctx_ids[a:b]]
    head = [s.cls_id] + p.prefix_ids + ctx_ids + [s.sep_id]
    if p.has_question:
        head += p.q_ids + [s.sep_id]
    ids = head + p.ans_ids + [s.sep_id]
    n_ans = len(p.ans_ids)
    labels = None
    if spans is not None:
        ans_labels = token_labels(answer, p.ans_offsets, spans)
        labels = [IGNORE_INDEX] * len(head) + ans_labels + [IGNORE_INDEX]
    ctx_start, ctx_end = (ranges[0][0], ranges[-1][1]) if ranges else (0, 0)
    if ranges:
        char_range = (p.ctx_offsets[ctx_start][0], p.ctx_offsets[ctx_end - 1][1])
    else:
        char_range = (0, 0)
    meta = {}
    if len(ranges) > 1:  # the context characters each range holds (a packed window is not one slice)
        meta["context_token_ranges"] = [tuple(r) for r in ranges]
        meta["context_char_ranges"] = [(p.ctx_offsets[a][0], p.ctx_offsets[b - 1][1]) for a, b in ranges]
    return DetectorInput(
        input_ids=ids,
        attention_mask=[1] * len(ids),
        token_type_ids=[0] * len(head) + [1] * (n_ans + 1),
        answer_start=len(head),
        answer_offsets=list(p.ans_offsets),
        labels=labels,
        context_truncated=len(ctx_ids) < len(p.ctx_ids),
        context_tokens=len(p.ctx_ids),
        context_token_range=(ctx_start, ctx_end),
        context_char_range=char_range,
        task_type=task,
        meta=meta,
    )


def encode_detector_input(tokenizer, context: Any, question: str | None, answer: str, max_length: int = 512,
                          task_type: str | None = None, spans: Sequence[dict] | None = None,
                          context_start: int = 0, special_tokens: SpecialTokens | None = None) -> DetectorInput:
    """Encode one example in the Detector format; cut only the context's tail to fit `max_length`.

    `spans` (gold, character offsets into `answer`, dicts with start/end) adds `labels`; use check_spans first
    for untrusted data. `context_start` (a context token index) starts the context there, for windowing.
    Raises AnswerTooLongError when the question + answer cannot fit.
    """
    p = _parts(tokenizer, context, question, answer, task_type, special_tokens)
    budget = max_length - p.fixed_len
    if budget < 0:
        raise AnswerTooLongError(p.fixed_len, max_length)
    start = min(max(context_start, 0), len(p.ctx_ids))
    end = min(len(p.ctx_ids), start + budget)
    return _assemble(p, start, end, answer, spans, normalize_task_type(task_type), max_length)


def context_windows(tokenizer, context: Any, question: str | None, answer: str, max_length: int = 512,
                    overlap: int = 64, task_type: str | None = None, spans: Sequence[dict] | None = None,
                    special_tokens: SpecialTokens | None = None, fill: str = "full") -> list[DetectorInput]:
    """Cover the whole context with overlapping windows, each with the full question and answer
    (plan_windows: the fewest windows that keep at least `overlap` shared context tokens; `fill` "full" gives
    each a full budget of context, "even" only as much as covering needs).

    Every window has the same answer tokens (same `answer_offsets`), so per-token probabilities can be
    combined across windows (e.g. the minimum P(hallucinated): a claim supported by any window is supported).
    """
    p = _parts(tokenizer, context, question, answer, task_type, special_tokens)
    budget = max_length - p.fixed_len
    if budget < 0:
        raise AnswerTooLongError(p.fixed_len, max_length)
    task = normalize_task_type(task_type)
    n = len(p.ctx_ids)
    if n <= budget:
        return [_assemble(p, 0, n, answer, spans, task, max_length)]
    if budget == 0:
        return [_assemble(p, 0, 0, answer, spans, task, max_length)]
    if fill == "packed":
        ranges = pack_context_ranges(p.ctx_text, p.ctx_offsets, f"{p.q_text} {answer}", budget)
        return [_assemble_ranges(p, ranges, answer, spans, task, max_length)]
    return [_assemble(p, start, end, answer, spans, task, max_length)
            for start, end in plan_windows(n, budget, overlap, fill)]


WINDOW_FILLS = ("full", "even", "packed")
_UNIT_TOKENS = 48  # a context unit (sentence, line) longer than this is cut: JSON records are one long line
_UNIT_END = re.compile(r"[.!?]['\")\]]*$")


def context_units(text: str, offsets: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """[start, end) context-token ranges of the context's sentences and lines, none over _UNIT_TOKENS."""
    units, start = [], 0
    for i, (a, b) in enumerate(offsets):
        nxt = offsets[i + 1][0] if i + 1 < len(offsets) else len(text)
        gap = text[b:nxt]
        ends = (bool(_UNIT_END.search(text[a:b])) and (not gap or gap[0].isspace())) or "\n" in gap
        if ends or i + 1 - start >= _UNIT_TOKENS or i + 1 == len(offsets):
            units.append((start, i + 1))
            start = i + 1
    return units


def _pack_words(text: str) -> set[str]:
    return {w for w in content_words(text) if len(w) > 2 or w.isdigit()}


def pack_context_ranges(text: str, offsets: Sequence[tuple[int, int]], answer: str, budget: int
                        ) -> list[tuple[int, int]]:
    """The context units (sentences, lines) to show the Detector in one window of `budget` context tokens when
    the whole context does not fit, as merged [start, end) token ranges in document order.

    Why: a 512-position encoder sees ~350 context tokens next to an answer, and the evidence for an answer's
    claims is usually spread over a few sentences of a longer context; a contiguous window then lacks the
    evidence for part of the answer (and training masks those tokens). Packing picks units greedily by how many
    answer words not yet covered they contain (ties: fewer tokens, then earlier), then fills the rest of the
    budget with the units sharing the most answer words, nearest first, so one window holds the evidence.
    Measured on RAGTruth it lost recall against contiguous windows (docs/experiments.md, 2026-12-02): an
    option, not the recipes' plan."""
    units = context_units(text, offsets)
    if not units:
        return []
    wanted = _pack_words(answer)
    words = [_pack_words(text[offsets[a][0]:offsets[b - 1][1]]) & wanted for a, b in units]
    chosen: set[int] = set()
    covered: set[str] = set()
    room = budget
    while True:
        gains = [(len(words[i] - covered), -(units[i][1] - units[i][0]), -i) for i in range(len(units))
                 if i not in chosen and units[i][1] - units[i][0] <= room]
        if not gains or max(gains)[0] == 0:
            break
        i = -max(gains)[2]
        chosen.add(i)
        covered |= words[i]
        room -= units[i][1] - units[i][0]

    def distance(i: int) -> int:
        return min((abs(i - j) for j in chosen), default=i)

    for i in sorted(set(range(len(units))) - chosen, key=lambda i: (-len(words[i]), distance(i), i)):
        size = units[i][1] - units[i][0]
        if size <= room:
            chosen.add(i)
            room -= size
    merged: list[tuple[int, int]] = []
    for i in sorted(chosen):
        a, b = units[i]
        if merged and merged[-1][1] == a:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


def plan_windows(n: int, budget: int, min_overlap: int, fill: str = "full") -> list[tuple[int, int]]:
    """[start, end) context-token ranges of the fewest windows of at most `budget` tokens that cover `n` tokens,
    consecutive ones sharing at least `min_overlap` tokens.

    fill "full": every window holds `budget` tokens (plan_window_starts; leftover room becomes extra overlap).
    fill "even": the same number of windows, each only as long as covering with that overlap needs,
    ceil((n + (k - 1) * overlap) / k) tokens. Two windows over a 512-token context then hold ~270 context
    tokens each instead of ~460: a third less compute for the same count (quality: docs/experiments.md, 2026-12-02).
    """
    if fill not in WINDOW_FILLS:
        raise ValueError(f"window fill: {fill!r} is not one of {', '.join(WINDOW_FILLS)}")
    starts = plan_window_starts(n, budget, min_overlap)
    k = len(starts)
    if fill == "full" or k == 1:
        return [(s, min(n, s + budget)) for s in starts]
    size = min(budget, -(-(n + (k - 1) * _clamped_overlap(min_overlap, budget)) // k))
    return [(s, s + size) for s in _spread(n, size, k)]


def _clamped_overlap(min_overlap: int, budget: int) -> int:
    return max(0, min(min_overlap, budget - 1))


def _spread(n: int, size: int, k: int) -> list[int]:
    """Starts of k windows of `size` tokens spread evenly from 0 to n - size (floors: every gap is at most
    ceil((n - size) / (k - 1)))."""
    last = n - size
    return [(i * last) // (k - 1) for i in range(k)]


def plan_window_starts(n: int, budget: int, min_overlap: int) -> list[int]:
    """Context-token starts of the fewest full windows of `budget` tokens that cover `n` tokens with
    consecutive windows sharing at least `min_overlap` tokens.

    The count is ceil((n - o) / (budget - o)); the windows are then spread evenly from 0 to n - budget, so the
    room left over becomes extra overlap instead of a short last window (every window sees a full budget of
    context). With min_overlap 0 this is ceil(n / budget) windows, the least any cover can use.
    """
    if n <= budget:
        return [0]
    o = _clamped_overlap(min_overlap, budget)
    k = -(-(n - o) // (budget - o))
    # evenly spaced: every gap is <= ceil((n - budget) / (k - 1)) <= budget - o (integers)
    return _spread(n, budget, k)


# ---- labels ----------------------------------------------------------------------------------------------

def _strip_range(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink [start, end) so it neither starts nor ends with whitespace (may become empty)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def token_labels(answer: str, answer_offsets: Sequence[tuple[int, int]], spans: Sequence[dict]) -> list[int]:
    """1 for answer tokens whose characters overlap a span (whitespace excluded on both sides), else 0.

    A token that is only whitespace (byte-level BPE newline tokens) is 1 when it lies inside a span.
    """
    ranges = []
    for sp in spans:
        a, b = _strip_range(answer, max(0, int(sp["start"])), min(len(answer), int(sp["end"])))
        if b > a:
            ranges.append((a, b))
    out = []
    for s, e in answer_offsets:
        ts, te = _strip_range(answer, s, e)
        if te > ts:
            hit = any(ts < b and te > a for a, b in ranges)
        else:  # whitespace-only or zero-width token: inside a span?
            hit = any(a <= s and e <= b and e > s for a, b in ranges) if e > s else False
        out.append(1 if hit else 0)
    return out


# ---- gold-span hygiene ------------------------------------------------------------------------------------

def check_spans(answer: str, spans: Sequence[dict] | None) -> tuple[list[dict], list[str]]:
    """Validate gold spans against the answer; returns (clean sorted non-overlapping spans, problem codes).

    Problems (the caller decides what to do; training drops records with the fatal ones):
      "span_missing_offsets"  neither start/end nor text                                    (fatal)
      "span_text_not_found"   text-only span whose text does not occur in the answer         (fatal)
      "span_outside_answer"   offsets outside [0, len(answer)] or start >= end, text not found (fatal)
      "span_text_mismatch"    answer[start:end] != text and the text is not found            (fatal)
      "span_relocated"        offsets wrong but the text occurs in the answer: moved there (nearest match)
      "span_located_by_text"  no offsets (text-only annotation): placed where the text occurs
      "spans_overlap"         overlapping spans were merged into one
    """
    problems: list[str] = []
    fixed: list[tuple[int, int, dict]] = []
    for sp in spans or []:
        text = sp.get("text")
        start, end = sp.get("start"), sp.get("end")
        has_offsets = isinstance(start, int) and isinstance(end, int) and not isinstance(start, bool)
        valid = has_offsets and 0 <= start < end <= len(answer)
        if valid and (text is None or answer[start:end] == text):
            fixed.append((start, end, sp))
            continue
        located = _locate(answer, text, start if has_offsets else 0) if text else None
        if located is not None:
            problems.append("span_relocated" if has_offsets else "span_located_by_text")
            fixed.append((located[0], located[1], sp))
            continue
        if not has_offsets:
            problems.append("span_text_not_found" if text else "span_missing_offsets")
        elif not valid:
            problems.append("span_outside_answer")
        else:
            problems.append("span_text_mismatch")
    fixed.sort(key=lambda t: (t[0], t[1]))
    merged: list[dict] = []
    for start, end, sp in fixed:
        if merged and start < merged[-1]["end"]:
            if "spans_overlap" not in problems:
                problems.append("spans_overlap")
            merged[-1]["end"] = max(merged[-1]["end"], end)
            merged[-1]["text"] = answer[merged[-1]["start"]:merged[-1]["end"]]
            continue
        out = {"start": start, "end": end, "text": answer[start:end]}
        if sp.get("label_type"):
            out["label_type"] = sp["label_type"]
        merged.append(out)
    return merged, problems


FATAL_SPAN_PROBLEMS = frozenset({"span_missing_offsets", "span_text_not_found", "span_outside_answer",
                                 "span_text_mismatch"})


def _locate(answer: str, text: str, near: int) -> tuple[int, int] | None:
    """Occurrence of `text` in `answer` nearest to `near` (exact, then case/whitespace-insensitive)."""
    text = text.strip()
    if not text:
        return None
    hits = [m.start() for m in re.finditer(re.escape(text), answer)]
    if hits:
        s = min(hits, key=lambda h: abs(h - near))
        return s, s + len(text)
    pattern = r"\s+".join(re.escape(w) for w in text.split())
    m = min(re.finditer(pattern, answer, flags=re.IGNORECASE), key=lambda m: abs(m.start() - near), default=None)
    return (m.start(), m.end()) if m else None


# ---- predictions -> spans ---------------------------------------------------------------------------------

_WORD = re.compile(r"\w")


def token_probs_to_spans(answer: str, answer_offsets: Sequence[tuple[int, int]], probs: Sequence[float],
                         threshold: float = 0.5, min_span_chars: int = 1, snap_to_words: bool = True,
                         merge_gap_chars: int = 1, extend_to: float | None = None) -> list[dict]:
    """Per-answer-token P(hallucinated) -> merged character spans with confidence.

    Tokens with prob >= threshold are flagged; flagged tokens whose characters are separated by at most
    `merge_gap_chars` non-word characters (spaces, a hyphen) merge into one span. With `snap_to_words`, a span
    that starts or ends inside a word grows to the whole word (a flagged "##ris" flags "Paris"). Spans shorter
    than `min_span_chars` (after stripping whitespace) are dropped. With `extend_to` (below the threshold), the
    flagged tokens first grow over every run of adjacent tokens with prob >= extend_to that holds one of them
    (hysteresis: the threshold finds an error, the lower bound how far it reaches). `confidence` is the mean
    probability of the tokens at the threshold in the span; also reported: `max_prob`.
    """
    probs = np.asarray(probs, dtype=float).reshape(-1)
    if len(probs) != len(answer_offsets):
        raise ValueError(f"{len(probs)} probabilities for {len(answer_offsets)} answer tokens")
    groups: list[list[int]] = []
    # only the tokens at or over the threshold are visited (calibration sweeps call this ~10^5 times); `not <`
    # keeps a NaN probability flagged, never silently passed
    flagged = ~(probs < threshold)
    if extend_to is not None and extend_to < threshold and flagged.any():
        flagged = _hysteresis(probs, flagged, extend_to)
    for i in np.flatnonzero(flagged).tolist():
        s, e = answer_offsets[i]
        if e <= s or not answer[s:e].strip():
            continue
        if groups:
            prev_end = answer_offsets[groups[-1][-1]][1]
            gap = answer[prev_end:s]
            if s <= prev_end or (len(gap) <= merge_gap_chars and not _WORD.search(gap)):
                groups[-1].append(i)
                continue
        groups.append([i])
    spans = []
    for g in groups:
        start, end = answer_offsets[g[0]][0], answer_offsets[g[-1]][1]
        if snap_to_words:
            while start > 0 and _WORD.match(answer[start - 1]) and _WORD.match(answer[start]):
                start -= 1
            while end < len(answer) and _WORD.match(answer[end]) and _WORD.match(answer[end - 1]):
                end += 1
        start, end = _strip_range(answer, start, end)
        if end - start < max(1, min_span_chars):
            continue
        if spans and start <= spans[-1]["end"]:  # word snapping joined two groups
            prev = spans[-1]
            prev["end"] = max(prev["end"], end)
            prev["text"] = answer[prev["start"]:prev["end"]]
            prev["_p"].extend(probs[g].tolist())
            continue
        spans.append({"start": start, "end": end, "text": answer[start:end], "_p": probs[g].tolist()})
    for sp in spans:
        p = np.asarray(sp.pop("_p"))
        seeds = p[~(p < threshold)]  # extended tokens widen a span, they do not dilute its confidence
        sp["confidence"] = float(np.mean(seeds if len(seeds) else p))
        sp["max_prob"] = float(np.max(p))
    return spans


def check_span_extension(value, name: str = "span_extension") -> None:
    """A span extension is a fraction of the threshold in (0, 1] (1: none); ValueError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(f"{name}: a fraction of the threshold in (0, 1] (1: none), got {value!r}")


def _hysteresis(probs: np.ndarray, flagged: np.ndarray, low: float) -> np.ndarray:
    """Flagged tokens grown over their neighbours with probability >= `low` (runs of such tokens holding a
    flagged one): hysteresis thresholding, as in edge detection."""
    weak = ~(probs < low) | flagged
    starts = weak & ~np.concatenate([[False], weak[:-1]])
    run = np.cumsum(starts) * weak  # 1, 2, ... per run of weak tokens; 0 outside them
    return weak & np.isin(run, run[flagged])


def answer_token_probs(logits: np.ndarray, enc: DetectorInput, hallucinated_id: int = 1) -> np.ndarray:
    """Softmax P(hallucinated) of the answer tokens from one example's logits (seq_len x num_labels)."""
    z = np.asarray(logits, dtype=float)[enc.answer_slice]
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True))[:, hallucinated_id]


def iter_answer_words(answer: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each word in the answer (used by the lexical baseline and word snapping tests)."""
    for m in re.finditer(r"\w+(?:[.,'’-]\w+)*", answer):
        yield m.start(), m.end()
