"""Stage 1: split an answer into atomic, self-contained factual claims.

`LLMClaimExtractor` asks an LLM backend (eval.backends) for a JSON array of claim strings (contract in
eval.claims.contract: one repair round, then the sentence fallback; every outcome is counted).
`SentenceClaimExtractor` needs no LLM: the answer's sentences are the claims, after this rule:

Drop rule (a sentence is not a checkable factual claim when it is ...):
  1. a question (ends with "?");
  2. too short to state a fact: fewer than 3 words ("Sure!", "Yes.");
  3. meta talk or a refusal: starts with "Here is/are", "Sure", "Certainly", "Of course", "Let me", "Note that",
     "As an AI", "I'm sorry", "I cannot", "I don't know", "Hope this helps", "Feel free", "Let me know";
  4. subjective: a first-person stance or feeling ("I think", "I believe", "we feel", "in my opinion",
     "personally", "to me", "I'd recommend", "I love" ...);
  5. speculative: a hedge word that makes it a guess: might, may (lower case: "May 1889" is a date), possibly,
     perhaps, probably, maybe, likely, unlikely, presumably, supposedly, seemingly, apparently, it seems,
     appears to, could be, could have.
Everything else is kept (facts stated with adjectives included: the rule removes what cannot be false, not what
might be loaded). Pronouns: in the kept sentences, a leading He / She / It (His / Her / Its) is replaced by the
latest sentence subject that was a name ("The Eiffel Tower was ... . It is 330 m tall." -> "The Eiffel Tower is
330 m tall."). That is a heuristic; the LLM extractor resolves references properly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from eval.backends import Backend

from .contract import ContractStats, ask_json

# ---- sentence splitting --------------------------------------------------------------------------------------

_ABBREV = {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "inc", "ltd", "co", "corp", "no",
           "fig", "e.g", "i.e", "u.s", "u.k", "approx", "dept", "est", "mt", "jan", "feb", "mar", "apr", "jun",
           "jul", "aug", "sep", "sept", "oct", "nov", "dec", "gen", "gov", "sen", "rep", "rev", "ph.d", "a.m",
           "p.m"}
_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`: line breaks and bullets end a sentence; '.', '!' or '?' followed by a capital or a
    digit ends one unless the word before is an abbreviation (Dr., U.S., e.g.) or a single initial (J. Smith)."""
    out: list[str] = []
    for line in (text or "").splitlines():
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        start = 0
        for m in _BOUNDARY.finditer(line):
            before = line[start:m.start()].rstrip("\"'”’)]")
            last = before.rsplit(None, 1)[-1] if before.split() else ""
            word = last.rstrip(".!?").lower()
            if last.endswith(".") and (word in _ABBREV or (len(word) == 1 and word.isalpha())):
                continue
            piece = line[start:m.start()].strip()
            if piece:
                out.append(piece)
            start = m.end()
        piece = line[start:].strip()
        if piece:
            out.append(piece)
    return out


# ---- the drop rule -------------------------------------------------------------------------------------------

_META = re.compile(r"^\W*(?:here (?:is|are)|here's|sure\b|certainly\b|of course\b|let me\b|note that\b|"
                   r"as an ai\b|i'?m sorry|i am sorry|i cannot|i can'?t|i don'?t know|i do not know|"
                   r"hope this helps|i hope this|feel free|let me know)", re.IGNORECASE)
_SUBJECTIVE = re.compile(
    r"\b(?:i|we)(?:'d| would)? (?:think|believe|feel|guess|suppose|hope|love|like|prefer|recommend|suggest|"
    r"find|consider|am (?:sure|not sure|convinced))\b|\bin (?:my|our) (?:opinion|view|experience)\b|"
    r"\bpersonally\b|\bto me\b|\bi'?m (?:not )?sure\b|\bi'?d say\b",
    re.IGNORECASE)
_SPECULATIVE = re.compile(
    r"\b(?:[Mm]ight|[Pp]ossibly|[Pp]erhaps|[Pp]robably|[Mm]aybe|[Ll]ikely|[Uu]nlikely|[Pp]resumably|"
    r"[Ss]upposedly|[Ss]eemingly|[Aa]pparently|seems?|appears? to|[Cc]ould (?:be|have))\b|\bmay\b")

DROP_REASONS = ("question", "too_short", "meta", "subjective", "speculative")


def drop_reason(sentence: str) -> str | None:
    """Why a sentence is not a checkable factual claim (see the module docstring), or None to keep it."""
    s = sentence.strip()
    if s.endswith("?"):
        return "question"
    if len(re.findall(r"\w+", s)) < 3:
        return "too_short"
    if _META.search(s):
        return "meta"
    if _SUBJECTIVE.search(s):
        return "subjective"
    if _SPECULATIVE.search(s):
        return "speculative"
    return None


_TOPIC = re.compile(r"^(?P<topic>(?:The |the )?(?:[A-Z][\w'’.-]*)(?: (?:of |de |the |and |von )?[A-Z][\w'’.-]*)*)"
                    r"(?= (?:is|was|are|were|has|had|have|became|becomes|served|serves|won|wrote|founded|"
                    r"lies|stands|remains|holds|includes|contains|opened|began|died|lived|\())")
_LEADING_PRONOUN = re.compile(r"^(?P<p>He|She|It|His|Her|Its)\b(?P<rest>.*)$", re.DOTALL)


def resolve_leading_pronouns(sentences: Sequence[str]) -> list[str]:
    """He / She / It (His / Her / Its) at the start of a sentence -> the latest sentence subject that was a
    name (a capitalised phrase at the start of a sentence, followed by a verb such as is / was / has)."""
    out, topic = [], None
    for s in sentences:
        pm = _LEADING_PRONOUN.match(s)
        if pm is not None and topic is not None:
            name = topic if pm.group("p") in ("He", "She", "It") else f"{topic}'s"
            out.append(name + pm.group("rest"))
            continue
        m = _TOPIC.match(s)
        if m is not None:
            topic = m.group("topic")
            topic = "The" + topic[3:] if topic.startswith("the ") else topic
        out.append(s)
    return out


# ---- extractors ----------------------------------------------------------------------------------------------

@dataclass
class Extraction:
    claims: list[str]
    method: str          # "llm" | "llm_repaired" | "sentences" | "sentences_fallback"
    issue: str = ""      # why the fallback was used (malformed / refusal / backend_error: message)
    dropped: int = 0     # sentences removed by the drop rule (sentence methods)


class SentenceClaimExtractor:
    """No LLM: the answer's sentences, minus the drop rule, with leading pronouns resolved."""

    name = "sentences"

    def extract(self, response: str, prompt: str | None = None) -> Extraction:
        sentences = split_sentences(response)
        kept = resolve_leading_pronouns([s for s in sentences if drop_reason(s) is None])
        return Extraction(claims=_dedup(kept), method="sentences", dropped=len(sentences) - len(kept))


EXTRACTION_PROMPT = """You are the first step of a fact-checking pipeline: list the factual claims that an assistant's response makes.

Rules:
- A claim is one self-contained statement about the real world (people, places, organisations, events, dates, numbers, ...) that could be checked against a source.
- Replace pronouns and other references with the names they stand for, so that every claim can be checked on its own.
- Leave out opinions, advice, subjective or speculative statements (for example with "I think", "might", "probably"), questions, and anything imaginative (stories, poems, role play).
- Split compound statements into separate claims. List each claim once, in the order of the response.
- If the response makes no factual claim, the answer is an empty array: []

Output format: ONLY a JSON array of strings, nothing before or after it. Example:
["Barack Obama served as the 44th President of the United States.", "Barack Obama was president from 2009 to 2017."]

Prompt given to the assistant:
{prompt}

Assistant's response:
{response}"""

FORMAT_RULE = ('Reply with ONLY a JSON array of strings, one factual claim each, for example '
               '["Paris is the capital of France.", "Paris has about 2.1 million inhabitants."], or [] when the '
               'response makes no factual claim.')


def validate_claims(value) -> list[str]:
    """The contract of stage 1: a JSON array of non-empty strings."""
    if isinstance(value, dict) and set(value) == {"claims"}:
        value = value["claims"]  # the one wrapper models add most often; anything else is malformed
    if not isinstance(value, list):
        raise TypeError(f"expected a JSON array of strings, got a JSON {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise TypeError(f"item {i} is a {type(item).__name__}, expected a string")
        if item.strip():
            out.append(" ".join(item.split()))
    return out


class LLMClaimExtractor:
    """Claims from an LLM backend under the JSON contract; the sentence extractor is the fallback."""

    name = "llm"

    def __init__(self, backend: Backend, *, max_output_tokens: int = 1024, temperature: float = 0.0,
                 seed: int | None = 1234, fallback: SentenceClaimExtractor | None = None,
                 stats: ContractStats | None = None):
        self.backend = backend
        self.gen_kwargs = {"max_output_tokens": max_output_tokens, "temperature": temperature, "seed": seed}
        self.fallback = fallback or SentenceClaimExtractor()
        self.stats = stats or ContractStats()

    def extract(self, response: str, prompt: str | None = None) -> Extraction:
        if not (response or "").strip():
            return Extraction(claims=[], method="llm")
        task = EXTRACTION_PROMPT.format(prompt=(prompt or "(not given)").strip(), response=response.strip())
        reply = ask_json(self.backend, task, validate_claims, format_rule=FORMAT_RULE, gen_kwargs=self.gen_kwargs,
                         stats=self.stats)
        if reply.outcome in ("ok", "repaired"):
            return Extraction(claims=_dedup(reply.value), method="llm" if reply.outcome == "ok" else "llm_repaired")
        fb = self.fallback.extract(response, prompt)
        return Extraction(claims=fb.claims, method="sentences_fallback", issue=f"{reply.outcome}: {reply.problem}",
                          dropped=fb.dropped)


def _dedup(claims: Sequence[str]) -> list[str]:
    seen, out = set(), []
    for c in claims:
        key = " ".join(c.lower().split())
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
