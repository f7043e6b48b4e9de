"""Data layer: prompt adapters on fixture files, missing files, dedup, splits, count tables."""

import json

import pytest

from training.data.base import DataError, get_adapter
from training.data.prep import check_classes, count_table, dedup, length_filter, stratified_split
from training.data.records import PromptRecord


@pytest.fixture()
def fixture_dir(tmp_path):
    (tmp_path / "nq_open").mkdir()
    lines = [{"question": "who wrote hamlet", "answer": ["Shakespeare"]},
             {"question": "Who  wrote HAMLET", "answer": ["x"]},
             {"question": "capital of peru", "answer": ["Lima"]}]
    for name in ("NQ-open.dev.jsonl", "NQ-open.efficientqa.dev.1.1.jsonl", "NQ-open.efficientqa.test.1.1.jsonl"):
        (tmp_path / "nq_open" / name).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (tmp_path / "writingprompts_subset/gpt-4").mkdir(parents=True)
    header = "row_id,prompt,story,completion\n"
    (tmp_path / "writingprompts_subset/gpt-4/train_orig.csv").write_text(
        header + '1,"[ WP ] A dragon opens a bakery , and it \'s great .",s,c\n')
    (tmp_path / "writingprompts_subset/gpt-4/test.csv").write_text(header + '2,"[ WP ] The moon quits .",s,c\n')
    (tmp_path / "chat_eval_prompts").mkdir()
    rows = [{"idx": 1, "Skill": "Writting", "Instruction": "Write a poem about rain."},
            {"idx": 2, "Skill": "History", "Instruction": "When did Rome fall?"}]
    (tmp_path / "chat_eval_prompts/WizardLM_testset.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "alpaca").mkdir()
    (tmp_path / "alpaca/alpaca_en_demo_1k.json").write_text(json.dumps([
        {"instruction": "Write a haiku about autumn.", "input": "", "output": "..."},
        {"instruction": "What is the capital of France?", "input": "", "output": "Paris"},
        {"instruction": "Rewrite this sentence.", "input": "The cat sat.", "output": "..."},
    ]))
    return tmp_path


def test_prompt_adapters_read_local_layout(fixture_dir):
    nq = get_adapter("nq_open").load(fixture_dir)
    assert len(nq) == 9 and all(isinstance(r, PromptRecord) and r.label == 1 and r.source == "nq_open" for r in nq)
    wp = get_adapter("writingprompts").load(fixture_dir)
    assert [r.text for r in wp] == ["A dragon opens a bakery, and it's great.", "The moon quits."]
    assert all(r.label == 0 for r in wp)


def test_written_rules_select_rows(fixture_dir):
    wiz = get_adapter("wizardlm_nonfactual").load(fixture_dir)
    assert [r.text for r in wiz] == ["Write a poem about rain."]
    alp = get_adapter("alpaca").load(fixture_dir)
    assert [r.text for r in alp] == ["Write a haiku about autumn.", "Rewrite this sentence.\n\nThe cat sat."]


def test_missing_files_are_listed(tmp_path):
    with pytest.raises(DataError) as exc:
        get_adapter("nq_open").load(tmp_path)
    msg = str(exc.value)
    assert "NQ-open.dev.jsonl" in msg and "NQ-open.efficientqa.test.1.1.jsonl" in msg
    with pytest.raises(DataError, match="does not exist.*NQ-open.dev.jsonl"):
        get_adapter("nq_open").load(tmp_path / "nowhere")


def test_unknown_dataset_and_bad_json(fixture_dir):
    with pytest.raises(DataError, match="unknown dataset 'nope'"):
        get_adapter("nope")
    (fixture_dir / "nq_open/NQ-open.dev.jsonl").write_text('{"question": "a"}\n{oops\n')
    with pytest.raises(DataError, match=r"NQ-open.dev.jsonl:2: invalid JSON"):
        get_adapter("nq_open").load(fixture_dir)


def test_hub_only_adapter_without_datasets_access_fails_clearly(monkeypatch):
    from training.data import base

    def boom(*a, **k):
        raise DataError("could not load 'rajpurkar/squad' from the Hugging Face Hub: offline")
    monkeypatch.setattr(base, "hub_rows", boom)
    from training.data import prompts
    monkeypatch.setattr(prompts, "hub_rows", boom)
    with pytest.raises(DataError, match="Hugging Face Hub"):
        get_adapter("squad").load(None)


def test_dedup_and_length_filter():
    recs = [PromptRecord("Who wrote Hamlet?"), PromptRecord("who  wrote hamlet?"), PromptRecord("hi")]
    kept, removed = dedup(recs, key=lambda r: r.text)
    assert removed == 1 and [r.text for r in kept] == ["Who wrote Hamlet?", "hi"]
    kept, removed = length_filter(kept, lambda r: r.text, min_chars=3)
    assert removed == 1 and len(kept) == 1


def _records(n_per=20):
    return [PromptRecord(f"{src} {lab} {i}", lab, src)
            for src in ("a", "b") for lab in (0, 1) for i in range(n_per)]


def test_stratified_split_is_deterministic_and_stratified():
    recs = _records()
    s1 = stratified_split(recs, (0.8, 0.1, 0.1), seed=7)
    s2 = stratified_split(list(reversed(recs)), (0.8, 0.1, 0.1), seed=7)
    assert [[r.text for r in part] for part in s1] == [[r.text for r in part] for part in s2]
    train, dev, test = s1
    assert (len(train), len(dev), len(test)) == (64, 8, 8)
    for part in (dev, test):  # every (source, label) stratum is present in each split
        assert {(r.source, r.label) for r in part} == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    other = stratified_split(recs, (0.8, 0.1, 0.1), seed=8)[2]
    assert {r.text for r in other} != {r.text for r in test}


def test_count_table_and_empty_class():
    train, dev, test = stratified_split(_records(10), (0.8, 0.1, 0.1), seed=1)
    table = count_table({"train": train, "dev": dev, "test": test}, ["NEG", "POS"])
    assert "source" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.startswith("a ") and "POS" in line)
    assert row.split()[-1] == "10"
    assert table.splitlines()[-1].split()[-1] == "40"
    with pytest.raises(DataError, match=r"class POS has no examples after filtering \(NEG=3, POS=0\)"):
        check_classes([PromptRecord("x", 0)] * 3, ["NEG", "POS"], "sentinel data")


def test_real_prompt_sources_load(data_dir):
    for name in ("nq_open", "webquestions", "simpleqa", "halueval2", "writingprompts", "mbppplus",
                 "self_instruct", "wizardlm_nonfactual", "truthfulqa"):
        rows = get_adapter(name).load(data_dir)
        assert len(rows) > 50, name
        assert all(isinstance(r, PromptRecord) and isinstance(r.text, str) and r.text and r.label in (0, 1)
                   for r in rows), name


def test_registry_imports_every_module_of_the_data_package():
    """Adapters register on import and no list names the modules: a new module is found by itself."""
    import pkgutil
    import sys

    import training.data

    get_adapter("nq_open")
    modules = {m.name for m in pkgutil.iter_modules(training.data.__path__)}
    assert {"prompts", "spans", "nli", "curriculum"} <= modules
    assert all(f"training.data.{name}" in sys.modules for name in modules)
