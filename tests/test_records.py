"""The three record kinds, typed: the JSONL form (from_dict / to_dict), field checks, model inputs, kinds."""

import json

import pytest

from training.data.base import DataError
from training.data.records import (
    KINDS,
    PairRecord,
    PromptRecord,
    SpanRecord,
    record_class,
)


def test_from_dict_to_dict_round_trip_keeps_meta():
    row = {"premise": "A dog runs.", "hypothesis": "An animal moves.", "label": 0, "source": "snli_dev",
           "pair_id": "snli:1", "domain": "captions", "train_only": True}
    rec = PairRecord.from_dict(row, "test.jsonl:1")
    assert (rec.premise, rec.hypothesis, rec.label, rec.source) == ("A dog runs.", "An animal moves.", 0, "snli_dev")
    assert rec.meta == {"pair_id": "snli:1", "domain": "captions", "train_only": True}
    assert rec.to_dict() == row
    assert PairRecord.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec  # through JSON and back, whole

    prompt = PromptRecord.from_dict({"text": "Write a poem.", "label": 0, "skill": "Writting"})
    assert prompt == PromptRecord("Write a poem.", 0, "", {"skill": "Writting"})
    assert prompt.to_dict() == {"text": "Write a poem.", "label": 0, "source": "", "skill": "Writting"}
    assert PromptRecord.from_dict(prompt.to_dict()) == prompt

    span = SpanRecord.from_dict({"context": "ctx", "answer": "a b", "spans": [{"start": 0, "end": 1, "text": "a"}],
                                 "label": 1, "split": "train"})
    assert span.meta == {"split": "train"} and span.question is None and span.spans[0]["end"] == 1
    assert SpanRecord.from_dict(span.to_dict()) == span


def test_replace_returns_a_new_record():
    rec = PromptRecord("Who?", 1, "s", {"augment": "pos_imperative"})
    new = rec.replace(text="Tell me who.")
    assert new == PromptRecord("Tell me who.", 1, "s", {"augment": "pos_imperative"})
    assert rec.text == "Who?"


def test_label_is_optional():
    assert PromptRecord.from_dict({"text": "x"}).label is None
    assert PairRecord.from_dict({"premise": "p", "hypothesis": "h"}).label is None


def test_missing_required_fields_name_where_and_the_field():
    with pytest.raises(DataError, match=r"test\.jsonl:3: a nli record needs the field\(s\) hypothesis "
                                        r"\(keys: label, premise\)"):
        PairRecord.from_dict({"premise": "p", "label": 0}, "test.jsonl:3")
    with pytest.raises(DataError, match=r"f\.jsonl:7: a prompt record needs the field\(s\) text \(keys: foo, prompt\)"):
        PromptRecord.from_dict({"prompt": "x", "foo": 1}, "f.jsonl:7")
    with pytest.raises(DataError, match=r"rows:2: a span record needs the field\(s\) context, answer \(keys: none\)"):
        SpanRecord.from_dict({}, "rows:2")
    with pytest.raises(DataError, match=r"rows:4: expected a JSON object, got list"):
        PromptRecord.from_dict(["text"], "rows:4")


@pytest.mark.parametrize("cls,row", [
    (PromptRecord, {"text": "x"}),
    (PairRecord, {"premise": "p", "hypothesis": "h"}),
    (SpanRecord, {"context": "c", "answer": "a"}),
])
@pytest.mark.parametrize("bad", ["1", True, False, 1.0, [1]])
def test_a_wrong_typed_label_is_an_error_naming_the_field(cls, row, bad):
    with pytest.raises(DataError, match=r"^data\.jsonl:5: field 'label': expected an integer class id, got "):
        cls.from_dict({**row, "label": bad}, "data.jsonl:5")


def test_a_wrong_typed_text_field_is_an_error_naming_the_field():
    with pytest.raises(DataError, match=r"data\.jsonl:2: field 'text': expected a string, got int"):
        PromptRecord.from_dict({"text": 3, "label": 1}, "data.jsonl:2")
    with pytest.raises(DataError, match=r"data\.jsonl:2: field 'hypothesis': expected a string, got NoneType"):
        PairRecord.from_dict({"premise": "p", "hypothesis": None}, "data.jsonl:2")
    with pytest.raises(DataError, match=r"data\.jsonl:2: field 'spans': expected a list, got str"):
        SpanRecord.from_dict({"context": "c", "answer": "a", "spans": "x"}, "data.jsonl:2")


def test_model_inputs_of_each_kind():
    assert PromptRecord("Who?", 1, "s").model_inputs() == ("Who?",)
    assert PairRecord("A dog runs.", "An animal moves.", 0).model_inputs() == ("A dog runs.", "An animal moves.")
    span = SpanRecord(context="ctx", answer="a", question="q?", spans=[], task_type="QA")
    assert span.model_inputs() == ("ctx\nq?", "a")  # (context + question, answer): the Detector's two segments
    assert SpanRecord(context="ctx", answer="a").model_inputs() == ("ctx", "a")


def test_record_class():
    assert record_class("prompt") is PromptRecord and record_class("nli") is PairRecord
    assert record_class("span") is SpanRecord and set(KINDS) == {"prompt", "nli", "span"}
    with pytest.raises(ValueError, match=r"unknown record kind 'bogus'; known: prompt, nli, span"):
        record_class("bogus")
