"""The Detector recipe and evaluator end to end through the real CLIs, on tiny models and fixture data."""

import csv
import json

import pytest
import yaml

from training.cli import run_cli

FACTS = [
    ("The Eiffel Tower in Paris was completed in March 1889. It is 330 metres tall.", "How tall is the tower?",
     "330 metres", "The Eiffel Tower is 500 metres tall."),
    ("Marie Curie was born in Warsaw in 1867. She won the Nobel Prize in Physics in 1903.", "Where was Curie born?",
     "Warsaw", "Marie Curie was born in Paris."),
    ("The Amazon River flows through Brazil, Peru and Colombia into the Atlantic Ocean.", "Where does it flow?",
     "The Atlantic Ocean", "It flows into the Pacific Ocean."),
]


def _fixture_data(root):
    (root / "halueval").mkdir(parents=True)
    rows = []
    for i in range(16):
        ctx, q, right, wrong = FACTS[i % 3]
        rows.append(json.dumps({"knowledge": f"{ctx} Record {i}.", "question": q, "right_answer": right,
                                "hallucinated_answer": wrong}))
    (root / "halueval/qa_data_first1000.json").write_text("\n".join(rows) + "\n")
    (root / "dolly15k_instructions_restyled").mkdir()
    with open(root / "dolly15k_instructions_restyled/output1to1000.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["index", "instruction", "context", "output"])
        for i in range(16):
            ctx, q, _, _ = FACTS[i % 3]
            w.writerow([i, q, f"{ctx} This is note number {i} about it.", "a rewritten answer"])
        w.writerow([99, "No context here", "", "x"])
    sub = root / "ragtruth_test_subset"
    sub.mkdir()
    ans = "The tower is 500 metres tall and was built in 1889."
    gpt = [{"id": 1, "source_id": 10, "model": "m", "task_type": "QA", "split": "test", "response": ans,
            "source_info": {"question": "How tall?", "passages": FACTS[0][0]},
            "labels": [{"start": 13, "end": 23, "text": "500 metres", "label_type": "Evident Conflict"}]},
           {"id": 2, "source_id": 11, "model": "m", "task_type": "Summary", "split": "test",
            "response": "Curie was born in Warsaw.", "source_info": FACTS[1][0], "labels": []}]
    bal = [{"id": "3", "source_id": "12", "model": "m", "task_type": "Data2txt", "split": "test",
            "response": "Cafe X is open on Mondays.", "reference": {"name": "Cafe X", "hours": {"Monday": "8-14"}},
            "labels": []},
           {"id": "4", "source_id": "13", "model": "m", "task_type": "QA", "split": "test", "response": "Yes.",
            "reference": "", "question": "Is it?", "labels": []}]
    (sub / "gpt_baseline_predictions.jsonl").write_text("\n".join(json.dumps(r) for r in gpt) + "\n")
    (sub / "test_balanced.jsonl").write_text("\n".join(json.dumps(r) for r in bal) + "\n")
    return root


def _config(tmp_path, base_model, **data_overrides):
    cfg = {
        "run": {"output_dir": str(tmp_path / "run"), "seed": 3},
        "model": {"base_model": base_model, "max_length": 64, "lora": {"enabled": False}},
        "train": {"learning_rate": 1e-3, "epochs": 1, "batch_size": 4, "eval_batch_size": 8, "logging_steps": 1,
                  "metric_for_best_model": "token_f1", "class_weighted": True},
        "data": {"sources": [{"name": "halueval_qa_spans"}],
                 "synthetic": {"sources": [{"name": "dolly_extractive"}], "faithful_fraction": 0.3},
                 "eval_sources": [{"name": "ragtruth_test_subset"}],
                 "split": {"dev": 0.2, "test": 0.2}, **data_overrides},
        "eval": {"threshold": 0.5},
    }
    path = tmp_path / "detector.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_tiny_detector_trains_and_evaluates_end_to_end(tmp_path, arch, tiny_bert_dir, tiny_modernbert_dir, capsys):
    from transformers import AutoModelForTokenClassification

    from eval.detector import main as eval_main
    from training.detector import main

    base = tiny_bert_dir if arch == "bert" else tiny_modernbert_dir
    data = _fixture_data(tmp_path / "data")
    cfg = _config(tmp_path, base)
    assert run_cli(main, ["--config", str(cfg), "--data-dir", str(data), "--max-steps", "3"]) == 0
    out = tmp_path / "run"
    printed = capsys.readouterr().out
    assert "halueval_qa_spans" in printed and "synthetic:dolly_extractive" in printed  # the mixture table
    for name in ("config.yaml", "model.safetensors", "tokenizer.json", "label_map.json", "metrics.json",
                 "data_counts.txt", "data_report.json", "train_log.jsonl", "train.log", "test.jsonl",
                 "detector.json"):
        assert (out / name).exists(), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_steps"] == 3 and "eval_token_f1" in metrics["dev"]
    # training inputs for training.export's int8 choice, never test records (the check reads test.jsonl)
    def inputs(name):
        rows = [json.loads(line) for line in (out / name).read_text().splitlines()]
        return {(r["context"], r.get("question"), r["answer"]) for r in rows}
    assert inputs("parity.jsonl") and not inputs("parity.jsonl") & inputs("test.jsonl")
    assert set(metrics["test"]["levels"]) == {"example", "span", "token"}
    ev = metrics["eval"]["ragtruth_test_subset"]
    assert ev["n_scored"] == 3  # the QA row without passages is reported, not scored
    assert ev["data_report"]["ragtruth_test_subset"]["problems"]["missing context"]["ids"] == ["ragtruth-4"]
    assert "training windows (answer_overlap, max_length=64)" in (out / "data_counts.txt").read_text()
    detector_json = json.loads((out / "detector.json").read_text())
    assert detector_json["calibration"]["window_aggregation"] in ("max", "min")  # fitted on the dev split
    assert metrics["calibration"] == detector_json["calibration"]
    assert json.loads((out / "label_map.json").read_text())["labels"] == ["SUPPORTED", "HALLUCINATED"]
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert model.config.id2label == {0: "SUPPORTED", 1: "HALLUCINATED"}

    ev_dir = tmp_path / "eval"
    assert run_cli(eval_main, ["--model", str(out), "--data", "ragtruth_test_subset", "--data-dir", str(data),
                               "--out", str(ev_dir), "--threshold", "0.4"]) == 0
    res = json.loads((ev_dir / "metrics.json").read_text())
    assert res["threshold"] == 0.4 and res["backend"] == "torch" and res["n_scored"] == 3
    assert set(res["levels"]["example"]["by_task_type"]) == {"QA", "Summary", "Data2txt"}
    flag_all = res["baselines"]["flag_everything"]["example"]["overall"]
    assert flag_all["recall"] == 1.0 and flag_all["precision"] == pytest.approx(1 / 3)
    assert len(res["sweep"]) == 26 and set(res["auroc"]) >= {"overall", "QA", "Summary", "Data2txt"}
    report = (ev_dir / "report.md").read_text()
    assert "flag everything" in report and "lexical" in report and "LettuceDetect" in report
    assert (ev_dir / "pr_curve.png").stat().st_size > 1000
    assert len((ev_dir / "predictions.jsonl").read_text().splitlines()) == 3
    # the run's own held-out split, re-scored from its JSONL
    assert run_cli(eval_main, ["--model", str(out), "--data", str(out / "test.jsonl"), "--out",
                               str(tmp_path / "eval2")]) == 0
    if arch != "bert":
        return
    # --recalibrate: same dev split, new calibration written, the weights untouched
    weights = (out / "model.safetensors").read_bytes()
    assert run_cli(main, ["--config", str(out / "config.yaml"), "--data-dir", str(data), "--recalibrate"]) == 0
    assert (out / "model.safetensors").read_bytes() == weights
    metrics = json.loads((out / "metrics.json").read_text())
    assert "recalibrated" in metrics and metrics["calibration"] == json.loads((out / "detector.json").read_text())[
        "calibration"]
    assert run_cli(main, ["--config", str(out / "config.yaml"), "--data-dir", str(data), "--recalibrate",
                          "--set", "run.seed=4"]) == 2  # another split: refused, nothing rewritten
    assert "differs from the config" in capsys.readouterr().err
    # the calibration section is what --recalibrate redoes: it may differ, and the run's config.yaml follows it
    assert run_cli(main, ["--config", str(out / "config.yaml"), "--data-dir", str(data), "--recalibrate",
                          "--set", "calibration.smoothing=[0, 3]"]) == 0
    assert yaml.safe_load((out / "config.yaml").read_text())["calibration"]["smoothing"] == [0, 3]
    assert json.loads((out / "detector.json").read_text())["calibration"]["smoothing"] in (0, 3)


@pytest.mark.slow
def test_detector_resume_continues_from_last_checkpoint(tmp_path, tiny_bert_dir):
    from training.detector import main

    data = _fixture_data(tmp_path / "data")
    cfg = _config(tmp_path, tiny_bert_dir, eval_sources=[])
    common = ["--config", str(cfg), "--data-dir", str(data), "--set", "train.eval_every=steps",
              "--set", "train.eval_steps=2"]
    assert run_cli(main, common + ["--max-steps", "2"]) == 0
    assert (tmp_path / "run/checkpoints/checkpoint-2").is_dir()
    assert run_cli(main, common + ["--max-steps", "5"]) == 0
    log = (tmp_path / "run/train.log").read_text()
    assert "resuming from" in log and "checkpoint-2" in log
    assert json.loads((tmp_path / "run/metrics.json").read_text())["global_steps"] == 5
    # the last step (not a multiple of eval_steps) is evaluated too, so its weights can be selected
    state = json.loads((tmp_path / "run/checkpoints/checkpoint-5/trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "eval_token_f1" in e] == [2, 4, 5]


def test_the_full_ragtruth_test_split_is_refused_for_training(tmp_path, capsys):
    from training.detector import main

    data = _fixture_data(tmp_path / "data")
    cfg = _config(tmp_path, "offline:minilm", sources=[{"name": "ragtruth_test"}])
    assert run_cli(main, ["--config", str(cfg), "--data-dir", str(data)]) == 2
    assert "evaluation-only" in capsys.readouterr().err


def test_config_errors_name_the_key(tmp_path, capsys):
    from training.detector import main

    cfg = _config(tmp_path, "offline:minilm")
    assert run_cli(main, ["--config", str(cfg), "--set", "train.metric_for_best_model=macro_f1"]) == 2
    assert "train.metric_for_best_model" in capsys.readouterr().err
    assert run_cli(main, ["--config", str(cfg), "--set", "data.synthetic.transforms=[warp]"]) == 2
    assert "synthetic.transforms" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["detector.yaml", "detector.offline.yaml", "detector.demo.yaml"])
def test_shipped_configs_load(name):
    from pathlib import Path

    from inference.config import load_config
    from training.detector import DetectorConfig

    cfg = load_config(DetectorConfig, Path(__file__).resolve().parents[1] / "configs" / name)
    assert cfg.train.metric_for_best_model == "token_f1"
    if name == "detector.yaml":
        assert (cfg.model.base_model, cfg.model.max_length, cfg.train.learning_rate, cfg.train.weight_decay,
                cfg.train.batch_size, cfg.train.epochs) == ("answerdotai/ModernBERT-base", 4096, 1e-5, 0.01, 8, 6)
        assert [s.name for s in cfg.data.sources] == ["ragtruth_train"]
    else:
        assert cfg.model.base_model == "offline:minilm"


def test_grounding_answer_types_train_save_and_reach_the_runtime(tmp_path, tiny_bert_dir, tiny_modernbert_dir,
                                                               capsys):
    """data.answer_types: grounding: the answer tokens of words the context lacks get types 2 / 3 in training,
    the model gets four token types (the new ones copies of type 1 at the start), detector.json says so, and
    the runtime types the answers the same way before the model call."""
    from transformers import AutoModelForTokenClassification

    from inference.detect import HaluGate
    from inference.runners import Features
    from training.detector import main

    data = _fixture_data(tmp_path / "data")
    cfg = _config(tmp_path, tiny_bert_dir, eval_sources=[], answer_types="grounding")
    assert run_cli(main, ["--config", str(cfg), "--data-dir", str(data), "--max-steps", "2"]) == 0
    out = tmp_path / "run"
    assert "answer tokens typed as unsupported" in (out / "train.log").read_text()
    assert json.loads((out / "detector.json").read_text())["answer_types"] == "grounding"
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert model.config.type_vocab_size == 4

    gate = HaluGate.from_dirs(detector=str(out), backend="torch")
    assert gate.detector_answer_types == "grounding"
    seen = []
    runner = gate.runners["detector"]
    original = runner.logits

    def spy(feats: list[Features]):
        seen.extend(feats)
        return original(feats)

    runner.logits = spy
    context = "The Eiffel Tower in Paris was completed in March 1889. It is 330 metres tall."
    answer = "The Eiffel Tower is 500 metres tall and sits in Paris, near Lyon."
    gate.detect(context=context, question="How tall is it?", answer=answer)
    (feat,) = seen
    tokens = runner.tokenizer.encode(answer, add_special_tokens=False)
    types = feat.token_type_ids[-len(tokens.ids) - 1:-1]

    def typed(word):  # the types of the tokens of `word` in the answer
        start = answer.index(word)
        return {t for (s, e), t in zip(tokens.offsets, types) if s < start + len(word) and start < e}

    assert typed("500") == typed("metres") == typed("Lyon") == {3}  # a number with its unit, a name
    assert typed("sits") == {2} and typed("Eiffel") == typed("Paris") == typed("tall") == {1}
    assert feat.token_type_ids[-1] == 1  # the answer's closing separator keeps the segment's type

    # the export's parity inputs carry the same types, so the check reads the embeddings of types 2 / 3
    from training.export import encode_batches, export
    from training.models import load_tokenizer

    (batch,) = encode_batches(load_tokenizer(str(out)), [(f"{context}\nHow tall is it?", answer)], 128,
                              answer_types="grounding")
    row = batch["token_type_ids"][0][batch["attention_mask"][0] == 1]
    assert row[row >= 1][:-1].tolist() == list(types)  # the runtime's types, the closing separator aside
    report = export(out, tmp_path / "onnx", samples=16, optimize=False)
    assert report["passed"] and report["inputs"]["answer_types"] == "grounding"
    assert report["inputs"]["typed_answer_tokens"] > 0

    # an encoder without token types refuses the option at once, naming it
    cfg = _config(tmp_path, tiny_modernbert_dir, eval_sources=[], answer_types="grounding")
    assert run_cli(main, ["--config", str(cfg), "--data-dir", str(data), "--max-steps", "1",
                          "--output-dir", str(tmp_path / "modern")]) == 2
    assert "data.answer_types" in capsys.readouterr().err


def test_dev_metrics_read_answer_tokens_only_and_rank_without_a_threshold():
    """token_metrics: the F1s at the argmax and token_ap (threshold-free, train.metric_for_best_model: token_ap)
    over the labelled answer tokens only; context positions (-100) never count."""
    import numpy as np

    from training.detector import token_metrics

    labels = np.array([[-100, 0, 0, 1, 1], [-100, -100, 0, 0, 0]])
    # P(HALLUCINATED) ranks both hallucinated tokens first, but only one crosses the argmax; the context position
    # holds the highest score of all, and must not count
    p1 = np.array([[0.99, 0.2, 0.1, 0.9, 0.4], [0.99, 0.99, 0.3, 0.05, 0.2]])
    logits = np.log(np.stack([1 - p1, p1], axis=-1))
    m = token_metrics(logits, labels)
    assert m["token_ap"] == 1.0 and m["token_precision"] == 1.0 and m["token_recall"] == 0.5
    assert m["example_f1"] == 1.0
    # a hallucinated token ranked under a faithful one lowers the AP; no hallucinated token at all gives 0.0
    p1[1, 2] = 0.95
    assert token_metrics(np.log(np.stack([1 - p1, p1], axis=-1)), labels)["token_ap"] < 1.0
    assert token_metrics(logits, np.where(labels == 1, 0, labels))["token_ap"] == 0.0
