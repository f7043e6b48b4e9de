"""Recombination of labelled sentences between responses of one source keeps every span exact."""

import random

from training.data.recombine import (
    context_edits,
    hallucinated_sentences,
    recombine,
    remove_hallucinated,
    sentences,
    splice,
)
from training.data.records import SpanRecord

CTX = "The bridge opened in 1932 in Sydney. It is 1,149 metres long and carries eight lanes. Paul built it."


def _rec(rid, answer, spans, source_id="s1"):
    out = []
    for text in spans:
        start = answer.index(text)
        out.append({"start": start, "end": start + len(text), "text": text})
    return SpanRecord(id=rid, context=CTX, question=None, answer=answer, spans=out, label=int(bool(out)),
                      task_type="Summary", source="ragtruth_test_subset", meta={"source_id": source_id})


A = _rec("a", "The bridge opened in 1932. It is 2,000 metres long. It carries eight lanes.", ["2,000 metres"])
B = _rec("b", "The Sydney bridge has eight lanes. It was painted blue by NASA.", ["painted blue by NASA"])
C = _rec("c", "The bridge is in Sydney. It opened in 1932.", [])


def _exact(rec):
    return all(rec.answer[s["start"]:s["end"]] == s["text"] for s in rec.spans)


def test_sentences_and_hallucinated_sentences():
    assert [A.answer[s:e] for s, e in sentences(A.answer)] == [
        "The bridge opened in 1932.", "It is 2,000 metres long.", "It carries eight lanes."]
    (s, e, spans), = hallucinated_sentences(A)
    assert A.answer[s:e] == "It is 2,000 metres long." and spans[0]["start"] == 6


def test_remove_makes_a_faithful_variant():
    v = remove_hallucinated(A)
    assert v.answer == "The bridge opened in 1932. It carries eight lanes." and v.spans == [] and v.label == 0
    assert remove_hallucinated(C) is None


def test_splice_keeps_spans_exact_at_every_boundary():
    (s, e, spans), = hallucinated_sentences(B)
    for seed in range(20):
        new = splice(A, B.answer[s:e], spans, random.Random(seed), "x")
        assert _exact(new) and len(new.spans) == 2 and new.label == 1
        assert sorted(sp["text"] for sp in new.spans) == ["2,000 metres", "painted blue by NASA"]


def test_recombine_stays_within_a_source_and_is_deterministic():
    other = _rec("d", "Another text. It was painted blue by NASA.", ["painted blue by NASA"], source_id="s2")
    out, stats = recombine([A, B, C, other], seed=1)
    again, _ = recombine([other, C, B, A], seed=1)
    assert [r.answer for r in out] == [r.answer for r in again]
    assert all(_exact(r) for r in out) and stats["splice"] >= 2 and stats["remove"] == 2
    assert stats["remove_not_possible"] == 1  # "Another text." alone is too short to keep
    assert all(r.meta["source_id"] == "s1" for r in out if r.id.split("~")[0] in "abc")
    spliced_c = [r for r in out if r.id.startswith("c~splice")]
    assert spliced_c and spliced_c[0].spans[0]["text"] in ("2,000 metres", "painted blue by NASA")


def test_context_edits_swap_within_the_context_and_keep_spans_exact():
    edits, _ = context_edits([C], seed=3)
    assert edits and all(_exact(r) and r.spans and r.meta["augment"] == "edit" for r in edits)
