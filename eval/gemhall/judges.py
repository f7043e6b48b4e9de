"""Grading an answer that is not an IDK: exact match (strings, numbers, MMLU letters) or a strict LLM judge."""

from __future__ import annotations

import math
import re

from eval.backends import Backend, BackendError

from .data import Item

_TRAILING = ".!?,;:"
_QUOTES = "\"'`*_"


def normalize_answer(text: str) -> str:
    """Lowercase, trim, drop surrounding quotes/markdown and trailing punctuation, squeeze spaces."""
    text = (text or "").replace("\u2019", "'").strip().lower()
    prev = None
    while prev != text:
        prev = text
        text = text.strip().strip(_QUOTES).strip().rstrip(_TRAILING).strip()
    return re.sub(r"\s+", " ", text)


def _as_number(text: str) -> float | None:
    candidate = text.replace(",", "").replace("_", "")
    candidate = candidate.removesuffix("%")
    try:
        value = float(candidate)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def exact_match(pred: str, gold: str) -> bool:
    p, g = normalize_answer(pred), normalize_answer(gold)
    if p == g:
        return True
    pn, gn = _as_number(p), _as_number(g)
    return pn is not None and gn is not None and math.isclose(pn, gn, rel_tol=1e-9, abs_tol=1e-12)


_LETTER_PATTERNS = [
    # "(B) Paris", then "B", "B.", "B)", "**B**", "B: Paris", "B - Paris" at the very start (not "A cat ...")
    re.compile(r"^\(([A-D])\)"),
    re.compile(r"^\(?([a-dA-D])\)(?:\s|$)|^([a-d])\.?\s*$"),  # lowercase only when unambiguous: "b)", "b"
    re.compile(r"^([A-D])(?:\s*[.):\-,]|\s*$|\s*\n)"),
    # "The answer is B", "Answer: (B)", "correct option is: B"
    re.compile(r"(?i:answer|option|choice)\s*(?i:is|would be)?\s*:?\s*\(?([A-D])\b(?!['\w])"),
]


def extract_letter(text: str, choices: dict[str, str] | None = None) -> str | None:
    """Read the chosen option letter out of an MMLU answer; None when no letter can be read."""
    t = re.sub(r"[*_`]", "", text or "").strip().strip("\"' ").strip()  # markdown emphasis, quotes
    for pattern in _LETTER_PATTERNS:
        m = pattern.search(t)
        if m:
            return next(g for g in m.groups() if g).upper()
    if choices:  # the option text itself, e.g. "Paris", when exactly one option matches
        norm = normalize_answer(t)
        hits = [letter for letter, option in choices.items() if normalize_answer(option) == norm]
        if len(hits) == 1:
            return hits[0]
    return None


class ExactJudge:
    kind = "exact"
    calls = 0

    def judge(self, item: Item, pred: str) -> tuple[bool, str | None]:
        if item.choices:
            letter = extract_letter(pred, item.choices)
            return letter == item.gold.strip().upper(), letter
        return exact_match(pred, item.gold), None

    async def ajudge(self, item: Item, pred: str) -> tuple[bool, str | None]:
        return self.judge(item, pred)


def judge_prompt(item: Item, pred: str) -> str:
    gold = item.gold
    if item.choices and gold in item.choices:
        gold = f"{gold}) {item.choices[gold]}"
    return (
        "You are a strict grader. Decide whether the candidate answer is correct: it must give the same "
        "answer as the reference answer (wording, formatting and units may differ; hedging between several "
        "answers, or a different answer, is incorrect).\n\n"
        "Question:\n" + item.question + "\n\n"
        "Reference answer: " + gold + "\n"
        "Candidate answer: " + pred + "\n\n"
        "Reply with exactly one word: YES if the candidate answer is correct, NO otherwise."
    )


def parse_verdict(reply: str) -> bool | None:
    word = re.sub(r"[^A-Za-z]", " ", reply or "").strip().upper().split()
    if not word:
        return None
    if word[0] == "YES":
        return True
    if word[0] == "NO":
        return False
    return None


class LLMJudge:
    """Strict YES/NO grader through the backend layer (same limits, rate window and retries as answers)."""

    kind = "llm"
    max_output_tokens = 4

    def __init__(self, backend: Backend, *, seed: int | None = None, thinking_budget: int | None = None):
        self.backend = backend
        self.seed = seed
        self.thinking_budget = thinking_budget
        self.calls = 0

    def _kwargs(self) -> dict:
        return {"max_output_tokens": self.max_output_tokens, "temperature": 0.0, "seed": self.seed,
                "thinking_budget": self.thinking_budget}

    def _verdict(self, reply: str) -> tuple[bool, str]:
        verdict = parse_verdict(reply)
        if verdict is None:
            raise BackendError(f"judge: no YES/NO in reply {reply!r}")
        return verdict, reply.strip()

    def judge(self, item: Item, pred: str) -> tuple[bool, str]:
        self.calls += 1
        return self._verdict(self.backend.generate(judge_prompt(item, pred), **self._kwargs()))

    async def ajudge(self, item: Item, pred: str) -> tuple[bool, str]:
        self.calls += 1
        return self._verdict(await self.backend.agenerate(judge_prompt(item, pred), **self._kwargs()))
