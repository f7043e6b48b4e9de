"""eval.explainer and training.predict: metrics on hand-computed cases, label alignment, premise windows, CLI."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from nli_fixtures import write_nli_data

from eval import explainer as ev
from training.data.records import PairRecord


def test_binary_metrics_hand_computed():
    supported = [True, True, False, False, False]
    predicted = [True, False, False, True, False]
    score = [0.9, 0.4, 0.2, 0.6, 0.1]
    m = ev.binary_metrics(supported, predicted, score, groups=["a", "a", "a", "b", "b"])
    assert m["n"] == 5 and m["supported_rate"] == pytest.approx(0.4)
    assert m["accuracy"] == pytest.approx(3 / 5)
    assert m["confusion_matrix"] == {"labels": ["supported", "not_supported"], "matrix": [[1, 1], [1, 2]]}
    assert m["balanced_accuracy"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert m["macro_f1"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert m["roc_auc"] == pytest.approx(5 / 6)  # 5 of 6 (supported, not) pairs ranked correctly
    assert m["per_group"]["a"] == {"n": 3, "accuracy": pytest.approx(2 / 3), "balanced_accuracy": 0.75}
    assert m["per_group"]["b"]["balanced_accuracy"] is None  # one gold class only


def test_binary_metrics_single_class_has_no_auc():
    m = ev.binary_metrics([True, True], [True, False], [0.9, 0.1])
    assert m["roc_auc"] is None and m["balanced_accuracy"] is None and m["accuracy"] == 0.5


def test_align_labels_by_name():
    assert ev.align_labels(["entailment", "neutral", "contradiction"]) == [0, 1, 2]
    assert ev.align_labels(["CONTRADICTION", "NEUTRAL", "ENTAILMENT"]) == [2, 1, 0]  # DeBERTa MNLI order
    with pytest.raises(ev.EvalError, match="neither entailment / neutral / contradiction"):
        ev.align_labels(["LABEL_0", "LABEL_1", "LABEL_2"])
    with pytest.raises(ev.EvalError, match="only three-way"):
        ev.align_labels(["entailment", "not_entailment"])


def _args(**kw):
    kw = {"max_premise_windows": 4, **kw}
    return SimpleNamespace(batch_size=8, max_length=64, device="cpu", current="t", **kw)


def test_three_way_scoring_reorders_model_columns(monkeypatch):
    import training.predict as tp

    # A model whose outputs are ordered (contradiction, neutral, entailment).
    out = np.array([[0.1, 0.2, 0.7], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.7, 0.2, 0.1]])
    monkeypatch.setattr(tp, "predict_proba", lambda *a, **k: out)
    rows = [PairRecord("p", "h", lab) for lab in (0, 2, 1, 0)]
    m, probs = ev.score_three_way("m", rows, ev.align_labels(["contradiction", "neutral", "entailment"]), _args())
    assert probs.argmax(-1).tolist() == [0, 2, 1, 2]
    assert m["accuracy"] == pytest.approx(3 / 4)
    assert m["confusion_matrix"]["matrix"] == [[1, 0, 1], [0, 1, 0], [0, 0, 1]]


def test_grounding_windows_and_verdict(monkeypatch, minilm_dir):
    import training.predict as tp
    from training.models import load_tokenizer

    tok = load_tokenizer(minilm_dir)
    monkeypatch.setattr(tp, "load_classifier", lambda *a, **k: (None, tok, "cpu"))

    def fake_predict(model, premises, hypotheses, **kw):
        # Entailed only by the window that holds the evidence; contradicted by none.
        return np.array([[0.8, 0.1, 0.1] if "costs were flat" in p.lower() else [0.1, 0.8, 0.1]
                         for p in premises])

    monkeypatch.setattr(tp, "predict_proba", fake_predict)
    long_doc = "The call was long and covered many topics. " * 40 + "Costs were flat."
    rows = [PairRecord(long_doc, "Costs were flat.", 0, "s", meta={"domain": "d"}),
            PairRecord("The call was long.", "Costs doubled.", 3, "s", meta={"domain": "d"})]
    windows = ev.grounding_windows(tok, long_doc, "Costs were flat.", 64, ev.premise_settings(_args()))
    assert 1 < len(windows) <= 4 and any("Costs were flat" in w for w in windows)
    m, details = ev.score_binary("m", rows, [0, 1, 2], _args())
    assert [d["verdict"] for d in details] == ["entailment", "neutral"]
    assert details[0]["windows"] > 1 and details[1]["windows"] == 1
    assert details[0]["p_entailment"] == pytest.approx(0.8)
    assert m["accuracy"] == 1.0 and m["roc_auc"] == 1.0


def test_hypothesis_sentences_judge_each_sentence_of_a_claim(monkeypatch, minilm_dir):
    """--hypothesis sentences: each sentence of a summary against its own premises; supported only when every
    sentence is, else the least supported sentence's verdict; the score is the lowest sentence's best
    entailment probability. Whole (the default) judges the summary as one claim."""
    import training.predict as tp
    from training.models import load_tokenizer

    tok = load_tokenizer(minilm_dir)
    monkeypatch.setattr(tp, "load_classifier", lambda *a, **k: (None, tok, "cpu"))

    def fake_predict(model, premises, hypotheses, **kw):  # judged by the claim, whatever the premise
        return np.array([[0.1, 0.1, 0.8] if "doubled" in h else [0.9, 0.05, 0.05] if "flat" in h
                         else [0.6, 0.3, 0.1] for h in hypotheses])

    monkeypatch.setattr(tp, "predict_proba", fake_predict)
    assert ev.claim_sentences("Costs were flat. Sales doubled!") == ["Costs were flat.", "Sales doubled!"]
    assert ev.claim_sentences("no end mark") == ["no end mark"] and ev.claim_sentences("") == [""]
    doc = "The call covered costs and sales. Costs were flat. Sales rose a little."
    rows = [PairRecord(doc, "Costs were flat. Sales doubled.", 3, "s", meta={"domain": "d"}),
            PairRecord(doc, "Costs were flat. The call covered costs.", 0, "s", meta={"domain": "d"})]
    m, details = ev.score_binary("m", rows, [0, 1, 2], _args(hypothesis="sentences"))
    assert [(d["verdict"], d["sentences"]) for d in details] == [("contradiction", 2), ("entailment", 2)]
    assert details[0]["p_entailment"] == pytest.approx(0.1) and details[1]["p_entailment"] == pytest.approx(0.6)
    assert m["balanced_accuracy"] == 1.0
    _, whole = ev.score_binary("m", rows, [0, 1, 2], _args())
    assert [d["verdict"] for d in whole] == ["contradiction", "entailment"]
    assert [d["sentences"] for d in whole] == [1, 1]


def test_parse_limits():
    assert ev.parse_limits(["100", "summedits_test=20"]) == (100, {"summedits_test": 20})
    with pytest.raises(ev.EvalError, match="expected N or SET=N"):
        ev.parse_limits(["snli_test=all"])
    with pytest.raises(ev.EvalError, match="must be positive"):
        ev.parse_limits(["0"])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_bert_dir):
    from training.explainer import main

    root = tmp_path_factory.mktemp("explainer-eval")
    data = write_nli_data(root / "data")
    cfg = {"run": {"output_dir": str(root / "run")},
           "model": {"base_model": tiny_bert_dir, "max_length": 64, "lora": {"enabled": False}},
           "train": {"epochs": 1, "batch_size": 8, "device": "cpu", "logging_steps": 1},
           "data": {"split": {"dev": 0.2, "test": 0.2}, "sources": [{"name": "snli_dev"}, {"name": "rte"}]}}
    (root / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    main(["--config", str(root / "cfg.yaml"), "--data-dir", str(data), "--max-steps", "1"])
    return root / "run", data


def test_predict_proba_returns_input_order(tiny_run):
    from training.predict import predict_proba

    run, _ = tiny_run
    prem = ["short", "a much longer premise with many more words in it than the others", "mid length one"]
    hyp = ["h", "another hypothesis", "x y"]
    batched = predict_proba(str(run), prem, hyp, batch_size=2, progress=False)
    single = np.vstack([predict_proba(str(run), [p], [h], batch_size=1, progress=False) for p, h in zip(prem, hyp)])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    assert predict_proba(str(run), [], [], progress=False).shape == (0, 3)
    with pytest.raises(ValueError, match="3 texts but 2 pairs"):
        predict_proba(str(run), prem, hyp[:2])


@pytest.mark.slow
def test_eval_cli_writes_metrics_and_report(tiny_run, tmp_path, capsys):
    run, data = tiny_run
    (data / "begin_dialogue_attribution/wow/begin_test_wow.tsv").unlink()  # reported as not evaluated
    out = tmp_path / "eval"
    code = ev.cli(["--model", str(run), "--out", str(out), "--data-dir", str(data), "--limit", "4",
                   "--limit", "summedits_test=3", "--max-length", "64"])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    sets = metrics["sets"]
    assert sets["mnli_dev_matched"]["n"] == 4 and sets["mnli_dev_matched"]["sampled_from"] == 5
    assert sets["snli_test"]["n"] == 3 and sets["snli_test"]["sampled_from"] is None
    assert sets["summedits_test"]["n"] == 3 and sets["summedits_test"]["kind"] == "binary"
    assert sets["run_test"]["kind"] == "three_way"
    assert "begin_test" in metrics["skipped"]
    for name in ("anli_r1_dev", "anli_r2_dev", "anli_r3_dev", "sick_test", "rte_dev"):
        assert name in sets
    report = (out / "report.md").read_text()
    assert "| mnli_dev_matched (sample) | 4 |" in report and "## Not evaluated" in report
    assert (out / "confusion_matrices.png").stat().st_size > 1000
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == sum(v["n"] for v in sets.values())
    assert "Three-way NLI" in capsys.readouterr().out


def test_eval_cli_errors_are_one_line(tiny_run, tmp_path, capsys):
    run, _ = tiny_run
    assert ev.cli(["--model", str(run), "--out", str(tmp_path), "--sets", "mnli_test"]) == 2
    assert "--sets: unknown set 'mnli_test'" in capsys.readouterr().err
    assert ev.cli(["--model", str(run), "--out", str(tmp_path), "--sets", "snli_test", "--limit",
                   "rte_dev=3"]) == 2
    assert "'rte_dev' is not among the sets being scored" in capsys.readouterr().err


def test_sets_the_run_trained_on_are_skipped_and_sentences_join_the_windows(tmp_path, minilm_dir):
    from training.models import load_tokenizer

    (tmp_path / "metrics.json").write_text('{"data": {"trained_on_eval_sets": ["mnli_dev_mismatched"]}}')
    assert ev.trained_eval_sets(str(tmp_path)) == ["mnli_dev_mismatched"]
    assert ev.trained_eval_sets(str(tmp_path / "missing")) == []
    tok = load_tokenizer(minilm_dir)
    long_doc = "The call was long and covered many topics. " * 40 + "Costs were flat."
    both = ev.grounding_windows(tok, long_doc, "Costs were flat.", 64,
                                ev.premise_settings(_args(max_premise_windows=2, max_premise_sentences=1)))
    assert both[-1] == "Costs were flat." and len(both) == 3

