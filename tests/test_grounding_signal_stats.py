"""scripts/grounding_signal_stats.py: signal counts inside and outside gold spans, on hand records."""

import pytest
from script_loader import load_script

from training.data.records import SpanRecord


@pytest.fixture(scope="module")
def stats():
    return load_script("grounding_signal_stats")


def test_counts_follow_the_gold_spans_and_the_rules(stats):
    answer = "Steps:\n6. It opened in 1950 in California."
    rec = SpanRecord(context='{"state": "CA", "opened": 1889}', answer=answer, task_type="Data2txt",
                     spans=[{"start": answer.index("1950"), "end": answer.index("1950") + 4}])
    loose, strict = stats.signal_counts([rec], strict=False), stats.signal_counts([rec], strict=True)
    assert loose[("number", True)] == strict[("number", True)] == 1  # "1950", inside the gold span
    assert loose[("number", False)] == 1 and strict[("number", False)] == 0  # the list marker "6"
    assert loose[("name", False)] == 1 and strict[("name", False)] == 0  # "California" against "CA"
    assert loose[("words", True)] == 1 and sum(v for (k, _), v in loose.items() if k == "words") == 8
    row = stats.table_rows("all, loose", loose)[0]
    assert row.startswith("| all, loose | 1 of 8 | 2 / 0.500 / 1.000 |")


def test_bad_fold_groups_exit_2(stats, capsys, tmp_path):
    assert stats.main(["--data-dir", str(tmp_path), "--groups", "0,x"]) == 2
    assert "error: --groups" in capsys.readouterr().err
