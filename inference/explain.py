"""Explainer side of the pipeline: what hypothesis a span becomes, how NLI verdicts over several premise windows
combine, and the severity rules.

Severity (hallucination_model.nli_entailment_threshold = 0.75, nli_model.threshold = 0.7 by default):
    contradiction -> 4            the context says otherwise
    neutral       -> 2            fabrication: the context does not say it
    entailment    -> dropped when confidence >= nli_entailment_threshold (and enable_nli_filtering), else 1
    NLI confidence under nli_model.threshold lowers the severity by one (never below 1: a kept span is a finding)
    no NLI (use_nli false, or no Explainer configured) -> 2, nli_label null
    ungrounded span (hallucination_model.keep_ungrounded: a number, quantity or name of the span that the context
    lacks, Span.ungrounded) -> never dropped, at least 2: the exact check outranks an NLI "entailment"

Evidence: each explained span names the premise the Explainer judged it against. The candidates for one
hypothesis are the `max_premise_windows` token windows of the context sharing the most content words with it
(inference.windowing) plus the `max_premise_sentences` context sentences sharing the most (a sentence is the
precise evidence a window holds somewhere), plus, for a span's ungrounded numbers ("1950", "500 meters"), the
context sentence stating a quantity of the same kind (counterpart_sentences: "built from 1887 to 1889").
All are scored; the verdict combines them (combine_nli) and the evidence is the candidate as decisive as the
verdict (within EVIDENCE_TIE): the counterpart of the span's own number if one is, else a sentence if one is,
the one nearest the span's own words.
`max_nli_pairs` caps the pairs scored per request (the latency budget): sentence candidates go first, then
windows, down to one window per hypothesis.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from inference.grounding import content_words, quantity_kinds
from inference.windowing import premise_windows, rank_premises

SEVERITY = {"contradiction": 4, "neutral": 2, "entailment": 1}
UNEXPLAINED_SEVERITY = 2
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
_CLAUSE_BREAK = re.compile(r";|:\s|,\s+(?=(?:but|while|whereas|although|though|however|yet)\b)", re.IGNORECASE)


def _sentence_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """[s, e) of the sentence(s) containing text[start:end]."""
    s = 0
    for m in _SENTENCE_END.finditer(text, 0, max(start, 0)):
        if m.end() <= start:
            s = m.end()
    m = _SENTENCE_END.search(text, max(end - 1, start))
    e = m.end() if m else len(text)
    e = max(e, end)
    return s, e


def widen(text: str, start: int, end: int, mode: str = "sentence") -> tuple[int, int]:
    """The hypothesis range for a span: the span itself, its clause, or its sentence (whitespace trimmed)."""
    if mode == "span":
        s, e = start, end
    else:
        s, e = _sentence_bounds(text, start, end)
        if mode == "clause":
            cs, ce = s, e
            for m in _CLAUSE_BREAK.finditer(text, s, e):
                if m.end() <= start:
                    cs = m.end()
                elif m.start() >= end:
                    ce = m.start()
                    break
            # A clause of one or two words is no statement; keep the sentence then.
            if len(text[cs:ce].split()) >= 3:
                s, e = cs, ce
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


def combine_nli(probs: Sequence[np.ndarray], labels: Sequence[str]) -> tuple[str, float]:
    """One verdict from the NLI probabilities of several premise candidates.

    Entailed by a candidate (entailment probability >= VERDICT_PROBABILITY) -> entailment (the most confident
    candidate); else contradicted by one (contradiction >= VERDICT_PROBABILITY) -> contradiction (most
    confident); else neutral, with the lowest neutral probability across candidates (the claim must be
    unsupported by every candidate).
    """
    label, conf, _ = decide_nli(probs, labels)
    return label, conf


EVIDENCE_TIE = 0.05  # candidates this close to the verdict's confidence are equally decisive
# A candidate decides "entailment" or "contradiction" only when that label is more likely than not. The rule
# before (the label is the candidate's argmax) let a window a small NLI model cannot read (a long passage about
# something else: 0.42 / 0.20 / 0.38) decide "supported"; on the never-trained dev rows of WiCE and SummEdits
# the mpnet Explainer's balanced accuracy went from 0.52 to 0.58 with the same candidates (docs/explainer.md,
# "How a verdict is reached").
VERDICT_PROBABILITY = 0.5


def decide_nli(probs: Sequence[np.ndarray], labels: Sequence[str],
               tie: float = EVIDENCE_TIE) -> tuple[str, float, list[int]]:
    """combine_nli's verdict and confidence, plus the candidates that decide it: those with the verdict's label
    whose probability is within `tie` of the confidence (for neutral: the least neutral ones)."""
    index = {name.lower(): i for i, name in enumerate(labels)}
    e, n, c = index["entailment"], index["neutral"], index["contradiction"]
    stacked = np.stack([np.asarray(p, dtype=float) for p in probs])
    for label, col in (("entailment", e), ("contradiction", c)):
        deciding = stacked[:, col] >= VERDICT_PROBABILITY
        if deciding.any():
            conf = float(stacked[deciding, col].max())
            return label, conf, [i for i in range(len(stacked)) if deciding[i] and stacked[i, col] >= conf - tie]
    conf = float(stacked[:, n].min())
    return "neutral", conf, [i for i in range(len(stacked)) if stacked[i, n] <= conf + tie]


# ---- premise candidates and evidence ------------------------------------------------------------------------

@dataclass
class Premise:
    """A candidate premise: context[start:end], a token `window` or a `sentence`; `rank` = its place in the
    overlap ranking of its kind (0 = most content words shared with the hypothesis)."""

    text: str
    start: int
    end: int
    kind: str
    rank: int = 0
    counterpart_of: tuple[str, ...] = ()  # ungrounded terms whose quantity this sentence states (counterparts)


@dataclass
class PremiseSet:
    """The ranked candidates of one hypothesis (before the budget trims them)."""

    windows: list[Premise] = field(default_factory=list)
    sentences: list[Premise] = field(default_factory=list)
    counterparts: list[Premise] = field(default_factory=list)  # read whatever the budget: few, and the evidence

    def pick(self, k: int, m: int, counterparts: bool = True) -> list[Premise]:
        """The k best windows (document order), the counterpart sentences and the m best other sentences."""
        best = sorted(self.windows, key=lambda w: w.rank)[:k]
        return sorted(best, key=lambda w: w.start) + (self.counterparts if counterparts else []) + self.sentences[:m]


def _locate(context: str, pieces: Sequence[str]) -> list[tuple[int, int]]:
    """Offsets of consecutive character slices of `context` (premise_windows' windows, in document order)."""
    out, pos = [], 0
    for piece in pieces:
        at = context.find(piece, pos)
        if at < 0:
            at = max(context.find(piece), 0)
        out.append((at, at + len(piece)))
        pos = at + 1
    return out


def context_sentences(context: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence of the context (whitespace trimmed, empty ones dropped)."""
    bounds, s = [], 0
    for m in _SENTENCE_END.finditer(context):
        bounds.append((s, m.end()))
        s = m.end()
    bounds.append((s, len(context)))
    out = []
    for a, b in bounds:
        while a < b and context[a].isspace():
            a += 1
        while b > a and context[b - 1].isspace():
            b -= 1
        if b > a:
            out.append((a, b))
    return out


def counterpart_sentences(context: str, hypothesis: str, terms: Sequence[str]) -> list[Premise]:
    """For each ungrounded number term of a hypothesis ("1950", "500 meters"), the context sentence that states a
    quantity of the same kind (inference.grounding.quantity_kinds: the same unit, a year for a year), sharing the
    most content words with the hypothesis (then the first): what the context says instead, the evidence a user
    needs ("built from 1887 to 1889"). Terms without a number (names) have none."""
    target = content_words(hypothesis)
    bounds = context_sentences(context)
    kinds_of = [set(quantity_kinds(context[a:b])) for a, b in bounds]
    found: dict[tuple[int, int], list[str]] = {}
    for term in terms:
        kinds = set(quantity_kinds(term))
        matches = [i for i, ks in enumerate(kinds_of) if ks & kinds]
        if not matches:
            continue
        best = min(matches, key=lambda i: (-len(target & content_words(context[slice(*bounds[i])])), i))
        found.setdefault(bounds[best], []).append(term)
    return [Premise(context[a:b], a, b, "sentence", -1, tuple(ts)) for (a, b), ts in sorted(found.items())]


def premise_candidates(tokenizer, context: str, hypothesis: str, budget: int, max_windows: int,
                       max_sentences: int, terms: Sequence[str] = ()) -> PremiseSet:
    """Windows (premise_windows of `budget` tokens; the `max_windows` sharing the most content words with the
    hypothesis), the counterpart sentences of its ungrounded `terms` (counterpart_sentences) and sentences (the
    `max_sentences` sharing the most, at least one word, not already a whole window or a counterpart), each with
    its offsets in the context and its overlap rank."""
    if budget < 16:  # a hypothesis this long: encode() cuts the longest side to fit
        return PremiseSet(windows=[Premise(context, 0, len(context), "window")])
    counterparts = counterpart_sentences(context, hypothesis, terms) if terms else []
    all_windows = premise_windows(tokenizer, context, budget)
    located = _locate(context, all_windows)
    chosen = rank_premises(all_windows, hypothesis, max_windows)  # in document order
    windows, j = [], 0
    for i, w in enumerate(all_windows):
        if j < len(chosen) and w == chosen[j]:
            windows.append(Premise(w, *located[i], "window"))
            j += 1
    target = content_words(hypothesis)
    order = sorted(range(len(windows)), key=lambda i: (-len(target & content_words(windows[i].text)), i))
    for r, i in enumerate(order):
        windows[i].rank = r
    texts = {" ".join(w.text.split()) for w in windows}
    taken = {(c.start, c.end) for c in counterparts}
    sentences = []
    if max_sentences > 0:
        scored = []
        for a, b in context_sentences(context):
            text = context[a:b]
            shared = len(target & content_words(text))
            if shared and " ".join(text.split()) not in texts and (a, b) not in taken:
                scored.append((-shared, a, b, text))
        for r, (_, a, b, text) in enumerate(sorted(scored)[:max_sentences]):
            sentences.append(Premise(text, a, b, "sentence", r))
    return PremiseSet(windows, sentences, counterparts)


def fit_budget(sets: Sequence[PremiseSet], max_windows: int, max_sentences: int,
               max_pairs: int) -> tuple[int, int, bool]:
    """The (windows, sentences, counterparts read) per hypothesis that keep the pairs scored within `max_pairs`:
    sentences are dropped first (the counterparts last of them), then windows, never below one window per
    hypothesis."""
    def total(k: int, m: int, c: bool) -> int:
        return sum(len(s.pick(k, m, c)) for s in sets)
    for m in range(max_sentences, -1, -1):
        if total(max_windows, m, True) <= max_pairs:
            return max_windows, m, True
    for k in range(max_windows, 0, -1):
        if total(k, 0, False) <= max_pairs:
            return k, 0, False
    return 1, 0, False


def coverage(context: str, premises: Sequence[Premise]) -> float:
    """Share of the context's non-space characters inside the premises read."""
    visible = np.array([not ch.isspace() for ch in context], dtype=bool)
    if not visible.any():
        return 1.0
    read = np.zeros(len(context), dtype=bool)
    for p in premises:
        read[p.start:p.end] = True
    return float((read & visible).sum() / visible.sum())


def span_words(answer: str, start: int, end: int, around: int = 3) -> set[str]:
    """Content words of the span and of `around` words either side: what its evidence should be about."""
    left = answer[:start].split()[-around:] if around else []
    right = answer[end:].split()[:around] if around else []
    return content_words(" ".join([*left, answer[start:end], *right]))


def pick_evidence(candidates: Sequence[Premise], decisive: Sequence[int], near: set[str],
                  terms: Sequence[str] = ()) -> int:
    """Among the equally decisive candidates: the counterpart of one of the span's ungrounded `terms` (the
    context's statement of the same quantity); then a sentence before a window (it is the precise evidence, and
    a window holds every word of its sentences); then the one sharing most words with the span's neighbourhood;
    then the overlap rank, then document order."""
    return min(decisive, key=lambda i: (not set(candidates[i].counterpart_of) & set(terms),
                                        candidates[i].kind != "sentence",
                                        -len(near & content_words(candidates[i].text)), candidates[i].rank,
                                        candidates[i].start))


def severity(label: str | None, confidence: float | None, *, entailment_threshold: float,
             low_confidence: float, filter_entailed: bool = True, ungrounded: bool = False) -> int | None:
    """Severity 1-4, or None when the span is dropped (entailed with enough confidence). An `ungrounded` span
    (a number or name the context lacks, by exact check) is never dropped and is at least a "neutral" finding:
    the context does not state what the span says, whatever a small NLI model concludes."""
    if label is None or confidence is None:
        return UNEXPLAINED_SEVERITY
    if label == "entailment" and filter_entailed and confidence >= entailment_threshold and not ungrounded:
        return None
    level = SEVERITY[label]
    if confidence < low_confidence:
        level -= 1
    return max(level, SEVERITY["neutral"] if ungrounded else 1)


def explanation(label: str | None, confidence: float | None, detector_confidence: float, hypothesis: str,
                reason: str = "", evidence: Premise | None = None, ungrounded: Sequence[str] = (),
                overrule: bool = True) -> str:
    """The finding in words; with `evidence`, the context passage it was judged against and where it is; with
    `ungrounded`, the span's numbers / names that the context lacks (an exact check, stated first), which
    overrules an "entailment" verdict when `overrule` (hallucination_model.keep_ungrounded)."""
    overruled = overrule and bool(ungrounded) and label == "entailment"
    text = _explanation(label, confidence, detector_confidence, hypothesis, reason, evidence, overruled)
    if not ungrounded:
        return text
    missing = ", ".join(f'"{t}"' for t in ungrounded)
    return f"Not in the context: {missing}{'' if overruled else '.'} {text}"


def _explanation(label, confidence, detector_confidence, hypothesis, reason, evidence, overruled) -> str:
    where = ""
    if evidence is not None:
        quoted = " ".join(evidence.text.split())
        if len(quoted) > 300:
            quoted = quoted[:297] + "..."
        verb = "closest passage read in the" if overruled else {
            "contradiction": "contradicted by", "entailment": "supported by"}.get(label or "", "closest passage read in the")
        where = f"; {verb} context [{evidence.start}:{evidence.end}]: \"{quoted}\""
        if evidence.counterpart_of and label != "contradiction":  # the context's statement of the same quantity
            where = f"; the context states [{evidence.start}:{evidence.end}]: \"{quoted}\""
    if overruled:  # an exact check (the span's number / name is absent) outranks a small NLI model's verdict
        return (f"(exact check, which overrules the Explainer's entailment {confidence:.2f}): "
                f"\"{hypothesis}\"{where}")
    if label == "contradiction":
        return f"Contradicted by the context (NLI contradiction {confidence:.2f}): \"{hypothesis}\"{where}"
    if label == "neutral":
        return (f"Not supported by the context, which neither states nor implies it: possible fabrication "
                f"(NLI neutral {confidence:.2f}): \"{hypothesis}\"{where}")
    if label == "entailment":
        return (f"Flagged by the Detector ({detector_confidence:.2f}) but the context seems to support it "
                f"(NLI entailment {confidence:.2f}, under the drop threshold): \"{hypothesis}\"{where}")
    return f"Flagged by the Detector ({detector_confidence:.2f}); not explained ({reason or 'NLI off'})"
