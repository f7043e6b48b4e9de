"""Detector data: span adapters, bad-input reporting, the synthetic generator's invariants, splits."""

import json

import pytest

from training.data.base import DataError
from training.data.records import SpanRecord
from training.data.spans import (
    SpanDataReport,
    clean_span_records,
    diff_spans,
    extractive_answer,
    load_span_source,
    token_flag_spans,
    wice_context,
)
from training.data.synthetic import TRANSFORMS, generate_synthetic

CONTEXTS = [
    (("The Eiffel Tower in Paris was completed in March 1889. It is 330 metres tall and was designed by the "
     "company of Gustave Eiffel. Maurice Koechlin drew the first sketch."),
     "The Eiffel Tower was completed in March 1889 and is 330 metres tall."),
    (("Marie Curie was born in Warsaw in 1867. She won the Nobel Prize in Physics in 1903 with Pierre Curie "
     "and Henri Becquerel. She was the first woman to win a Nobel Prize."),
     "Marie Curie was born in Warsaw in 1867 and won the Nobel Prize in Physics in 1903."),
    (("The Amazon River flows through Brazil, Peru and Colombia. It carries more water than any other river, "
     "about 209,000 cubic metres per second."),
     "The Amazon River carries about 209,000 cubic metres of water per second."),
    (("Apple Inc. was founded by Steve Jobs, Steve Wozniak and Ronald Wayne in April 1976 in Los Altos. "
     "The company is headquartered in Cupertino."),
     "Apple was founded in April 1976 by Steve Jobs and Steve Wozniak. It is headquartered in Cupertino."),
]


def _pairs(n=40):
    out = []
    for i in range(n):
        ctx, ans = CONTEXTS[i % len(CONTEXTS)]
        out.append(SpanRecord(id=f"p{i:03d}", context=ctx, question="What happened?", answer=ans,
                              spans=[], task_type="QA", source="fixture"))
    return out


# ---- synthetic generator ----------------------------------------------------------------------------------

def test_synthetic_spans_match_the_answer_text():
    out, stats = generate_synthetic(_pairs(80), seed=7, faithful_fraction=0.25, max_edits=2)
    hallucinated = [r for r in out if r.spans]
    assert hallucinated and len(out) == 80 - stats["no_transform_applicable"]
    for r in hallucinated:
        assert r.label == 1
        for s in r.spans:
            assert r.answer[s["start"]:s["end"]] == s["text"] and s["end"] > s["start"]
            assert s["text"].strip() == s["text"]
            assert s["label_type"].startswith("synthetic:")
        assert r.answer != next(p.answer for p in _pairs(80) if p.id == r.meta["origin_id"])
    assert set(TRANSFORMS) <= set(stats)  # every transformation fired on this fixture


def test_synthetic_is_deterministic_and_order_independent():
    a, _ = generate_synthetic(_pairs(), seed=3)
    b, _ = generate_synthetic(list(reversed(_pairs())), seed=3)
    assert sorted(a, key=lambda r: r.id) == sorted(b, key=lambda r: r.id)
    c, _ = generate_synthetic(_pairs(), seed=4)
    assert [r.answer for r in sorted(a, key=lambda r: r.id)] != \
        [r.answer for r in sorted(c, key=lambda r: r.id)]
    # edits that draw nothing from the corpus do not change when pairs are added
    local = ["number", "date", "negation"]
    a, _ = generate_synthetic(_pairs(), seed=3, transforms=local)
    more, _ = generate_synthetic(_pairs() + [_pairs(1)[0].replace(id="zzz", context="Other text.")], seed=3,
                                 transforms=local)
    assert {r.id: r for r in more if r.meta["origin_id"] != "zzz"} == {r.id: r for r in a}


def test_held_out_faithful_answers_stay_unmodified():
    pairs = _pairs(100)
    out, stats = generate_synthetic(pairs, seed=11, faithful_fraction=0.4)
    faithful = [r for r in out if r.meta["synthetic"] == "faithful"]
    assert 25 <= len(faithful) <= 55 and stats["faithful_kept"] == len(faithful)
    by_id = {p.id: p for p in pairs}
    for r in faithful:
        assert r.spans == [] and r.label == 0 and r.answer == by_id[r.meta["origin_id"]].answer
    origins = [r.meta["origin_id"] for r in out]
    assert len(origins) == len(set(origins))  # a held-out pair never also yields a hallucinated copy
    assert all(r.meta["synthetic"] == "faithful"
               for r in generate_synthetic(pairs, seed=1, faithful_fraction=1.0)[0])


def test_synthetic_skips_inputs_that_already_have_spans_and_rejects_unknown_transforms():
    pairs = _pairs(4)
    pairs[0].spans = [{"start": 0, "end": 3, "text": "The"}]
    out, stats = generate_synthetic(pairs, seed=1)
    assert stats["skipped_not_faithful"] == 1 and "p000" not in {r.meta["origin_id"] for r in out}
    with pytest.raises(ValueError, match="unknown synthetic transforms"):
        generate_synthetic(pairs, transforms=["teleport"])


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_each_transform_alone(transform):
    out, stats = generate_synthetic(_pairs(12), seed=5, faithful_fraction=0.0, transforms=[transform])
    assert stats[transform] > 0
    for r in out:
        assert r.meta["synthetic"] == transform
        for s in r.spans:
            assert r.answer[s["start"]:s["end"]] == s["text"]


# ---- bad input is reported, with ids ----------------------------------------------------------------------

def test_bad_records_are_reported_with_ids_and_counted():
    recs = [
        {"id": "ok", "context": "c", "answer": "Paris is in Germany.", "spans": [{"start": 12, "end": 19}]},
        {"id": "outside", "context": "c", "answer": "short", "spans": [{"start": 3, "end": 40}]},
        {"id": "overlap", "context": "c", "answer": "abcdefghij", "spans": [{"start": 0, "end": 5},
                                                                            {"start": 3, "end": 8}]},
        {"id": "empty", "context": "c", "answer": "   ", "spans": []},
        {"id": "no-answer", "context": "c"},
        {"id": "no-context", "answer": "text", "spans": []},
        {"id": "flagged", "_problem": "duplicate_id"},
        {"context": "c", "answer": "no id here", "spans": []},
        {"id": "task", "context": "c", "answer": "x", "spans": [], "task_type": "poetry"},
    ]
    report = SpanDataReport()
    kept = clean_span_records(recs, "fixture", report)
    assert [r.id for r in kept] == ["ok", "overlap", "fixture-7", "task"]
    assert kept[0].label == 1 and kept[0].spans[0]["text"] == "Germany" and kept[2].label == 0
    assert kept[1].spans == [{"start": 0, "end": 8, "text": "abcdefgh"}]
    info = report.to_dict()["fixture"]
    assert info["kept"] == 4 and info["dropped"] == 5
    problems = {p: d["ids"] for p, d in info["problems"].items()}
    assert problems["span_outside_answer"] == ["outside"]
    assert problems["spans_overlap"] == ["overlap"]
    assert problems["empty answer"] == ["empty"]
    assert problems["missing answer"] == ["no-answer"]
    assert problems["missing context"] == ["no-context"]
    assert problems["duplicate_id"] == ["flagged"]
    assert problems["missing_id (numbered)"] == ["fixture-7"]
    assert any(p.startswith("unknown task_type") for p in problems)
    assert "span_outside_answer" in report.summary() and "outside" in report.summary()


def test_context_optional_when_the_source_has_none():
    report = SpanDataReport()
    kept = clean_span_records([{"id": "q", "question": "why?", "answer": "because", "spans": []}], "hq", report,
                              require_context=False)
    assert kept[0].context == "" and report.to_dict()["hq"]["dropped"] == 0


def test_diff_spans_and_extractive_answers():
    orig = "The company reported record profits in 2021 and hired 50 people."
    edited = "The company reported record losses in 2021 and hired 500 new people."
    spans = diff_spans(orig, edited)
    assert [s["text"] for s in spans] == ["losses", "500 new"]
    assert all(edited[s["start"]:s["end"]] == s["text"] for s in spans)
    assert diff_spans(orig, orig) == []
    ctx = ("Komorida was born in Kumamoto Prefecture on July 10, 1981. After graduating from high school, he joined "
           "Avispa Fukuoka in 2000. He retired in 2012.")
    ans = extractive_answer("When was Tomoaki Komorida born?", ctx)
    assert ans.startswith("Komorida was born in Kumamoto") and ans in ctx


def test_wice_token_flags_become_exact_character_spans():
    claim = "The audience consists of Australian ex-pats living in London."
    tokens = ["The", "audience", "consists", "of", "Australian", "ex", "-", "pats", "living", "in", "London", "."]
    flags = [False, False, False, False, True, True, True, True, False, False, True, False]
    spans = token_flag_spans(claim, tokens, flags)
    assert [s["text"] for s in spans] == ["Australian ex-pats", "London"]  # adjacent flags merge
    assert all(claim[s["start"]:s["end"]] == s["text"] for s in spans)
    assert token_flag_spans(claim, tokens, [False] * len(tokens)) == []
    assert token_flag_spans(claim, ["The", "Paris"], [False, True]) is None  # a token not in the claim


def test_wice_context_keeps_supporting_sentences_and_neighbours_in_order():
    evidence = ["(meta data) TITLE: t"] + [f"S{i}." for i in range(1, 12)]
    assert wice_context(evidence, [[6]], neighbours=1) == "S5. S6. S7."
    assert wice_context(evidence, [[10], [1, 2]], neighbours=1) == "S1. S2. S3. S9. S10. S11."  # meta line dropped


def test_training_refuses_evaluation_only_sets():
    from training.detector import _check_trainable

    with pytest.raises(DataError, match="evaluation-only"):
        _check_trainable("ragtruth_test")
    with pytest.raises(DataError, match="evaluation-only"):
        _check_trainable("wice_spans_test")
    _check_trainable("ragtruth_train")
    _check_trainable("ragtruth_test_subset")  # the local subset may be trained on (PROVENANCE.md)
    with pytest.raises(DataError, match="not a span dataset"):
        _check_trainable("nq_open")


def test_group_split_keeps_a_context_in_one_split():
    from training.detector import group_split

    recs = [p.replace(id=f"{p.id}-{k}") for p in _pairs(40) for k in range(2)]
    for i, r in enumerate(recs):
        r.context = f"{r.context} doc {i // 4}"
    train, dev, test = group_split(recs, (0.6, 0.2, 0.2), seed=1)
    assert len(train) + len(dev) + len(test) == len(recs) and dev and test
    ctx = [{r.context for r in part} for part in (train, dev, test)]
    assert not (ctx[0] & ctx[1]) and not (ctx[0] & ctx[2]) and not (ctx[1] & ctx[2])
    assert group_split(recs, (0.6, 0.2, 0.2), seed=1) == (train, dev, test)


# ---- real data --------------------------------------------------------------------------------------------

@pytest.mark.data
def test_ragtruth_test_subset_both_files(data_dir):
    report = SpanDataReport()
    recs = load_span_source("ragtruth_test_subset", data_dir, report)
    info = report.to_dict()["ragtruth_test_subset"]
    # 527 + 302 responses (the sources of a kept-back evaluation set were removed): 611 with a context
    assert len(recs) == 611 and info["kept"] == 611 and len({r.meta["source_id"] for r in recs}) == 234
    assert info["problems"]["missing context"]["count"] == 156  # test_balanced QA rows ship no passages
    assert info["problems"]["duplicate_id (kept the gpt_baseline_predictions copy)"]["count"] == 62
    assert {r.task_type for r in recs} == {"QA", "Summary", "Data2txt"}
    assert all(r.question for r in recs if r.task_type == "QA")
    assert all(r.context.startswith("{") for r in recs if r.task_type == "Data2txt")
    for r in recs:
        for s in r.spans:
            assert r.answer[s["start"]:s["end"]] == s["text"]
    assert sum(r.label for r in recs) == 236


@pytest.mark.data
@pytest.mark.parametrize("name,minimum", [("faithbench", 700), ("haluquestqa", 1300), ("halueval_qa_spans", 2000),
                                          ("summedits_spans", 4500), ("dolly_extractive", 4000),
                                          ("wice_spans", 497)])
def test_training_sources_load(data_dir, name, minimum):
    report = SpanDataReport()
    recs = load_span_source(name, data_dir, report)
    assert len(recs) >= minimum
    assert any(r.label for r in recs) or name == "dolly_extractive"
    for r in recs[:500]:
        assert r.source == name and isinstance(r.answer, str) and r.answer.strip()
        for s in r.spans:
            assert r.answer[s["start"]:s["end"]] == s["text"]


def test_ragtruth_original_schema_from_a_local_download(tmp_path):
    folder = tmp_path / "ragtruth"
    folder.mkdir()
    sources = [
        {"source_id": "1", "task_type": "QA", "source": "MARCO",
         "source_info": {"question": "how tall is it", "passages": "passage 1: The tower is 330 m tall."}},
        {"source_id": "2", "task_type": "Summary", "source": "CNN/DM", "source_info": "Long news text."},
        {"source_id": "3", "task_type": "Data2txt", "source": "Yelp", "source_info": {"name": "Cafe", "stars": 4}},
    ]
    ans = "It is 500 m tall."
    responses = [
        {"id": "10", "source_id": "1", "model": "m", "split": "train", "response": ans,
         "labels": [{"start": 6, "end": 11, "text": "500 m", "label_type": "Evident Conflict"}]},
        {"id": "11", "source_id": "2", "model": "m", "split": "train", "response": "News summary.", "labels": []},
        {"id": "12", "source_id": "3", "model": "m", "split": "test", "response": "A cafe.", "labels": []},
        {"id": "13", "source_id": "404", "model": "m", "split": "train", "response": "Orphan.", "labels": []},
    ]
    (folder / "response.jsonl").write_text("\n".join(json.dumps(r) for r in responses) + "\n")
    (folder / "source_info.jsonl").write_text("\n".join(json.dumps(s) for s in sources) + "\n")
    report = SpanDataReport()
    train = load_span_source("ragtruth_train", tmp_path, report)
    assert [r.id for r in train] == ["ragtruth-10", "ragtruth-11"]
    qa = train[0]
    assert (qa.task_type, qa.question, qa.context) == ("QA", "how tall is it", "passage 1: The tower is 330 m tall.")
    assert qa.spans == [{"start": 6, "end": 11, "text": "500 m", "label_type": "Evident Conflict"}]
    assert report.to_dict()["ragtruth_train"]["problems"]["missing_source_info"]["ids"] == ["ragtruth-13"]
    test = load_span_source("ragtruth_test", tmp_path, SpanDataReport())
    assert [r.id for r in test] == ["ragtruth-12"] and json.loads(test[0].context) == {"name": "Cafe", "stars": 4}

    from eval.detector import load_eval_records

    recs, _rep = load_eval_records(str(folder))
    assert [r.id for r in recs] == ["ragtruth-12"]


def test_train_only_sources_never_reach_dev_or_test():
    from pathlib import Path

    from inference.config import ConfigError, from_dict, load_config
    from training.detector import DetectorConfig, run_split

    cfg = load_config(DetectorConfig, Path(__file__).resolve().parents[1] / "configs" / "detector.offline.yaml")
    cfg.data.split.dev, cfg.data.split.test = 0.2, 0.2
    main = [p.replace(id=f"{p.id}-{k}", context=f"{p.context} doc {i // 2}", source="main")
            for i, p in enumerate(_pairs(40)) for k in range(2)]
    aux = [p.replace(id=f"aux{p.id}", context=f"{p.context} page {i}", source="aux") for i, p in enumerate(_pairs(30))]
    cfg.data.train_only = []
    _, dev_without, test_without = run_split(cfg, main)
    cfg.data.train_only = ["aux"]
    train, dev, test = run_split(cfg, main + aux)
    assert {r.source for r in dev + test} == {"main"} and sum(r.source == "aux" for r in train) == 30
    assert (dev, test) == (dev_without, test_without)  # the in-domain split does not move
    bad = {"data": {"sources": [{"name": "ragtruth_test_subset"}], "train_only": ["wice_spans"]}}
    with pytest.raises(ConfigError, match="train_only"):
        from_dict(DetectorConfig, bad, "recipe.yaml")
