"""The Explainer recipe: the two-way loss mask by hand, and tiny models trained a few steps through the CLI."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from nli_fixtures import write_nli_data

from training.explainer import main, two_way_masked_loss
from training.predict import model_labels, predict_proba


def test_two_way_masked_loss_matches_hand_computation():
    torch = pytest.importorskip("torch")
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    labels = torch.tensor([0, 3, 2, -100])
    z0 = math.exp(2) + 2
    z2 = math.e + 1 + math.exp(-1)
    expected = [-math.log(math.exp(2) / z0),                       # three-way, entailment
                -math.log((math.e + math.e) / (1 + 2 * math.e)),  # two-way: p(neutral) + p(contradiction)
                -math.log(math.exp(-1) / z2)]                      # three-way, contradiction; -100 ignored
    loss = two_way_masked_loss(logits, labels)
    assert loss.item() == pytest.approx(sum(expected) / 3, rel=1e-6)
    # Without two-way rows it is torch's cross-entropy, weighted or not.
    plain = torch.tensor([0, 1, 2, 1])
    assert two_way_masked_loss(logits, plain).item() == pytest.approx(
        torch.nn.functional.cross_entropy(logits, plain).item(), rel=1e-6)
    w = torch.tensor([1.0, 2.0, 0.5])
    assert two_way_masked_loss(logits, plain, w).item() == pytest.approx(
        torch.nn.functional.cross_entropy(logits, plain, weight=w).item(), rel=1e-6)
    # A 4th weight entry weighs the two-way rows: [w0=1, w3=3] -> (1*l0 + 3*l1) / 4.
    w4 = torch.tensor([1.0, 1.0, 1.0, 3.0])
    both = two_way_masked_loss(logits[:2], labels[:2], w4).item()
    assert both == pytest.approx((expected[0] + 3 * expected[1]) / 4, rel=1e-6)


def test_two_way_masked_loss_smooths_like_torch():
    """train.label_smoothing reaches the Explainer's own loss: on three-way rows it is torch's smoothed
    cross-entropy (weighted or not); a two-way row mixes eps of the uniform target into -log(p_n + p_c)."""
    torch = pytest.importorskip("torch")
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, -1.0], [0.5, -0.5, 0.0]])
    plain = torch.tensor([0, 1, 2, 1])
    w = torch.tensor([1.0, 2.0, 0.5])
    for eps in (0.1, 0.3):
        assert two_way_masked_loss(logits, plain, label_smoothing=eps).item() == pytest.approx(
            torch.nn.functional.cross_entropy(logits, plain, label_smoothing=eps).item(), rel=1e-6)
        assert two_way_masked_loss(logits, plain, w, label_smoothing=eps).item() == pytest.approx(
            torch.nn.functional.cross_entropy(logits, plain, weight=w, label_smoothing=eps).item(), rel=1e-6)
    logp = torch.log_softmax(logits[1], -1)
    expected = 0.9 * -torch.logsumexp(logp[1:], 0) + 0.1 * -logp.mean()
    assert two_way_masked_loss(logits[1:2], torch.tensor([3]), label_smoothing=0.1).item() == pytest.approx(
        expected.item(), rel=1e-6)
    assert two_way_masked_loss(logits, torch.tensor([0, 3, -100, 2]), label_smoothing=0.0).item() == pytest.approx(
        two_way_masked_loss(logits, torch.tensor([0, 3, -100, 2])).item())


def test_two_way_loss_gradient_does_not_prefer_neutral_or_contradiction():
    torch = pytest.importorskip("torch")
    logits = torch.zeros(1, 3, requires_grad=True)
    two_way_masked_loss(logits, torch.tensor([3])).backward()
    g = logits.grad[0]
    assert g[0] > 0 and g[1] < 0 and g[1] == pytest.approx(g[2].item())  # pushes entailment down, n and c alike


def _run(tmp_path, model_dir, extra=()):
    data = write_nli_data(tmp_path / "data")
    # Enough three-way rows for a train/dev/test split with every class present.
    cfg = {
        "run": {"output_dir": str(tmp_path / "run"), "seed": 1},
        "model": {"base_model": model_dir, "max_length": 64, "lora": {"enabled": False}},
        "train": {"learning_rate": 1e-3, "epochs": 1, "batch_size": 4, "eval_batch_size": 8, "logging_steps": 1,
                  "eval_every": "steps", "eval_steps": 2, "device": "cpu", "group_by_length": False},
        "data": {"split": {"dev": 0.2, "test": 0.2},
                 "sources": [{"name": "snli_dev"}, {"name": "sick"}, {"name": "taxinli"}, {"name": "joci"},
                             {"name": "rte"}, {"name": "add_one_rte"}, {"name": "begin"}]},
    }
    path = tmp_path / "explainer.yaml"
    path.write_text(yaml.safe_dump(cfg))
    main(["--config", str(path), "--data-dir", str(data), "--max-steps", "3", *extra])
    return tmp_path / "run"


@pytest.mark.slow
def test_tiny_bert_trains_through_the_cli(tmp_path, tiny_bert_dir, capsys):
    run = _run(tmp_path, tiny_bert_dir)
    out = capsys.readouterr().out
    # The fixture's JOCI rows are copies of its MNLI/SNLI evaluation pairs: all 9 go, as do 2 TaxiNLI rows.
    assert "removed 11 training pairs that appear in an evaluation set (taxinli: 2, joci: 9)" in out
    assert "not_entailment(2-way)" in out  # the count table names the two-way rows
    for f in ("model.safetensors", "config.json", "tokenizer.json", "label_map.json", "config.yaml",
              "metrics.json", "data_counts.txt", "test.jsonl", "train_log.jsonl", "train.log"):
        assert (run / f).is_file(), f
    assert json.loads((run / "label_map.json").read_text())["labels"] == ["entailment", "neutral", "contradiction"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["global_steps"] == 3
    assert metrics["data"]["eval_overlap_removed"] == 11
    assert metrics["data"]["sources"]["joci"]["kept"] == 0
    assert metrics["test"]["confusion_matrix"]["labels"] == ["entailment", "neutral", "contradiction"]
    test_rows = [json.loads(x) for x in (run / "test.jsonl").read_text().splitlines()]
    assert test_rows and all(r["label"] in (0, 1, 2) for r in test_rows)  # held-out split is three-way only
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["max_steps"] == 3 and saved["data"]["two_way"] == "mask"
    assert model_labels(str(run)) == ["entailment", "neutral", "contradiction"]
    probs = predict_proba(str(run), ["A man plays."], ["A man performs."], progress=False)
    assert probs.shape == (1, 3) and probs.sum() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.slow
def test_tiny_modernbert_with_lora_trains_and_resumes(tmp_path, tiny_modernbert_dir):
    run = _run(tmp_path, tiny_modernbert_dir, ["--set", "model.lora.enabled=true"])
    assert (run / "adapter").is_dir() and (run / "model.safetensors").is_file()
    assert (run / "checkpoints").is_dir()
    # A second call with a higher step cap resumes from the last checkpoint instead of starting over.
    cfg = tmp_path / "explainer.yaml"
    main(["--config", str(cfg), "--data-dir", str(tmp_path / "data"), "--max-steps", "4",
          "--set", "model.lora.enabled=true"])
    assert "resuming from" in (run / "train.log").read_text()
    assert json.loads((run / "metrics.json").read_text())["global_steps"] == 4


def test_cli_reports_config_errors_in_one_line(tmp_path, capsys):
    from training.cli import run_cli

    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  sources: [{name: sick}]\n  two_ways: mask\n")
    assert run_cli(main, ["--config", str(bad)]) == 2
    assert "data.two_ways: unknown key" in capsys.readouterr().err
