"""More from small in-domain data: recombine labelled sentences of responses that share one source context.

RAGTruth has ~6 responses per source (one context, several LLMs). Whole sentences move between them with their
labels exact:

- splice: a hallucinated sentence of response A (every gold span inside it) is inserted into response B of the
  same source at a sentence boundary; B's spans shift, the sentence's spans are carried over.
- remove: every hallucinated sentence of a response is removed, leaving a faithful variant (only when every
  span of the response lies inside the removed sentences, so no partial label is left behind).

Context-aware edits of faithful responses (numbers, dates, entities swapped for others of the same context) come
from training.data.synthetic with the context as the entity pool. Every output satisfies
`answer[start:end] == text` for each span (checked; a violation raises). Augment the training split only:
records keep their `source_id`, so a grouped split never puts a variant beside its original's fold.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict

from training.data.records import SpanRecord
from training.data.synthetic import generate_synthetic

_SENT_END = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence (whitespace between sentences belongs to none)."""
    out, start = [], 0
    for m in _SENT_END.finditer(text):
        if m.start() > start and text[start:m.start()].strip():
            out.append((start, m.start()))
        start = m.end()
    if start < len(text) and text[start:].strip():
        out.append((start, len(text.rstrip())))
    return out


def _inside(sp: dict, s: int, e: int) -> bool:
    return s <= sp["start"] and sp["end"] <= e


def _check(rec: SpanRecord) -> SpanRecord:
    for sp in rec.spans:
        if rec.answer[sp["start"]:sp["end"]] != sp["text"] or sp["end"] <= sp["start"]:
            raise RuntimeError(f"recombination broke a span of {rec.id}: {sp}")
    return rec


def _variant(rec: SpanRecord, how: str, suffix: str, answer: str, spans: list[dict]) -> SpanRecord:
    return _check(rec.replace(id=f"{rec.id}~{suffix}", answer=answer, spans=spans, label=int(bool(spans)),
                              meta={**rec.meta, "augment": how}))


def hallucinated_sentences(rec: SpanRecord) -> list[tuple[int, int, list[dict]]]:
    """Sentences that hold whole gold spans: (start, end, spans relative to the sentence)."""
    out = []
    for s, e in sentences(rec.answer):
        inner = [sp for sp in rec.spans if _inside(sp, s, e)]
        if inner:
            out.append((s, e, [{**sp, "start": sp["start"] - s, "end": sp["end"] - s} for sp in inner]))
    return out


def remove_hallucinated(rec: SpanRecord) -> SpanRecord | None:
    """The faithful variant of a response (its hallucinated sentences removed), or None."""
    bad = hallucinated_sentences(rec)
    if not bad or sum(len(b[2]) for b in bad) != len(rec.spans):
        return None
    answer, keep, pos = rec.answer, [], 0
    for s, e, _ in bad:
        keep.append(answer[pos:s])
        pos = e
    keep.append(answer[pos:])
    text = re.sub(r"[ \t]{2,}", " ", "".join(keep)).strip()
    if len(text) < 20 or text == answer.strip():
        return None
    return _variant(rec, "remove", "removed", text, [])


def splice(target: SpanRecord, donor_sentence: str, donor_spans: list[dict], rng: random.Random,
           tag: str) -> SpanRecord:
    """Insert a labelled sentence into `target` at a random sentence boundary."""
    answer = target.answer
    bounds = [0] + [e for _, e in sentences(answer)]
    at = rng.choice(bounds)
    before, after = answer[:at], answer[at:]
    sep_before = "" if at == 0 or before.endswith((" ", "\n")) else " "
    sep_after = "" if after.startswith((" ", "\n")) or not after else " "
    insert = sep_before + donor_sentence + sep_after
    offset = at + len(sep_before)
    shift = len(insert)
    spans = [dict(sp, start=sp["start"] + shift, end=sp["end"] + shift) if sp["start"] >= at else dict(sp)
             for sp in target.spans]
    spans += [dict(sp, start=sp["start"] + offset, end=sp["end"] + offset) for sp in donor_spans]
    spans.sort(key=lambda sp: sp["start"])
    new = before + insert + after
    for sp in spans:
        sp["text"] = new[sp["start"]:sp["end"]]
    return _variant(target, "splice", f"splice{tag}", new, spans)


def recombine(records: list[SpanRecord], seed: int = 42, splice_per_record: int = 1, remove: bool = True,
              group_key: str = "source_id") -> tuple[list[SpanRecord], Counter]:
    """New records (originals not included) from responses that share a context (`meta[group_key]`);
    deterministic per seed."""
    groups: dict[str, list[SpanRecord]] = defaultdict(list)
    for r in records:
        if r.meta.get(group_key) is not None:
            groups[str(r.meta[group_key])].append(r)
    out, stats = [], Counter()
    for key in sorted(groups):
        group = sorted(groups[key], key=lambda r: r.id)
        rng = random.Random(f"{seed}:{key}")
        donors = [(r.id, r.answer[s:e], spans) for r in group for s, e, spans in hallucinated_sentences(r)]
        for r in group:
            if remove and r.spans:
                variant = remove_hallucinated(r)
                stats["remove" if variant else "remove_not_possible"] += 1
                if variant:
                    out.append(variant)
            pool = [d for d in donors if d[0] != r.id]
            for k in range(min(splice_per_record, len(pool))):
                _, sentence, spans = pool[rng.randrange(len(pool))]
                if sentence in r.answer:
                    stats["splice_duplicate_skipped"] += 1
                    continue
                out.append(splice(r, sentence, spans, rng, str(k)))
                stats["splice"] += 1
    return out, stats


def context_edits(records: list[SpanRecord], seed: int = 42) -> tuple[list[SpanRecord], Counter]:
    """Number / date / entity swaps of faithful responses, drawing replacements from their own context."""
    faithful = [r for r in records if not r.spans]
    synth, stats = generate_synthetic(faithful, seed=seed, faithful_fraction=0.0,
                                      transforms=["number", "date", "entity"], max_edits=1)
    return [r.replace(meta={**r.meta, "augment": "edit"}) for r in synth], stats
