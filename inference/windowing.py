"""Long contexts: the Detector sees the whole context through overlapping windows, the Explainer the most
relevant premise windows. Nothing is cut silently; a context over the hard limit is refused.

Detector: `inference.spans.context_windows` (the one Detector format) splits the context into windows that each
hold the template, the whole question and the whole answer; consecutive windows share `overlap` context
tokens. Per answer token the probability of HALLUCINATED is combined across windows (inference.detector_stage):
`max` (a token flagged anywhere is flagged; the cost is that a claim supported in one window can be flagged by
another window that lacks its evidence) or `min` (a claim supported by any window counts as supported); a
trained Detector's calibration (detector.json) says which one its calibration split preferred. A single window
(short input) is exactly the unwindowed input, so both agree there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from inference.grounding import content_words
from inference.spans import AnswerTooLongError, DetectorInput, context_windows, tokenize_segment

_WORDS = re.compile(r"\w+")


class InputTooLongError(ValueError):
    """The input cannot be checked within the configured limits; the message names the limit to raise."""


def join_documents(documents: Sequence[str]) -> str:
    """Several documents (tool results, retrieved passages) become one context, separated by blank lines."""
    return "\n\n".join(d.strip() for d in documents if d.strip())


def detector_windows(tokenizer, context: str, question: str | None, answer: str, *, max_length: int,
                     overlap: int, max_context_tokens: int, task_type: str | None, special_tokens=None,
                     where: str = "", max_windows: int = 0, fill: str = "full") -> list[DetectorInput]:
    """The Detector windows of one input (at most `max_windows` of them, the ones sharing the most words with the
    answer, when it is > 0); InputTooLongError for a context over the hard limit or an answer (+ question) that
    leaves no room for context in a window."""
    where = where or "input"
    try:
        windows = context_windows(tokenizer, context, question, answer, max_length=max_length, overlap=overlap,
                                  task_type=task_type, special_tokens=special_tokens, fill=fill)
    except AnswerTooLongError as exc:
        raise InputTooLongError(
            f"{where}: the question and answer alone need {exc.needed} tokens, more than the Detector's window "
            f"of {exc.max_length}; the answer is never truncated (shorten it, or use a Detector with more "
            "positions: hallucination_mitigation.hallucination_model.max_length)") from None
    n_context = windows[0].context_tokens
    if n_context > max_context_tokens:
        raise InputTooLongError(
            f"{where}: the context has {n_context} tokens, over the hard limit of {max_context_tokens} "
            "(hallucination_mitigation.hallucination_model.max_context_tokens); it is refused rather than "
            "truncated")
    if n_context and all(w.context_token_range[1] <= w.context_token_range[0] for w in windows):
        raise InputTooLongError(
            f"{where}: the question and answer fill the Detector's {max_length}-token window and leave no room "
            "for the context; shorten them or use a Detector with more positions")
    return select_windows(windows, context, answer, max_windows)


def context_coverage(windows: Sequence[DetectorInput]) -> float | None:
    """Share of the context's tokens that some window holds (1.0: the Detector read all of it; less when
    max_windows dropped windows or a packed window left out sentences); None without windows or context."""
    if not windows or not windows[0].context_tokens:
        return None
    read: set[int] = set()
    for w in windows:
        for a, b in w.meta.get("context_token_ranges") or [w.context_token_range]:
            read.update(range(a, b))
    return len(read) / windows[0].context_tokens


def answer_overlap(window_text: str, answer_words: set[str]) -> int:
    """How many of the answer's words (lower-cased, over 2 characters) the window's context contains."""
    return len(answer_words & {w.lower() for w in _WORDS.findall(window_text)})


def rank_windows(windows: Sequence[DetectorInput], context: str, answer: str) -> list[int]:
    """Window indices, most answer-overlapping first (ties: earlier first). Training builds each long example
    from the first of them (training.detector), so a Detector has learned from exactly such windows."""
    words = {w.lower() for w in _WORDS.findall(answer) if len(w) > 2}
    scores = [answer_overlap(context[w.context_char_range[0]:w.context_char_range[1]], words) for w in windows]
    return sorted(range(len(windows)), key=lambda i: (-scores[i], i))


def select_windows(windows: list[DetectorInput], context: str, answer: str, max_windows: int
                   ) -> list[DetectorInput]:
    """The `max_windows` windows that share the most words with the answer, in document order (all windows
    when max_windows is 0 or there are no more than that). Under `min` aggregation dropping windows can only raise
    the model's probability for a token; under `max` only lower it, and the dropped windows, sharing few words
    with the answer, mostly add false flags there. docs/inference.md has what each cost on RAGTruth and on long
    contexts."""
    if max_windows <= 0 or len(windows) <= max_windows:
        return windows
    keep = sorted(rank_windows(windows, context, answer)[:max_windows])
    return [windows[i] for i in keep]


# ---- Explainer premises --------------------------------------------------------------------------------------


def premise_windows(tokenizer, context: str, budget: int, overlap: int = 32) -> list[str]:
    """The context cut into windows of at most `budget` tokens of the Explainer's tokenizer (character slices
    of the original text, so nothing is re-tokenised differently)."""
    ids, offsets = tokenize_segment(tokenizer, context)
    if len(ids) <= budget or budget <= 0:
        return [context]
    step = max(1, budget - min(overlap, budget // 2))
    out = []
    start = 0
    while True:
        end = min(len(ids), start + budget)
        out.append(context[offsets[start][0]:offsets[end - 1][1]])
        if end >= len(ids):
            return out
        start += step


def rank_premises(windows: Sequence[str], hypothesis: str, k: int) -> list[str]:
    """The k windows sharing the most content words with the hypothesis (all of them when there are <= k),
    in document order."""
    if len(windows) <= k:
        return list(windows)
    target = content_words(hypothesis)
    scored = sorted(range(len(windows)), key=lambda i: (-len(target & content_words(windows[i])), i))
    return [windows[i] for i in sorted(scored[:k])]
