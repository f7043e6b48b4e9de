"""eval.sentinel --data FILE.jsonl: label names and 0/1 are accepted; anything else is one line naming
file:line and the field, exit 2."""

from __future__ import annotations

import json

import pytest

from eval.sentinel import load_records, main, parse_label
from training.data.base import DataError
from training.data.records import PromptRecord


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_label_names_and_numbers_are_accepted(tmp_path):
    path = _write(tmp_path / "prompts.jsonl", [
        {"text": "Who won the 1998 World Cup?", "label": "FACT_CHECK_NEEDED"},
        {"text": "Write a poem.", "label": "NO_FACT_CHECK_NEEDED", "source": "poems"},
        {"text": "Capital of Peru?", "label": "fact_check_needed"},
        {"text": "Tell a joke.", "label": 0},
        {"text": "When was Rome founded?", "label": "1"},
    ])
    records = load_records([str(path)], None)
    assert all(isinstance(r, PromptRecord) for r in records)
    assert [r.label for r in records] == [1, 0, 1, 0, 1]
    assert [r.source for r in records] == ["prompts", "poems", "prompts", "prompts", "prompts"]


@pytest.mark.parametrize("bad", ["FACT", 2, True, None, "yes"])
def test_other_labels_are_refused(bad):
    with pytest.raises(DataError, match=r"f.jsonl:3: field 'label': .* is not a Sentinel label"):
        parse_label(bad, "f.jsonl:3")


def test_bad_file_is_one_line_with_file_line_and_field_exit_2(tmp_path, capsys):
    path = _write(tmp_path / "bad.jsonl", [{"text": "ok?", "label": 1}, "", {"text": "x", "label": "MAYBE"}])
    assert main(["--model", str(tmp_path / "no-model"), "--data", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ")
    assert f"{path}:3: field 'label': 'MAYBE'" in err  # the file line, blank lines counted
    path = _write(tmp_path / "bad2.jsonl", [{"text": "", "label": 1}])
    assert main(["--model", str(tmp_path / "no-model"), "--data", str(path)]) == 2
    assert f"{path}:1: field 'text'" in capsys.readouterr().err
    path = _write(tmp_path / "bad3.jsonl", ["{not json"])
    assert main(["--model", str(tmp_path / "no-model"), "--data", str(path)]) == 2
    assert f"{path}:1: invalid JSON" in capsys.readouterr().err


def test_missing_model_dir_is_one_line_exit_2_and_help_has_an_example(tmp_path, capsys):
    path = _write(tmp_path / "ok.jsonl", [{"text": "Who won?", "label": "FACT_CHECK_NEEDED"}])
    assert main(["--model", str(tmp_path / "no-model"), "--data", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no-model: no config.json" in err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "examples:" in capsys.readouterr().out
