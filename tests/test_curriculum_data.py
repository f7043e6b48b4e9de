"""Curriculum NLI, CAD and WiCE adapters (tiny fixture zips / files), the mixture config (groups, scale, MNLI
dev-mismatched as a source) and the evaluation-overlap check on the new sources."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from nli_fixtures import write_nli_data, write_task_zip

from inference.config import load_config
from training.config import SourceSpec
from training.data.base import DataError, get_adapter
from training.data.curriculum import (
    CONTROL_PREMISE_WORDS,
    THREE_WAY_TASKS,
    TWO_WAY_TASKS,
    is_junk,
    read_task,
    window_premise,
)
from training.data.nli import EVAL_SETS, NOT_ENTAILMENT
from training.data.records import PairRecord
from training.explainer import (
    ExplainerConfig,
    ExplainerData,
    ExplainerSource,
    load_nli_records,
    split_records,
)

E, N, C, X = 0, 1, 2, NOT_ENTAILMENT
REPO = Path(__file__).resolve().parents[1]


def labels(name: str, root: Path) -> list[int]:
    return [r.label for r in get_adapter(name).load(root)]


# ---- Curriculum adapter --------------------------------------------------------------------------------------

def test_every_task_is_registered_three_way_or_two_way():
    assert len(THREE_WAY_TASKS) == 7 and len(TWO_WAY_TASKS) == 29 and "control" in THREE_WAY_TASKS
    for task in THREE_WAY_TASKS + TWO_WAY_TASKS:
        assert get_adapter(f"curriculum_{task}").kind == "nli"
    for task in THREE_WAY_TASKS:
        get_adapter(f"curriculum_{task}_val")
    with pytest.raises(DataError, match="unknown dataset 'curriculum_monotonicity_infer_val'"):
        get_adapter("curriculum_monotonicity_infer_val")


def test_three_way_and_two_way_label_mappings(tmp_path):
    root = write_nli_data(tmp_path)
    assert labels("curriculum_boolean", root) == [E, N, C]
    assert labels("curriculum_logiqa", root) == [E, X]   # entailed / not-entailed -> two-way loss mask
    rec = get_adapter("curriculum_boolean").load(root)[0]
    assert isinstance(rec, PairRecord)
    assert rec.source == "curriculum_boolean" and rec.meta["domain"] == "boolean"
    assert rec.meta["pair_id"] == "curriculum:boolean:train:0"


def test_monotonicity_infer_quirk_neutral_is_not_entailed_and_val_is_never_read(tmp_path):
    root = write_nli_data(tmp_path)
    # Train labels are written entailment/neutral, but the task is two-way: neutral -> NOT_ENTAILMENT.
    assert labels("curriculum_monotonicity_infer", root) == [E, X, X]
    with pytest.raises(DataError, match="monotonicity_infer/val.jsonl is never read: it is mostly MED"):
        list(read_task(root, "monotonicity_infer", "val"))
    # A two-way label in a three-way task is an error naming the zip member and line.
    write_task_zip(tmp_path, "negation", [("a b", "c", "entailment"), ("a b", "d", "not-entailed")])
    with pytest.raises(DataError, match=r"curriculum_negation: .*negation\.zip:negation/train\.jsonl:2: "
                                        r"unknown label 'not-entailed'"):
        get_adapter("curriculum_negation").load(tmp_path)


def test_macos_junk_entries_in_the_zips_are_skipped(tmp_path):
    path = write_task_zip(tmp_path, "boolean", [("p", "h", "entailment")])
    names = zipfile.ZipFile(path).namelist()
    assert "__MACOSX/boolean/._train.jsonl" in names and "boolean/._train.jsonl" in names
    assert [n for n in names if not is_junk(n)] == ["boolean/train.jsonl", "boolean/val.jsonl"]
    assert labels("curriculum_boolean", tmp_path) == [E]  # the binary ._train.jsonl copies were not parsed
    # A zip whose only train.jsonl is junk is reported with what it holds.
    bad = tmp_path / "curriculum_nli" / "counting.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("__MACOSX/counting/._train.jsonl", b"\x00\x05")
    with pytest.raises(DataError, match=r"expected exactly one counting/train\.jsonl .*found none"):
        get_adapter("curriculum_counting").load(tmp_path)


def test_control_premises_are_windowed_to_the_sentences_closest_to_the_hypothesis(tmp_path):
    filler = [f"Sentence number {i} talks about weather and gardens in general terms." for i in range(40)]
    evidence = "The Western workforce grew six-fold between 1900 and 1999."
    premise = " ".join(filler[:25] + [evidence] + filler[25:])
    hyp = "The workforce grew six-fold."
    out = window_premise(premise, hyp, CONTROL_PREMISE_WORDS)
    assert len(out.split()) <= CONTROL_PREMISE_WORDS < len(premise.split())
    assert evidence in out
    assert out.index(filler[0]) < out.index(evidence)  # document order is kept
    assert window_premise("Short premise.", hyp, CONTROL_PREMISE_WORDS) == "Short premise."
    write_task_zip(tmp_path, "control", [(premise, hyp, "entailment")])
    rec = get_adapter("curriculum_control").load(tmp_path)[0]
    assert rec.premise == out and rec.label == E


# ---- CAD and WiCE --------------------------------------------------------------------------------------------

def test_cad_is_three_way_train_only_with_its_original_item(tmp_path):
    root = write_nli_data(tmp_path)
    rows = get_adapter("cad_snli").load(root)
    assert [r.label for r in rows] == [E, N, C, N, C]
    assert [r.meta["item"] for r in rows] == ["cad:0"] * 5 and all(r.meta["train_only"] for r in rows)
    train, dev, test = split_records([r.replace(source="cad_snli") for r in rows], ExplainerData(
        sources=[SourceSpec("cad_snli")]).split, seed=0)
    assert len(train) == 5 and not dev and not test


def test_wice_claims_against_the_cited_page(tmp_path):
    root = write_nli_data(tmp_path)
    rows = get_adapter("wice_test").load(root)
    assert [r.label for r in rows] == [E, X, X]
    assert rows[0].premise == "The tower was built 1887-1889.\nIt is 330 meters tall."  # meta line dropped
    assert EVAL_SETS["wice_test"] == "binary" and EVAL_SETS["med"] == "binary"


# ---- the mixture -------------------------------------------------------------------------------------------

def test_planted_evaluation_pairs_in_new_sources_are_removed_and_counted(tmp_path, capsys):
    root = write_nli_data(tmp_path)
    data = ExplainerData(sources=[ExplainerSource("curriculum_monotonicity_infer"), ExplainerSource("cad_snli"),
                                  ExplainerSource("curriculum_boolean")])
    records, info = load_nli_records(data, root, seed=0)
    # The MED pair planted in monotonicity_infer train and the SNLI test pair planted in CAD are removed.
    assert info["sources"]["curriculum_monotonicity_infer"]["eval_overlap"] == 1
    assert info["sources"]["cad_snli"]["eval_overlap"] == 1
    assert info["eval_overlap_removed"] == 2
    assert "No delegate finished the report on time." not in {r.premise for r in records}
    assert {"med", "wice_test", "snli_test"} <= set(info["eval_sets"])
    out = capsys.readouterr().out
    assert "removed 2 training pairs that appear in an evaluation set (curriculum_monotonicity_infer: 1, " \
           "cad_snli: 1)" in out
    assert "training mixture" in out and "curriculum_boolean" in out


def test_med_is_an_evaluation_set_now(tmp_path):
    root = write_nli_data(tmp_path)
    with pytest.raises(DataError, match="'med' is an evaluation set"):
        load_nli_records(ExplainerData(sources=[SourceSpec("med")]), root, seed=0)


def test_mnli_mismatched_as_a_source_leaves_the_index_only_while_it_is_trained_on(tmp_path, capsys):
    root = write_nli_data(tmp_path)
    data = ExplainerData(sources=[ExplainerSource("mnli_dev_mismatched", group="mnli_mm"),
                                  ExplainerSource("curriculum_boolean", group="curriculum3")])
    _, info = load_nli_records(data, root, seed=0)
    assert info["trained_on_eval_sets"] == ["mnli_dev_mismatched"]
    assert "mnli_dev_mismatched" not in info["eval_sets"] and info["sources"]["mnli_dev_mismatched"]["kept"] == 3
    assert "report the others (e.g. MNLI dev-matched only)" in capsys.readouterr().out
    # Excluding its group puts it back into the evaluation index.
    data.exclude_groups = ["mnli_mm"]
    _, info = load_nli_records(data, root, seed=0)
    assert "mnli_dev_mismatched" in info["eval_sets"] and list(info["sources"]) == ["curriculum_boolean"]
    assert info["trained_on_eval_sets"] == []


def test_scale_shrinks_every_source_and_limits_stay_weights(tmp_path):
    root = write_nli_data(tmp_path)
    data = ExplainerData(sources=[ExplainerSource("snli_dev", limit=6), ExplainerSource("curriculum_boolean")],
                         scale=0.5)
    _, info = load_nli_records(data, root, seed=0)
    assert info["sources"]["snli_dev"]["kept"] == 3 and info["sources"]["curriculum_boolean"]["kept"] == 2


def test_offline_recipe_config_loads_with_groups_and_ablation_overrides():
    cfg = load_config(ExplainerConfig, REPO / "configs/explainer.offline.yaml")
    groups = {s.group for s in cfg.data.sources}
    assert groups == {"base", "mnli_mm", "curriculum3", "curriculum2", "cad", "number_swap", "number_swap_neutral"}
    # the kept mixture: everything but the two-way curriculum and the (measured, not adopted) number swaps
    assert {s.group for s in cfg.data.active_sources()} == {"base", "mnli_mm", "curriculum3", "cad"}
    assert cfg.data.effective_eval_sets() == [e for e in EVAL_SETS if e != "mnli_dev_mismatched"]
    ablation = load_config(ExplainerConfig, REPO / "configs/explainer.offline.yaml",
                           ["data.exclude_groups=[mnli_mm, curriculum3, curriculum2, cad, number_swap, number_swap_neutral]"])
    assert {s.group for s in ablation.data.active_sources()} == {"base"}
    assert "mnli_dev_mismatched" in ablation.data.effective_eval_sets()
    assert not any(s.name == "curriculum_monotonicity_infer_val" for s in cfg.data.sources)


# ---- real data (skips without it) -------------------------------------------------------------------------------

@pytest.mark.data
def test_real_curriculum_zips(data_dir):
    if not (data_dir / "curriculum_nli").is_dir():
        pytest.skip("curriculum_nli not in the data dir")
    assert len(labels("curriculum_boolean", data_dir)) == 3000
    mono = labels("curriculum_monotonicity_infer", data_dir)
    assert len(mono) == 35891 and set(mono) == {E, X}
    control = get_adapter("curriculum_control").load(data_dir)
    assert len(control) == 6719 and max(len(r.premise.split()) for r in control) <= CONTROL_PREMISE_WORDS
    assert len(get_adapter("cad_snli").load(data_dir)) == 8330
    assert len(get_adapter("wice_test").load(data_dir)) == 358
