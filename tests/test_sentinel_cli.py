"""The Sentinel recipe end to end through the real CLI, on tiny in-process models and fixture data."""

import json
import time

import pytest
import yaml

from training.cli import run_cli
from training.models import BaseModelError, resolve_base_model
from training.sentinel import main


def _fixture_data(root):
    (root / "nq_open").mkdir(parents=True)
    qs = [f"who was the {i}th president of country {i % 7}" for i in range(30)]
    for name in ("NQ-open.dev.jsonl", "NQ-open.efficientqa.dev.1.1.jsonl", "NQ-open.efficientqa.test.1.1.jsonl"):
        (root / "nq_open" / name).write_text("\n".join(json.dumps({"question": q, "answer": ["x"]}) for q in qs))
    (root / "writingprompts_subset/gpt-4").mkdir(parents=True)
    rows = "\n".join(f'{i},"[ WP ] Write a story where dragon {i} learns to bake .",s,c' for i in range(30))
    for name in ("train_orig.csv", "test.csv"):
        (root / "writingprompts_subset/gpt-4" / name).write_text("row_id,prompt,story,completion\n" + rows + "\n")
    return root


def _config(tmp_path, base_model):
    cfg = {
        "run": {"output_dir": str(tmp_path / "run"), "seed": 3},
        "model": {"base_model": base_model, "max_length": 32},
        "train": {"learning_rate": 1e-3, "epochs": 1, "batch_size": 8, "eval_batch_size": 16,
                  "logging_steps": 1},
        "data": {"sources": [{"name": "nq_open"}, {"name": "writingprompts"}], "split": {"dev": 0.2, "test": 0.2}},
    }
    path = tmp_path / "sentinel.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_tiny_model_trains_end_to_end(tmp_path, arch, tiny_bert_dir, tiny_modernbert_dir, capsys):
    from transformers import AutoModelForSequenceClassification

    base = tiny_bert_dir if arch == "bert" else tiny_modernbert_dir
    data = _fixture_data(tmp_path / "data")
    cfg = _config(tmp_path, base)
    assert run_cli(main, ["--config", str(cfg), "--data-dir", str(data), "--max-steps", "4"]) == 0
    out = tmp_path / "run"
    assert "nq_open" in capsys.readouterr().out  # the count table is printed
    for name in ("config.yaml", "model.safetensors", "tokenizer.json", "label_map.json", "metrics.json",
                 "data_counts.txt", "train_log.jsonl", "train.log", "test.jsonl", "adapter/adapter_config.json"):
        assert (out / name).exists(), name
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["train"]["max_steps"] == 4 and resolved["run"]["data_dir"] == str(data)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_steps"] == 4
    test = metrics["test"]
    assert test["n"] == 12 and set(test["per_class"]) == {"NO_FACT_CHECK_NEEDED", "FACT_CHECK_NEEDED"}
    assert sum(map(sum, test["confusion_matrix"]["matrix"])) == 12
    assert set(test["per_source_accuracy"]) == {"nq_open", "writingprompts"}
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.id2label == {0: "NO_FACT_CHECK_NEEDED", 1: "FACT_CHECK_NEEDED"}
    assert not any("lora" in n for n, _ in model.named_parameters())

    # eval.sentinel re-scores the held-out split and writes the same metrics
    from eval.sentinel import main as eval_main

    assert eval_main(["--model", str(out), "--out", str(tmp_path / "ev")]) == 0
    again = json.loads((tmp_path / "ev/metrics.json").read_text())
    assert again["n"] == test["n"] and again["confusion_matrix"]["labels"] == test["confusion_matrix"]["labels"]
    assert abs(again["accuracy"] - test["accuracy"]) < 1e-9
    assert len((tmp_path / "ev/predictions.jsonl").read_text().splitlines()) == test["n"]
    # ... and through the runtime's ONNX runner: the same probabilities on these short prompts
    from training.export import main as export_main

    assert export_main(["--model", str(out), "--out", str(tmp_path / "export")]) == 0
    assert eval_main(["--model", str(tmp_path / "export"), "--backend", "onnx", "--out", str(tmp_path / "ev-onnx"),
                      "--data", str(out / "test.jsonl")]) == 0
    onnx = json.loads((tmp_path / "ev-onnx/metrics.json").read_text())
    assert onnx["backend"] == "onnx" and abs(onnx["accuracy"] - test["accuracy"]) < 1e-9

    def p_needed(path):
        return [json.loads(x)["p_fact_check_needed"] for x in path.read_text().splitlines()]

    assert p_needed(tmp_path / "ev-onnx/predictions.jsonl") == pytest.approx(
        p_needed(tmp_path / "ev/predictions.jsonl"), abs=1e-4)
    capsys.readouterr()
    assert eval_main(["--model", str(out), "--backend", "onnx", "--out", str(tmp_path / "ev-x")]) == 2  # a run dir
    assert "no .onnx files" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "who is x", "label": 1}\n{"text": "no label"}\n')
    assert eval_main(["--model", str(out), "--data", str(bad), "--out", str(tmp_path / "ev2")]) == 2
    assert "bad.jsonl:2: record is missing label" in capsys.readouterr().err


@pytest.mark.slow
def test_resume_continues_from_last_checkpoint(tmp_path, tiny_bert_dir):
    data = _fixture_data(tmp_path / "data")
    cfg = _config(tmp_path, tiny_bert_dir)
    common = ["--config", str(cfg), "--data-dir", str(data), "--set", "train.eval_every=steps",
              "--set", "train.eval_steps=2"]
    assert run_cli(main, common + ["--max-steps", "2"]) == 0
    assert (tmp_path / "run/checkpoints/checkpoint-2").is_dir()
    assert run_cli(main, common + ["--max-steps", "4"]) == 0  # picks up checkpoint-2 and runs 2 more steps
    log = (tmp_path / "run/train.log").read_text()
    assert "resuming from" in log and "checkpoint-2" in log
    assert json.loads((tmp_path / "run/metrics.json").read_text())["global_steps"] == 4


def test_lora_merge_gives_same_logits(tiny_modernbert_dir, tiny_bert_dir):
    import torch

    from training.config import LoraConfig
    from training.models import build_model, load_tokenizer, merge_lora

    for base in (tiny_bert_dir, tiny_modernbert_dir):
        torch.manual_seed(0)
        model = build_model(base, "sequence", ["a", "b"], LoraConfig(r=4, alpha=8))
        with torch.no_grad():  # LoRA B starts at zero; make the adapter do something before merging
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.5)
        model.eval()
        tok = load_tokenizer(base)
        enc = tok(["Is Paris the capital of France?", "write me a poem"], padding=True, return_tensors="pt")
        with torch.no_grad():
            before = model(**enc).logits
            merged = merge_lora(model)
            after = merged(**enc).logits
        assert not hasattr(merged, "peft_config")
        assert torch.allclose(before, after, atol=1e-5)


def test_lora_targets_follow_architecture(tiny_modernbert_dir, tiny_bert_dir):
    from training.config import LoraConfig
    from training.models import build_model

    mb = build_model(tiny_modernbert_dir, "sequence", ["a", "b"], LoraConfig())
    assert set(mb.peft_config["default"].target_modules) == {"Wqkv", "Wo", "Wi"}
    bert = build_model(tiny_bert_dir, "token", ["a", "b"], LoraConfig(target_modules=["query", "value"]))
    assert set(bert.peft_config["default"].target_modules) == {"query", "value"}


def test_build_model_seed_fixes_new_head_and_lora(tiny_bert_dir):
    """The run's seed makes the fresh head and the LoRA matrices reproducible (two runs of one recipe train the same
    model); the global RNG state before the call does not matter."""
    import torch

    from training.config import LoraConfig
    from training.models import build_model

    def trainable(seed, noise):
        torch.manual_seed(noise)  # whatever ran before (data loading, another model) leaves the RNG anywhere
        m = build_model(tiny_bert_dir, "token", ["a", "b"], LoraConfig(r=4, alpha=8), seed=seed)
        return {n: p.detach().clone() for n, p in m.named_parameters() if p.requires_grad}

    a, b, c = trainable(42, 1), trainable(42, 2), trainable(7, 1)
    assert a.keys() == b.keys() and any("classifier" in n for n in a) and any("lora_A" in n for n in a)
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert not all(torch.equal(a[n], c[n]) for n in a)


def test_offline_minilm_resolves(minilm_dir):
    assert (resolve_base_model("offline:minilm") == minilm_dir)
    with pytest.raises(BaseModelError, match="offline:minilm"):
        resolve_base_model("offline:nope")


def test_unreachable_hub_fails_fast_naming_offline_option(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # empty cache
    start = time.time()
    with pytest.raises(BaseModelError) as exc:
        resolve_base_model("answerdotai/ModernBERT-base")
    assert time.time() - start < 30
    assert "offline:minilm" in str(exc.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BaseModelError, match="offline:minilm"):
        resolve_base_model("answerdotai/ModernBERT-base")


def test_cli_errors_are_one_clear_line(tmp_path, capsys, tiny_bert_dir, monkeypatch):
    data = _fixture_data(tmp_path / "data")
    cfg = _config(tmp_path, tiny_bert_dir)
    assert run_cli(main, ["--config", str(cfg), "--set", "train.learnig_rate=1"]) == 2
    assert "train.learnig_rate: unknown key" in capsys.readouterr().err
    assert run_cli(main, ["--config", str(cfg), "--data-dir", str(tmp_path / "nowhere")]) == 2
    assert "NQ-open.dev.jsonl" in capsys.readouterr().err
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_cli(main, ["--config", str(cfg), "--data-dir", str(data), "--set", "train.device=cuda"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    # an empty class after filtering stops with the counts
    assert run_cli(main, ["--config", str(cfg), "--data-dir", str(data), "--set", "data.min_chars=60"]) == 2
    assert "FACT_CHECK_NEEDED has no examples" in capsys.readouterr().err
