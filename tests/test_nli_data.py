"""The NLI adapters on the real local data (skipped without it): row counts as in each PROVENANCE.md."""

from __future__ import annotations

import pytest

from training.config import SourceSpec
from training.data.base import get_adapter
from training.explainer import ExplainerData, load_nli_records

pytestmark = pytest.mark.data

EXPECTED = {  # rows after dropping '-' / unusable labels; see the PROVENANCE.md files
    "mnli_dev_matched": 10000 - 185, "mnli_dev_mismatched": 10000 - 168, "snli_test": 10000 - 176,
    "anli_r1_dev": 1000, "anli_r2_dev": 1000, "anli_r3_dev": 1198,
    "sick": 4439 + 495, "sick_test": 4906, "taxinli": 10071, "snli_dev": 10000 - 158,
    "rte": 2490, "rte_dev": 277, "scitail": 2126, "med": 5382, "cb": 306, "fracas": 346, "joci": 8412 + 939,
    "mpe": 10000, "add_one_rte": 4991 + 387, "summedits": 986, "summedits_test": 3695, "begin": 1229,
    "begin_test": 3607, "wice_test": 358, "wice_dev": 349, "cad_snli": 8330, "curriculum_control": 6719,
    "curriculum_control_val": 1604, "curriculum_boolean": 3000, "curriculum_monotonicity_infer": 35891,
    "curriculum_defeasible": 39036, "curriculum_logiqa": 14752,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_row_counts(data_dir, name):
    assert len(get_adapter(name).load(data_dir)) == EXPECTED[name]


def test_taxinli_loses_exactly_its_mnli_dev_pairs(data_dir):
    records, info = load_nli_records(ExplainerData(sources=[SourceSpec("taxinli")]), data_dir, seed=0)
    assert info["sources"]["taxinli"]["eval_overlap"] == 7874  # PROVENANCE: 7,874 pairs are MNLI dev pairs
    assert len(records) == 2197 - info["sources"]["taxinli"]["length_filtered"]


def test_faithdial_audit_labels(data_dir):
    rows = get_adapter("faithdial_audit").load(data_dir)
    counts = {lab: sum(r.label == lab for r in rows) for lab in (0, 1, 3)}
    assert sum(counts.values()) == len(rows) and all(counts.values())
    assert len(rows) < 3200  # unlabelled (792 in gold/topical) and uncooperative-only rows are dropped
