"""FactCC-style synthetic span data: grounded (context, faithful answer) pairs -> hallucinated answers + spans.

Transformations (Kryscinski et al. 2020, adapted to answers): number swap, date swap, named-entity swap (an
entity from the same document when there is one, else from the corpus), negation (insert or remove "not"),
and an inserted unsupported clause (a sentence from another document, or a short clause with a foreign
entity / year). Each edit records the exact character span it wrote into the new answer.

Guarantees (tested): the output depends only on the set of input records and the seed, not on their order
(each pair draws from its own `random.Random(f"{seed}:{id}")`; entity and sentence pools are sorted); edits
that need no corpus material (number, date, negation) do not change when pairs are added; every span
satisfies `answer[start:end] == text`; a held-out fraction of the faithful pairs (`faithful_fraction`) is
kept unmodified as negatives, and those pairs are never also used for a hallucinated copy.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from training.data.records import SpanRecord

TRANSFORMS = ("number", "date", "entity", "negation", "clause")

_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
_MONTH = re.compile(r"\b(" + "|".join(_MONTHS) + r")\b")
_NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w,]\d)")
_ENTITY = re.compile(r"\b[A-Z][\w'’\-]*(?:\s+(?:of|de|la|van|von|der|and|&)?\s*[A-Z][\w'’\-]*)*")
_AUX = re.compile(r"\b(is|are|was|were|has|have|had|can|could|will|would|should|does|do|did|must|may|might)"
                  r"(\s+not\b|n't\b)?", re.IGNORECASE)
_SENT_END = re.compile(r"[.!?](?=\s|$)")
_SENTENCE = re.compile(r"[A-Z][^.!?\n]{24,200}[.!?](?=\s|$)")
_NOT_ENTITIES = frozenset(["The", "A", "An", "In", "On", "At", "It", "Its", "This", "That", "These", "Those",
                           "He", "She", "They", "We", "I", "You", "His", "Her", "Their", "Our", "However",
                           "But", "And", "Or", "If", "When", "While", "After", "Before", "As", "For", "From",
                           "With", "By", "To", "Of", "Also", "Yes", "No", "There", "Here", "Some", "Many",
                           "Most", "Each", "Every", "One", "Two", "Three", "First", "Second", "Third",
                           "Overall", "According", "Based", "Unable", "Although", "Because", "Since", "Then",
                           "Thus", "So"])
_CLAUSES = [", according to {entity},", " in {year}", ", which was first reported in {year},",
            ", as confirmed by {entity},", " since {month} {year}"]


@dataclass
class _Edit:
    start: int  # in the original answer
    end: int
    replacement: str
    transform: str
    mark: tuple[int, int] | None = None  # part of `replacement` to mark as the span (default: all)


def entities(text: str) -> list[str]:
    """Capitalised word sequences that are not sentence-function words (a cheap NER, good enough to swap)."""
    out = []
    for m in _ENTITY.finditer(text):
        words = m.group().split()
        while words and words[0] in _NOT_ENTITIES:
            words = words[1:]
        ent = " ".join(words).strip(" -'’")
        if len(ent) >= 3 and not ent.isupper() or len(ent) >= 2 and ent.isupper() and ent.isalpha():
            out.append(ent)
    return out


class _Pools:
    """Corpus-level material for swaps and insertions, built once from all pairs (order-independent)."""

    def __init__(self, pairs: Sequence[SpanRecord]):
        ents: set[str] = set()
        sents: list[tuple[str, str]] = []
        for p in pairs:
            ents.update(entities(p.context))
            for m in _SENTENCE.finditer(p.context):
                sents.append((p.id, m.group().strip()))
        self.entities = sorted(ents)
        self.sentences = sorted(set(sents))


def _number_edits(answer, context, rng) -> list[_Edit]:
    out = []
    ctx_numbers = sorted({m.group() for m in _NUMBER.finditer(context)})
    for m in _NUMBER.finditer(answer):
        text = m.group()
        if _YEAR.fullmatch(text):
            continue  # years are the date transform's
        others = [n for n in ctx_numbers if n != text and not _YEAR.fullmatch(n)]
        if others and rng.random() < 0.5:
            new = rng.choice(others)
        else:
            new = _perturb_number(text, rng)
        out.append(_Edit(m.start(), m.end(), new, "number"))
    return out


def _perturb_number(text: str, rng) -> str:
    whole, _, frac = text.partition(".")
    n = int(whole.replace(",", ""))
    delta = rng.randint(1, max(2, n // 2))
    new = n + delta if (n - delta < 0 or rng.random() < 0.5) else n - delta
    if new == n:
        new = n + 1
    s = f"{new:,}" if "," in whole else str(new)
    if frac:
        s += "." + "".join(str(rng.randint(0, 9)) for _ in frac)
    return s


def _date_edits(answer, context, rng) -> list[_Edit]:
    out = []
    for m in _YEAR.finditer(answer):
        year = int(m.group())
        new = year + rng.choice([-1, 1]) * rng.randint(1, 15)
        out.append(_Edit(m.start(), m.end(), str(new), "date"))
    for m in _MONTH.finditer(answer):
        new = rng.choice([x for x in _MONTHS if x != m.group()])
        out.append(_Edit(m.start(), m.end(), new, "date"))
    return out


def _entity_edits(answer, context, rng, pools: _Pools) -> list[_Edit]:
    out = []
    in_answer = set(entities(answer))
    same_doc = [e for e in sorted(set(entities(context))) if e not in in_answer]
    for ent in sorted(in_answer):
        for m in re.finditer(re.escape(ent), answer):
            candidates = [e for e in same_doc if e != ent and len(e.split()) == len(ent.split())] or \
                [e for e in same_doc if e != ent]
            if not candidates and pools.entities:
                candidates = [rng.choice(pools.entities) for _ in range(3)]
                candidates = [e for e in candidates if e != ent and e not in answer]
            if candidates:
                out.append(_Edit(m.start(), m.end(), rng.choice(candidates), "entity"))
            break  # one occurrence per entity is enough to choose from
    return out


def _negation_edits(answer, context, rng) -> list[_Edit]:
    out = []
    for m in _AUX.finditer(answer):
        aux, neg = m.group(1), m.group(2)
        if neg:  # remove the negation: "was not" -> "was", "doesn't" -> "does"
            out.append(_Edit(m.start(), m.end(), aux, "negation"))
        else:  # insert one: "was" -> "was not"
            out.append(_Edit(m.start(), m.end(), f"{aux} not", "negation"))
    return out


def _clause_edits(answer, context, rng, pools: _Pools, pair_id: str) -> list[_Edit]:
    out = []
    ends = [m.end() for m in _SENT_END.finditer(answer)] or [len(answer.rstrip())]
    foreign = [s for pid, s in pools.sentences if pid != pair_id and s not in context]
    if foreign:
        pos = rng.choice(ends)
        sent = rng.choice(foreign)
        if pos >= len(answer.rstrip()):
            out.append(_Edit(pos, pos, " " + sent, "clause", mark=(1, 1 + len(sent))))
        else:  # between two sentences: "A. <new> B."
            out.append(_Edit(pos, pos, " " + sent, "clause", mark=(1, 1 + len(sent))))
    # a short clause just before a sentence end, with a foreign entity or a year
    ents = [e for e in pools.entities if e not in context]
    end = rng.choice([e for e in ends if e > 0] or [len(answer)])
    pos = end - 1 if end > 0 and answer[end - 1] in ".!?" else end
    template = rng.choice(_CLAUSES)
    clause = template.format(entity=rng.choice(ents) if ents else "officials", year=rng.randint(1950, 2023),
                             month=rng.choice(_MONTHS))
    if clause.endswith(",") and (pos >= len(answer) or answer[pos] in ".!?"):
        clause = clause[:-1]
    lead = len(clause) - len(clause.lstrip(" ,"))
    out.append(_Edit(pos, pos, clause, "clause", mark=(lead, len(clause.rstrip(",")))))
    return out


def _apply(answer: str, edits: list[_Edit]) -> tuple[str, list[dict]]:
    """Apply non-overlapping edits right to left; return the new answer and the spans they wrote."""
    spans: list[dict] = []
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        answer = answer[:e.start] + e.replacement + answer[e.end:]
        shift = len(e.replacement) - (e.end - e.start)
        for s in spans:  # spans already written lie to the right of this edit
            s["start"] += shift
            s["end"] += shift
        a, b = e.mark or (0, len(e.replacement))
        spans.append({"start": e.start + a, "end": e.start + b, "label_type": f"synthetic:{e.transform}"})
    spans.sort(key=lambda s: s["start"])
    for s in spans:
        s["text"] = answer[s["start"]:s["end"]]
    return answer, spans


def _overlaps(e: _Edit, chosen: list[_Edit]) -> bool:
    return any(e.start <= c.end and c.start <= e.end for c in chosen)


def _variant(p: SpanRecord, kind: str, **changes) -> SpanRecord:
    return p.replace(id=f"syn-{p.id}-{kind}", source=f"synthetic:{p.source or 'unknown'}",
                     meta={**p.meta, "origin_id": p.id, "synthetic": kind}, **changes)


def generate_synthetic(pairs: Sequence[SpanRecord], seed: int = 42, faithful_fraction: float = 0.3,
                       transforms: Sequence[str] = TRANSFORMS, max_edits: int = 1
                       ) -> tuple[list[SpanRecord], Counter]:
    """Turn faithful (context, answer) records into a mix of held-out faithful negatives and hallucinated answers.

    `pairs` are span records; those with spans are skipped (counted). Returns (records, stats), stats counting
    `faithful_kept`, each transform applied, `no_transform_applicable` and `skipped_not_faithful`.
    """
    unknown = set(transforms) - set(TRANSFORMS)
    if unknown:
        raise ValueError(f"unknown synthetic transforms {sorted(unknown)}; known: {', '.join(TRANSFORMS)}")
    if not 0.0 <= faithful_fraction <= 1.0:
        raise ValueError("faithful_fraction must be in [0, 1]")
    stats: Counter = Counter()
    faithful = []
    for p in pairs:
        if p.spans:
            stats["skipped_not_faithful"] += 1
        else:
            faithful.append(p)
    faithful.sort(key=lambda p: p.id)
    pools = _Pools(faithful)
    out = []
    for p in faithful:
        rng = random.Random(f"{seed}:{p.id}")
        if rng.random() < faithful_fraction:
            out.append(_variant(p, "faithful", spans=[], label=0))
            stats["faithful_kept"] += 1
            continue
        answer, context = p.answer, p.context
        order = list(transforms)
        rng.shuffle(order)
        chosen: list[_Edit] = []
        for t in order:
            if len(chosen) >= max_edits:
                break
            if t == "number":
                cands = _number_edits(answer, context, rng)
            elif t == "date":
                cands = _date_edits(answer, context, rng)
            elif t == "entity":
                cands = _entity_edits(answer, context, rng, pools)
            elif t == "negation":
                cands = _negation_edits(answer, context, rng)
            else:
                cands = _clause_edits(answer, context, rng, pools, p.id)
            cands = [c for c in cands if not _overlaps(c, chosen) and c.replacement != answer[c.start:c.end]]
            if cands:
                chosen.append(rng.choice(cands))
        if not chosen:
            stats["no_transform_applicable"] += 1
            continue
        new_answer, spans = _apply(answer, chosen)
        for s in spans:
            if new_answer[s["start"]:s["end"]] != s["text"] or s["end"] <= s["start"]:
                raise RuntimeError(f"synthetic span invariant broken for {p.id}: {s}")
        for e in chosen:
            stats[e.transform] += 1
        out.append(_variant(p, "+".join(e.transform for e in chosen), answer=new_answer, spans=spans, label=1))
    return out, stats
