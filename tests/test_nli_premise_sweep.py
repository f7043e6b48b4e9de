"""scripts/nli_premise_sweep.py: the verdict rules and the candidate grid, on hand-made probabilities."""

from types import SimpleNamespace

import numpy as np
import pytest
from script_loader import load_script


@pytest.fixture(scope="module")
def sweep():
    return load_script("nli_premise_sweep")


def test_rules_on_an_unreadable_window(sweep):
    rules = sweep.verdict_rules(0, 2)
    unreadable = np.array([[0.42, 0.20, 0.38]])  # argmax entailment, but not more likely than not
    assert rules["argmax (before)"](unreadable) is True
    assert rules["p(entailment) >= 0.5 (now)"](unreadable) is False
    assert rules["max(p(e) - p(c)) > 0"](unreadable) is True


def test_table_reads_only_the_candidates_of_each_cell(sweep):
    rows = [("wice_dev", SimpleNamespace(label=0)), ("wice_dev", SimpleNamespace(label=3)),
            ("wice_dev", SimpleNamespace(label=0)), ("wice_dev", SimpleNamespace(label=3))]
    # Supported rows are entailed by their best sentence only; the long windows say "entailment" for all rows.
    cands, probs = [], []
    for i, (_, r) in enumerate(rows):
        cands.append((i, "w256", 0, "long window"))
        probs.append([0.45, 0.2, 0.35])
        cands.append((i, "sent", 0, "a sentence"))
        probs.append([0.9, 0.05, 0.05] if r.label == 0 else [0.1, 0.8, 0.1])
    result = sweep.table(rows, cands, np.array(probs), ["entailment", "neutral", "contradiction"])
    cell = {(r["windows_256"], r["windows_96"], r["sentences"], r["rule"]): r for r in result}
    assert cell[(1, 0, 0, "argmax (before)")]["sets"]["wice_dev"]["balanced_accuracy"] == 0.5
    assert cell[(1, 0, 1, "argmax (before)")]["sets"]["wice_dev"]["balanced_accuracy"] == 0.5
    assert cell[(1, 0, 1, "p(entailment) >= 0.5 (now)")]["sets"]["wice_dev"]["balanced_accuracy"] == 1.0
    assert cell[(0, 0, 1, "p(entailment) >= 0.5 (now)")]["pairs_per_row"] == 1.0
    assert result[0]["mean_balanced_accuracy"] == 1.0
