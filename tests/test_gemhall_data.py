"""CSV input validation, MMLU loading (local layout, Hub fallback), sampling and IDK conversion."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eval.gemhall.data import DataError, load_items_csv
from eval.gemhall.mmlu import (
    LETTERS,
    build_mmlu_items,
    format_mcq,
    load_hub,
    load_mmlu_rows,
)

REPO = Path(__file__).resolve().parents[1]
HEADER = "id,question,gold,unknown_ok"


def write(tmp_path: Path, text: str, name: str = "items.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_toy_example_loads():
    items = load_items_csv(REPO / "examples" / "toy.csv")
    assert [it.id for it in items] == ["count-r", "ice-float", "no-such-fn"]
    assert [it.unknown_ok for it in items] == [False, False, True]
    assert items[0].gold == "3" and items[2].gold == ""
    assert items[0].category == "counting"


def test_extra_columns_are_kept(tmp_path):
    path = write(tmp_path, HEADER + ",category,source\nq1,\"What is 2+2, exactly?\",4,0,math,handmade\n")
    (item,) = load_items_csv(path)
    assert item.question == "What is 2+2, exactly?"
    assert item.category == "math" and item.extra == {"source": "handmade"}


def test_multiline_questions_and_bom(tmp_path):
    path = write(tmp_path, "\ufeff" + HEADER + "\nq1,\"line one\nline two\",x,0\nq2,second,,1\n")
    items = load_items_csv(path)
    assert items[0].question == "line one\nline two" and items[1].unknown_ok


@pytest.mark.parametrize("body,message", [
    ("id,question,gold\nq1,a,b\n", r"items.csv: line 1: missing column\(s\) unknown_ok"),
    (HEADER + ",id\nq1,a,b,0,x\n", r"line 1: duplicate column\(s\) id"),
    (HEADER + "\nq1,a,b,0\nq2,a,b,0,extra\n", r"items.csv: line 3: 5 fields, the header has 4"),
    (HEADER + "\nq1,a,b,0\n,a,b,0\n", r"items.csv: line 3, column 1 \(id\): empty id"),
    (HEADER + "\nq1,a,b,0\nq1,c,d,0\n", r"line 3, column 1 \(id\): duplicate id 'q1' \(first on line 2\)"),
    (HEADER + "\nq1,,b,0\n", r"line 2, column 2 \(question\): empty question"),
    (HEADER + "\nq1,a,b,maybe\n", r"line 2, column 4 \(unknown_ok\): expected 0/1 .* got 'maybe'"),
    (HEADER + "\nq1,a,,0\n", r"line 2, column 3 \(gold\): empty gold answer while unknown_ok is 0"),
    (HEADER + "\nq1,\"multi\nline\",b,0\nq2,a,,0\n", r"line 4, column 3 \(gold\)"),
    ("", r"items.csv: empty file"),
    (HEADER + "\n", r"items.csv: no items after the header"),
])
def test_bad_csv_errors_name_file_line_and_column(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(DataError, match=message):
        load_items_csv(path)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="data file not found"):
        load_items_csv(tmp_path / "nope.csv")


# -- MMLU ----------------------------------------------------------------------------------------------

def make_mmlu(root: Path, split_dir: str = "val", subjects=("anatomy", "astronomy"), n: int = 10) -> Path:
    folder = root / "mmlu" / "data" / split_dir
    folder.mkdir(parents=True)
    for s in subjects:
        lines = [f'"{s} question {i}?",{s}-a{i},{s}-b{i},"{s}, c{i}",{s}-d{i},{LETTERS[i % 4]}' for i in range(n)]
        (folder / f"{s}_{split_dir}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_local_mmlu_validation_split_reads_the_val_folder(tmp_path):
    make_mmlu(tmp_path, "val")
    rows = load_mmlu_rows("validation", ["all"], tmp_path)
    assert len(rows) == 20
    assert {r.subject for r in rows} == {"anatomy", "astronomy"}
    first = rows[0]
    assert first.question == "anatomy question 0?" and first.choices[2] == "anatomy, c0" and first.answer == "A"
    only = load_mmlu_rows("validation", ["astronomy"], tmp_path)
    assert len(only) == 10 and {r.subject for r in only} == {"astronomy"}


def test_local_mmlu_via_environment(tmp_path, monkeypatch):
    make_mmlu(tmp_path, "dev", n=5)
    monkeypatch.setenv("HALUGATE_DATA_DIR", str(tmp_path))
    assert len(load_mmlu_rows("dev")) == 10


def test_unknown_subject_and_missing_split(tmp_path):
    make_mmlu(tmp_path, "val")
    with pytest.raises(DataError, match="unknown MMLU subject.*virology"):
        load_mmlu_rows("validation", ["virology"], tmp_path)
    with pytest.raises(DataError, match="no MMLU split folder"):
        load_mmlu_rows("test", ["all"], tmp_path)
    with pytest.raises(DataError, match="--split"):
        load_mmlu_rows("train", ["all"], tmp_path)


def test_bad_mmlu_rows_name_file_and_line(tmp_path):
    folder = make_mmlu(tmp_path, "val", subjects=("anatomy",), n=3)
    path = folder / "anatomy_val.csv"
    path.write_text(path.read_text() + "q?,a,b,c,D\n")
    with pytest.raises(DataError, match=r"anatomy_val.csv: line 4: 5 fields, expected 6"):
        load_mmlu_rows("validation", ["all"], tmp_path)
    path.write_text("q?,a,b,c,d,E\n")
    with pytest.raises(DataError, match=r"anatomy_val.csv: line 1, column 6 \(answer\): expected A-D, got 'E'"):
        load_mmlu_rows("validation", ["all"], tmp_path)


def test_idk_conversion_is_deterministic_and_correct(tmp_path):
    make_mmlu(tmp_path, "val", n=40)
    rows = load_mmlu_rows("validation", ["all"], tmp_path)
    a = build_mmlu_items(rows, split="validation", limit=50, idk_frac=0.3, seed=1234)
    b = build_mmlu_items(rows, split="validation", limit=50, idk_frac=0.3, seed=1234)
    c = build_mmlu_items(rows, split="validation", limit=50, idk_frac=0.3, seed=99)
    assert a == b
    assert [it.id for it in a] != [it.id for it in c]
    assert len(a) == 50 and len({it.id for it in a}) == 50
    unanswerable = [it for it in a if it.unknown_ok]
    assert len(unanswerable) == 15
    originals = {f"{r.subject}/validation/{r.index}": r for r in rows}
    for it in a:
        row = originals[it.id]
        if it.unknown_ok:
            assert it.gold == "" and it.category == f"{row.subject}|unanswerable"
            correct_text = row.choices[LETTERS.index(row.answer)]
            assert correct_text not in it.choices.values()  # the right option is gone ...
            assert len(set(it.choices.values())) == 3  # ... replaced by a copy of a distractor
            assert it.choices[row.answer] in row.choices
        else:
            assert it.gold == row.answer and it.category == row.subject
            assert list(it.choices.values()) == row.choices
        assert it.question == format_mcq(row.question, list(it.choices.values()))
    assert "\n\nA. " in a[0].question and a[0].question.endswith("(A, B, C or D).")


def test_idk_frac_edges(tmp_path):
    make_mmlu(tmp_path, "val", n=5)
    rows = load_mmlu_rows("validation", ["all"], tmp_path)
    assert not any(it.unknown_ok for it in build_mmlu_items(rows, split="validation", idk_frac=0.0))
    assert all(it.unknown_ok for it in build_mmlu_items(rows, split="validation", idk_frac=1.0))
    with pytest.raises(DataError, match="idk-frac"):
        build_mmlu_items(rows, split="validation", idk_frac=1.5)


def test_hub_loader_falls_back_to_per_subject_configs(monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(name, config, split):
        calls.append((name, config, split))
        if config == "all":
            raise ConnectionError("no `all` config here")
        return datasets.Dataset.from_dict({
            "question": [f"{config} q{i}" for i in range(3)],
            "choices": [["w", "x", "y", "z"]] * 3,
            "answer": [0, 1, 3],
        })

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = load_hub("validation", ["anatomy", "virology"])
    assert calls[0] == ("cais/mmlu", "all", "validation")
    assert calls[1:] == [("cais/mmlu", "anatomy", "validation"), ("cais/mmlu", "virology", "validation")]
    assert [(r.subject, r.answer) for r in rows[:3]] == [("anatomy", "A"), ("anatomy", "B"), ("anatomy", "D")]
    assert rows[3].subject == "virology" and rows[3].index == 0


def test_hub_loader_uses_the_all_config_and_filters_subjects(monkeypatch):
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_dict({
        "question": ["q1", "q2", "q3"], "subject": ["anatomy", "virology", "anatomy"],
        "choices": [["a", "b", "c", "d"]] * 3, "answer": [2, 1, 0],
    })
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config, split: data)
    rows = load_hub("test", ["anatomy"])
    assert [(r.question, r.index, r.answer) for r in rows] == [("q1", 0, "C"), ("q3", 1, "A")]


DATA_DIR = os.environ.get("HALUGATE_DATA_DIR")
needs_data = pytest.mark.skipif(
    not DATA_DIR or not (Path(DATA_DIR) / "mmlu" / "data").is_dir(),
    reason="real MMLU data not found: set HALUGATE_DATA_DIR to the shared data folder (with mmlu/data)",
)


@pytest.mark.data
@needs_data
def test_real_mmlu_split_sizes():
    assert len(load_mmlu_rows("validation", ["all"], DATA_DIR)) == 1531
    assert len(load_mmlu_rows("dev", ["all"], DATA_DIR)) == 285
    test = load_mmlu_rows("test", ["all"], DATA_DIR)
    assert len(test) == 14042 and len({r.subject for r in test}) == 57
    items = build_mmlu_items(test, split="test", limit=200, idk_frac=0.3, seed=1234)
    assert len(items) == 200 and sum(it.unknown_ok for it in items) == 60
