"""The three record kinds, typed, and the one place that tells them apart."""

import pytest

from training.data.base import DataError
from training.data.records import PairRecord, PromptRecord, SpanRecord, record_kind, typed


def test_kinds_and_model_inputs():
    assert typed({"text": "Who?", "label": 1, "source": "s"}) == PromptRecord("Who?", 1, "s")
    pair = typed({"premise": "A dog runs.", "hypothesis": "An animal moves.", "label": 0, "id": "x"})
    assert isinstance(pair, PairRecord) and pair.model_inputs() == ("A dog runs.", "An animal moves.")
    span = typed({"context": "ctx", "question": "q?", "answer": "a", "spans": [], "task_type": "QA"})
    assert isinstance(span, SpanRecord) and span.model_inputs() == ("ctx\nq?", "a")
    assert record_kind({"context": "c", "answer": "a"}) == "span"


def test_unknown_record_names_its_keys():
    with pytest.raises(DataError, match=r"test.jsonl:3: record has none of the fields .*keys: foo, prompt"):
        record_kind({"prompt": "x", "foo": 1}, "test.jsonl:3")
