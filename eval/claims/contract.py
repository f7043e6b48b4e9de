"""The strict JSON output contract for LLM replies: parse, validate, one repair round, then give up.

A reply is accepted only when it is a JSON document (optionally inside one ```json fence, which chat models add
out of habit) that the caller's validator accepts. Anything else is classified:

    malformed      not JSON, or JSON of the wrong shape (the validator's message says what is wrong)
    refusal        not JSON and it reads like a refusal ("I'm sorry, I can't ...")
    backend_error  the backend call itself failed (after the backend layer's own retries)

`ask_json` sends the prompt; on malformed / refusal it sends one repair prompt (the problem, the bad reply and the
original task) and validates again. The caller decides what a final failure means (the claim extractor falls back
to sentence splitting, the LLM verifier marks the batch `unsure`); every outcome is returned so it can be counted.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eval.backends import Backend, BackendError, FatalBackendError

OUTCOMES = ("ok", "repaired", "malformed", "refusal", "backend_error")

_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(?P<body>.*?)\n?```$", re.DOTALL)
_REFUSAL = re.compile(
    r"^\W*(?:i'?m sorry|i am sorry|sorry\b|i can(?:no|')t|i cannot|i won'?t|i'?m (?:not able|unable)|"
    r"i am (?:not able|unable)|as an ai\b|i must decline|unfortunately,? i)|"
    r"\b(?:can(?:no|')t|unable to) (?:help|assist|comply|provide|do that)\b",
    re.IGNORECASE,
)


class ContractError(ValueError):
    """A reply broke the contract; `kind` is "malformed" or "refusal"."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def looks_like_refusal(text: str) -> bool:
    return bool(_REFUSAL.search(text.strip()[:300]))


def parse_json_reply(text: str, validate: Callable[[Any], Any]) -> Any:
    """The validated value of a reply, or ContractError. `validate` raises ValueError / TypeError with a short message."""
    raw = (text or "").strip()
    fenced = _FENCE.match(raw)
    body = fenced.group("body").strip() if fenced else raw
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        if not raw:
            raise ContractError("malformed", "the reply is empty") from None
        if looks_like_refusal(raw):
            raise ContractError("refusal", "the reply is a refusal, not JSON") from None
        raise ContractError("malformed", f"the reply is not valid JSON ({exc.msg} at char {exc.pos})") from None
    try:
        return validate(value)
    except (ValueError, TypeError) as exc:
        raise ContractError("malformed", str(exc)) from None


@dataclass
class ContractStats:
    """Outcome counts of every contract call (one count per task, not per attempt)."""

    outcomes: Counter = field(default_factory=Counter)
    first_problems: Counter = field(default_factory=Counter)  # malformed / refusal on the first attempt

    def to_dict(self) -> dict:
        return {"outcomes": {k: self.outcomes.get(k, 0) for k in OUTCOMES},
                "first_attempt_problems": dict(self.first_problems)}


@dataclass
class ContractReply:
    value: Any = None
    outcome: str = "ok"       # one of OUTCOMES
    problem: str = ""         # the last problem when the outcome is not ok / repaired
    attempts: int = 0


REPAIR_TEMPLATE = """Your previous reply could not be used: {problem}.
{format_rule}
Do not explain, apologise or refuse: reply with the JSON only.

Your previous reply was:
{reply}

The task, again:
{task}"""


def ask_json(backend: Backend, prompt: str, validate: Callable[[Any], Any], *, format_rule: str,
             gen_kwargs: dict | None = None, stats: ContractStats | None = None) -> ContractReply:
    """Send `prompt`, validate, repair once. FatalBackendError propagates (the run cannot go on)."""
    gen_kwargs = gen_kwargs or {}
    result = ContractReply()
    text = prompt
    for attempt in (1, 2):  # the reply, then one repair
        try:
            result.attempts = attempt
            reply = backend.generate(text, **gen_kwargs)
        except FatalBackendError:
            raise
        except BackendError as exc:
            return _count(ContractReply(outcome="backend_error", problem=str(exc), attempts=attempt), stats)
        try:
            result.value = parse_json_reply(reply, validate)
            result.outcome = "ok" if attempt == 1 else "repaired"
            break
        except ContractError as exc:
            if attempt == 2:
                result.outcome, result.problem = exc.kind, str(exc)
                break
            if stats is not None:
                stats.first_problems[exc.kind] += 1
            text = REPAIR_TEMPLATE.format(problem=str(exc).rstrip("."), format_rule=format_rule,
                                          reply=(reply or "")[:2000], task=prompt)
    return _count(result, stats)


def _count(result: ContractReply, stats: ContractStats | None) -> ContractReply:
    if stats is not None:
        stats.outcomes[result.outcome] += 1
    return result
