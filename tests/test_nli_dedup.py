"""Evaluation pairs stay out of Explainer training: text keys, upstream ids, counts, splits."""

from __future__ import annotations

import pytest
from nli_fixtures import MNLI_DEV_ID_ONLY, MNLI_DEV_OVERLAP, write_nli_data

from inference.config import ConfigError, from_dict
from training.config import SourceSpec
from training.data.base import DataError
from training.data.nli import NOT_ENTAILMENT
from training.data.records import PairRecord
from training.explainer import (
    EvalIndex,
    ExplainerConfig,
    ExplainerData,
    dedup_pairs,
    load_eval_index,
    load_nli_records,
    pair_key,
    remove_eval_overlap,
    split_records,
)


def rec(p, h, label=0, source="s", **kw):
    return PairRecord(p, h, label, source, meta=kw)


def test_pair_key_ignores_case_spacing_punctuation_tokenisation_and_mojibake():
    assert pair_key("A church choir sings .", "The church has cracks .") == \
        pair_key("a church  choir sings.", "The church has cracks")
    assert pair_key("Es Vedr?\u252c\u00e1 hovers", "x") == pair_key("Es Vedrà hovers", "x")
    assert pair_key('"""But it\'s for us."""', "y") == pair_key("But it's for us.", "y")
    # Order matters: (premise, hypothesis) is not (hypothesis, premise); sides do not bleed into each other.
    assert pair_key("a b", "c") != pair_key("c", "a b")
    assert pair_key("ab", "c") != pair_key("a", "bc")


def test_remove_eval_overlap_by_text_and_by_pair_id():
    index = EvalIndex()
    index.add("mnli_dev_matched", [rec("The new rights are nice enough", "Everyone likes them", pair_id="mnli:1n"),
                                   rec("Other premise", "Other hypothesis", pair_id="mnli:2c")])
    train = [rec("the new rights are NICE enough.", "Everyone likes them!"),   # same text -> removed
             rec("garbled copy", "of pair two", pair_id="mnli:2c"),          # same id -> removed
             rec("Other premise", "A different hypothesis"),                 # same premise only -> kept
             rec("Fresh", "pair", pair_id="mnli:3e")]                        # kept
    kept, removed = remove_eval_overlap(train, index)
    assert removed == 2
    assert [r.premise for r in kept] == ["Other premise", "Fresh"]
    assert index.loaded == {"mnli_dev_matched": 2}


def test_dedup_pairs_keeps_the_first_copy():
    kept, n = dedup_pairs([rec("A b.", "C", 0, "x"), rec("a b", "c.", 2, "y"), rec("a b", "d", 1, "x")])
    assert n == 1 and [r.source for r in kept] == ["x", "x"] and kept[0].label == 0


def test_taxinli_mnli_dev_pairs_are_removed_and_counted(tmp_path, capsys):
    root = write_nli_data(tmp_path)
    data = ExplainerData(sources=[SourceSpec("taxinli"), SourceSpec("snli_dev")])
    records, info = load_nli_records(data, root, seed=0)
    tax = [r for r in records if r.source == "taxinli"]
    # Of the 4 TaxiNLI rows, the exact-text MNLI dev copy and the mojibake copy (matched by pairID or by the
    # ASCII key) are removed; the two MNLI-train rows stay.
    assert sorted(r.meta["pair_id"] for r in tax) == ["mnli:1111e", "mnli:2222c"]
    assert info["sources"]["taxinli"]["eval_overlap"] == 2
    assert info["eval_overlap_removed"] == 2
    assert "removed 2 training pairs that appear in an evaluation set (taxinli: 2)" in capsys.readouterr().out
    assert MNLI_DEV_OVERLAP[0] not in {r.premise for r in records}
    assert not any(MNLI_DEV_ID_ONLY[1] == r.hypothesis for r in records)


def test_id_match_alone_removes_a_pair(tmp_path):
    root = write_nli_data(tmp_path)
    path = root / "nli/taxinli/taxinli10k.tsv"
    text = path.read_text(encoding="utf-8").replace("The beach is dirty sand.", "Completely rewritten hypothesis.")
    path.write_text(text, encoding="utf-8")
    records, info = load_nli_records(ExplainerData(sources=[SourceSpec("taxinli")]), root, seed=0)
    assert info["sources"]["taxinli"]["eval_overlap"] == 2
    assert "mnli:77777c" not in {r.meta["pair_id"] for r in records}


def test_grounding_test_sets_are_kept_out_of_grounding_training(tmp_path):
    root = write_nli_data(tmp_path)
    # Put one BEGIN test pair into the BEGIN dev file: it must be dropped from training.
    dev = root / "begin_dialogue_attribution/wow/begin_dev_wow.tsv"
    dev.write_text(dev.read_text() + "ctrl\twow\tBees make honey.\tBees?\tBees make honey.\tFully attributable\n")
    records, info = load_nli_records(ExplainerData(sources=[SourceSpec("begin")]), root, seed=0)
    assert info["sources"]["begin"]["eval_overlap"] == 1
    assert len(records) == 3


def test_evaluation_sets_cannot_be_training_sources(tmp_path):
    root = write_nli_data(tmp_path)
    with pytest.raises(DataError, match="'snli_test' is an evaluation set"):
        load_nli_records(ExplainerData(sources=[SourceSpec("snli_test")]), root, seed=0)
    with pytest.raises(DataError, match="is a prompt dataset, not an NLI dataset"):
        load_nli_records(ExplainerData(sources=[SourceSpec("simpleqa")]), root, seed=0)


def test_core_evaluation_set_must_load(tmp_path):
    root = write_nli_data(tmp_path)
    (root / "nli/anli_dev_annotated/ANLI_analysis_r2_dev.csv").unlink()
    with pytest.raises(DataError, match="evaluation set anli_r2_dev could not be loaded"):
        load_eval_index(["anli_r2_dev"], root)
    (root / "summedits/summedits_news.json").unlink()
    index = load_eval_index(["summedits_test", "snli_test"], root)  # non-core: skipped with the reason
    assert "summedits_test" in index.skipped and index.loaded == {"snli_test": 3}


def test_config_refuses_dropping_a_core_evaluation_set():
    with pytest.raises(ConfigError, match="data.eval_sets: 'snli_test' is part of the evaluation protocol"):
        from_dict(ExplainerConfig, {"data": {"sources": [{"name": "sick"}],
                                             "eval_sets": ["mnli_dev_matched", "mnli_dev_mismatched",
                                                           "anli_r1_dev", "anli_r2_dev", "anli_r3_dev"]}})
    with pytest.raises(ConfigError, match="data.two_way"):
        from_dict(ExplainerConfig, {"data": {"sources": [{"name": "sick"}], "two_way": "drop"}})


def test_split_keeps_two_way_sources_in_train_and_limits_apply_after_filtering(tmp_path):
    root = write_nli_data(tmp_path)
    data = ExplainerData(sources=[SourceSpec("snli_dev"), SourceSpec("joci"), SourceSpec("rte"),
                                  SourceSpec("taxinli", limit=1)])
    records, info = load_nli_records(data, root, seed=0)
    assert info["sources"]["taxinli"]["kept"] == 1  # the limit counts pairs left after the eval filter
    train, dev, test = split_records(records, data.split, seed=0)
    assert {r.source for r in dev + test} <= {"snli_dev", "joci", "taxinli"}
    assert all(r.label != NOT_ENTAILMENT for r in dev + test)
    assert sum(r.source == "rte" for r in train) == 2  # both rows of the two-way source, entailment included
    assert len(train) + len(dev) + len(test) == len(records)


def test_two_way_neutral_rule_maps_the_marker(tmp_path):
    root = write_nli_data(tmp_path)
    records, _ = load_nli_records(ExplainerData(sources=[SourceSpec("rte")], two_way="neutral"), root, seed=0)
    assert [r.label for r in records] == [0, 1]
