"""Label mapping of every NLI adapter, on fixture rows written in each source's own format."""

from __future__ import annotations

import pytest
from nli_fixtures import MNLI_DEV_OVERLAP, write_nli_data

from training.data.base import DataError, get_adapter
from training.data.nli import (
    CONTRADICTION,
    ENTAILMENT,
    EVAL_SETS,
    NEUTRAL,
    NOT_ENTAILMENT,
    faithdial_label,
    map_label,
)
from training.data.records import PairRecord

E, N, C, X = ENTAILMENT, NEUTRAL, CONTRADICTION, NOT_ENTAILMENT


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    return write_nli_data(tmp_path_factory.mktemp("nli-data"))


def labels(name, root):
    return [r.label for r in get_adapter(name).load(root)]


@pytest.mark.parametrize("name", ["joci", "fracas", "cb"])
def test_three_way_csv_sources_keep_their_labels(fixture_dir, name):
    assert labels(name, fixture_dir) == [E, N, C] * 3


def test_every_record_is_a_stripped_pair_with_a_source(fixture_dir):
    from training.data.base import REGISTRY

    local = [a for a in REGISTRY.values() if a.kind == "nli" and a.load_local is not None]
    assert len(local) >= 20
    for adapter in local:
        for r in adapter.load(fixture_dir):
            assert isinstance(r, PairRecord), (adapter.name, r)
            assert r.source == adapter.name
            assert r.premise == r.premise.strip() and r.hypothesis == r.hypothesis.strip()
            assert r.label in (E, N, C, X), (adapter.name, r)


def test_mnli_snli_csv_drop_no_consensus_rows_and_keep_pair_ids(fixture_dir):
    rows = get_adapter("mnli_dev_matched").load(fixture_dir)
    assert [r.label for r in rows] == [E, N, C, N, C]  # the '-' row is gone
    assert rows[3].meta["pair_id"] == f"mnli:{MNLI_DEV_OVERLAP[3]}"
    assert labels("snli_test", fixture_dir) == [E, N, C]


def test_anli_letter_labels(fixture_dir):
    for r in (1, 2, 3):
        rows = get_adapter(f"anli_r{r}_dev").load(fixture_dir)
        assert [x.label for x in rows] == [E, N, C]
        assert rows[0].meta["pair_id"] == f"anli:u{r}0"


def test_sick_train_and_test_parts_are_disjoint(fixture_dir):
    train = get_adapter("sick").load(fixture_dir)
    test = get_adapter("sick_test").load(fixture_dir)
    # SemEval_set cycles TRAIN, TRIAL, TEST over E, N, C rows.
    assert [r.label for r in train] == [E, N, E, N, E, N]
    assert [r.label for r in test] == [C, C, C]
    assert not {r.meta["pair_id"] for r in train} & {r.meta["pair_id"] for r in test}


def test_two_way_sources_use_the_not_entailment_marker(fixture_dir):
    assert labels("rte", fixture_dir) == [E, X]
    assert labels("rte_dev", fixture_dir) == [E, X]
    assert labels("med", fixture_dir) == [E, X]  # MED's "neutral" means neutral or contradiction
    assert labels("add_one_rte", fixture_dir) == [X, E]
    assert labels("qnli", fixture_dir) == [E, X]
    assert labels("copa", fixture_dir) == [E, X, E, X]
    assert labels("wnli", fixture_dir) == [E, X, E, X]


def test_scitail_not_entailment_is_restored_to_neutral(fixture_dir):
    assert labels("scitail", fixture_dir) == [E, N]


def test_text_cleaning_of_mpe_and_add_one_rte(fixture_dir):
    mpe = get_adapter("mpe").load(fixture_dir)
    assert mpe[0].premise == "Very young girl holding a spoon. A child holding a white spoon."
    assert [r.label for r in mpe] == [E, C]
    aor = get_adapter("add_one_rte").load(fixture_dir)
    assert aor[0].premise == "It was the creature."
    assert aor[0].hypothesis == "It was the wild creature."


def test_taxinli_keeps_mnli_gold_label_not_annotated_label(fixture_dir):
    rows = get_adapter("taxinli").load(fixture_dir)
    assert [r.label for r in rows] == [N, C, E, C]
    assert rows[2].meta["pair_id"] == "mnli:1111e"


def test_grounding_sets(fixture_dir):
    se_train = get_adapter("summedits").load(fixture_dir)
    se_test = get_adapter("summedits_test").load(fixture_dir)
    assert [r.label for r in se_train[:2]] == [E, X] and len(se_train) == 16
    assert len(se_test) == 16 and {r.label for r in se_test} == {E, X}
    assert se_test[0].meta["domain"] == "ectsum"
    assert labels("begin", fixture_dir) == [E, N, X]  # Fully attributable, Generic, Not fully attributable
    assert labels("begin_test", fixture_dir) == [E, X, N]
    fd = get_adapter("faithdial_audit").load(fixture_dir)
    # gold/cmu: Entailment, Hallucination, Partial Hallucination, Generic (Uncooperative and empty dropped);
    # GPT2/wow: entailment+uncooperative, entailment+hallucination, typo'd entailment+uncooperative, hallucinated.
    assert [r.label for r in fd] == [E, X, X, N, E, X, E, X]
    assert fd[0].premise == "Law work applies theories."


@pytest.mark.parametrize("raw, expected", [
    ("Entailment", E), ("entailment,uncooperative", E), ("entailment. uncooperative", E),
    ("Hallucination", X), ("Partial Hallucination", X), ("entailment,hallucination", X), ("hallucinated", X),
    ("Generic", N), ("generic", N), ("Uncooperative", None), ("", None),
])
def test_faithdial_label_rules(raw, expected):
    assert faithdial_label(raw, "row") == expected


def test_unknown_labels_are_errors_naming_dataset_and_place(tmp_path):
    with pytest.raises(DataError, match=r"faithdial_audit: f.csv:3: unknown BEGIN label 'maybe'"):
        faithdial_label("maybe", "f.csv:3")
    with pytest.raises(DataError, match=r"rte: x.csv:7: unknown label 'yes'"):
        map_label("yes", {"entailment": 0}, "rte", "x.csv:7")
    root = write_nli_data(tmp_path)
    path = root / "nli/felipessalvatore_nli_datasets/joci/train.csv"
    path.write_text("premise,hypothesis,label\na,b,entailment\nc,d,ENTAILS\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"joci: .*joci/train.csv:3: unknown label 'ENTAILS'"):
        get_adapter("joci").load(root)


def test_missing_files_name_the_dataset(tmp_path):
    with pytest.raises(DataError, match=r"dataset 'med': missing under"):
        get_adapter("med").load(tmp_path)


def test_eval_sets_are_registered_nli_adapters():
    for name in EVAL_SETS:
        assert get_adapter(name).kind == "nli"
