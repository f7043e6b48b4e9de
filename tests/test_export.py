"""ONNX export: tiny BERT / ModernBERT run dirs, both task types, parity checks, int8, failure paths."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("optimum.exporters.onnx", reason="optimum-onnx is needed for the export tests")
onnx = pytest.importorskip("onnx")
# Tracing BERT's mask helper warns that a constant is baked in; the parity checks below prove the graphs right.
pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")

from training.export import (
    FP32_FILE,
    INT8_FILE,
    REPORT_FILE,
    ExportError,
    export,
    main,
    parity_examples,
    verify_export,
)

SEQ_LABELS = ["NO_FACT_CHECK_NEEDED", "FACT_CHECK_NEEDED"]
TOKEN_LABELS = ["SUPPORTED", "HALLUCINATED"]


def make_run_dir(base: str, task: str, path: Path, *, lora: bool = False) -> Path:
    """A run dir in the standard layout (merged model, or adapter/ only when lora=True) with a small test.jsonl."""
    import torch

    from training.config import LoraConfig
    from training.models import build_model, load_tokenizer

    labels = SEQ_LABELS if task == "sequence" else TOKEN_LABELS
    torch.manual_seed(1)
    model = build_model(base, task, labels, LoraConfig(enabled=True, r=4, alpha=8) if lora else None)
    tok = load_tokenizer(base)
    path.mkdir(parents=True)
    if lora:
        with torch.no_grad():  # LoRA B starts at zero: make the adapter change the outputs
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.5)
        model.save_pretrained(path / "adapter")
        tok.save_pretrained(path / "adapter")
    else:
        model.save_pretrained(path, safe_serialization=True)
        tok.save_pretrained(path)
    (path / "label_map.json").write_text(json.dumps({"labels": labels, "id2label": dict(enumerate(labels))}))
    (path / "config.yaml").write_text("model:\n  max_length: 96\n")
    (path / "metrics.json").write_text(json.dumps({"test": {"n": 3, "accuracy": 0.5, "macro_f1": 0.4}}))
    if task == "sequence":
        recs = [{"text": t, "label": 1} for t in ("Who wrote Hamlet?", "Write a haiku about rain.",
                                                   "What is the tallest mountain in Africa? " * 8, "hi")]
    else:
        recs = [{"context": "Paris is the capital of France. " * 4, "question": "What is the capital?",
                 "answer": a, "spans": []} for a in ("Paris.", "Lyon is the capital of France since 1900.")]
    (path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.fixture(scope="module")
def bert_seq_run(tmp_path_factory, tiny_bert_dir):
    return make_run_dir(tiny_bert_dir, "sequence", tmp_path_factory.mktemp("runs") / "bert-seq")


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
@pytest.mark.parametrize("task", ["sequence", "token"])
def test_export_fp32_parity_and_layout(arch, task, tmp_path, request):
    base = request.getfixturevalue(f"tiny_{arch}_dir")
    run = make_run_dir(base, task, tmp_path / "run")
    out = tmp_path / "export"
    report = export(run, out)

    assert report["status"] == "ok" and report["optimum_loads"] is True
    fp32 = report["parity"]["fp32"]
    assert fp32["passed"] and fp32["max_abs_diff"] <= 1e-4 and fp32["label_agreement"] == 1.0
    assert report["inputs"]["source"].endswith("test.jsonl")
    assert report["task"] == ("text-classification" if task == "sequence" else "token-classification")
    expected_inputs = ["input_ids", "attention_mask"] + (["token_type_ids"] if arch == "bert" else [])
    assert sorted(report["onnx_inputs"]) == sorted(expected_inputs)
    for name in (FP32_FILE, "tokenizer.json", "config.json", "label_map.json", "config.yaml", "metrics.json",
                 REPORT_FILE):
        assert (out / name).is_file(), name
    assert json.loads((out / REPORT_FILE).read_text())["status"] == "ok"
    assert not (tmp_path / "export.partial").exists()
    if task == "token":  # compared per non-padding token, not per example
        assert fp32["n_compared"] > fp32["n_examples"]
    # ONNX Runtime's transformer fusions: BERT graphs are fused (and the fused graph passed parity above);
    # ModernBERT's attention is not matched, so its plain graph stays, with the reason
    fusion = report["fusion"]
    if arch == "bert":
        assert fusion["applied"] is True and fusion["fused_ops"].get("Attention", 0) >= 1
        assert "attention" not in report
    else:  # its attention is the export's own instead (training.onnx_modernbert), and the report says so
        assert fusion["applied"] is False and "modernbert" in fusion["reason"]
        assert "MultiHeadAttention" in report["attention"]


def test_int8_export_reports_agreement_and_loads(bert_seq_run, tmp_path):
    from optimum.onnxruntime import ORTModelForSequenceClassification

    out = tmp_path / "export"
    report = export(bert_seq_run, out, quantize="int8", agreement_floor=0.5)
    int8 = report["parity"]["int8"]
    assert int8["file"] == INT8_FILE and 0.5 <= int8["label_agreement"] <= 1.0
    assert int8["threshold"] == "label_agreement >= 0.5"
    assert (out / INT8_FILE).stat().st_size < (out / FP32_FILE).stat().st_size
    model = onnx.load(str(out / INT8_FILE))
    assert any(n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul") for n in model.graph.node)
    ORTModelForSequenceClassification.from_pretrained(out, file_name=INT8_FILE)


def test_blockwise_int8_quantises_every_weight_matmul_and_stays_close_to_fp32(bert_seq_run, tmp_path):
    import logging

    import numpy as np
    import onnxruntime as ort

    from training.onnx_graph import BLOCKWISE_SCHEME, quantize_int8

    out = tmp_path / "export"
    export(bert_seq_run, out, optimize=False)  # plain graph: every linear layer is a MatMul with a constant weight
    dst = tmp_path / "blockwise.onnx"
    level = logging.getLogger().level
    nodes = [n.name for n in onnx.load(str(out / FP32_FILE)).graph.node if n.op_type == "MatMul"]
    assert quantize_int8(out / FP32_FILE, dst, BLOCKWISE_SCHEME, keep_fp32=nodes[:1]) == nodes[:1]
    assert logging.getLogger().level == level  # the quantiser's import-time logging setup is undone
    ops = [n.op_type for n in onnx.load(str(dst)).graph.node]
    assert ops.count("MatMulNBits") >= 6 and "MatMulInteger" not in ops and "DynamicQuantizeLinear" not in ops
    assert nodes[0] in [n.name for n in onnx.load(str(dst)).graph.node]  # kept fp32 as asked
    feed = {"input_ids": np.array([[2, 15, 27, 9, 3, 0]], np.int64),
            "attention_mask": np.array([[1, 1, 1, 1, 1, 0]], np.int64)}
    fp32 = ort.InferenceSession(str(out / FP32_FILE), providers=["CPUExecutionProvider"])
    feed = {i.name: feed[i.name] if i.name in feed else np.zeros_like(feed["input_ids"]) for i in fp32.get_inputs()}
    reference = fp32.run(None, feed)[0]
    blockwise = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert blockwise.shape == reference.shape and np.abs(blockwise - reference).max() < 0.05


def test_blockwise_products_turns_only_the_named_fp32_products_of_an_int8_graph_blockwise(bert_seq_run, tmp_path):
    import numpy as np
    import onnxruntime as ort

    from training.onnx_graph import blockwise_products, quantize_int8

    out = tmp_path / "export"
    export(bert_seq_run, out)  # fused graph, as the export quantises it
    dynamic = tmp_path / "ffn_fp32.onnx"
    kept = quantize_int8(out / FP32_FILE, dynamic, "ffn_fp32")
    assert kept  # the tiny BERT has feed-forward products for the scheme to keep
    dst = tmp_path / "hybrid.onnx"
    blockwise_products(dynamic, dst, kept[:1])
    before = [n.op_type for n in onnx.load(str(dynamic)).graph.node]
    nodes = {n.name: n.op_type for n in onnx.load(str(dst)).graph.node}
    assert list(nodes.values()).count("MatMulNBits") == 1 and kept[0] not in nodes
    assert all(nodes.get(name) == "MatMul" for name in kept[1:])  # the others stay fp32
    assert list(nodes.values()).count("MatMulInteger") == before.count("MatMulInteger")  # dynamic int8 untouched
    feed = {"input_ids": np.array([[2, 15, 27, 9, 3, 0]], np.int64),
            "attention_mask": np.array([[1, 1, 1, 1, 1, 0]], np.int64)}

    def run(path):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {i.name: feed.get(i.name, np.zeros_like(feed["input_ids"]))
                                  for i in session.get_inputs()})[0]

    assert np.abs(run(dst) - run(dynamic)).max() < 0.05


def test_project_onnx_backend_loads_export(bert_seq_run, tmp_path, auto_prefers_int8):
    runners = pytest.importorskip("inference.runners")
    out = tmp_path / "export"
    export(bert_seq_run, out, quantize="int8", agreement_floor=0.0)
    texts = ["Who wrote Hamlet?", "Write a haiku about rain."]
    torch_probs = runners.load_runner(bert_seq_run, task="sequence", backend="torch").classify(texts)
    onnx_probs = runners.load_runner(out, task="sequence", precision="fp32").classify(texts)
    assert np.allclose(onnx_probs, torch_probs, atol=1e-4)
    assert runners.load_runner(out, task="sequence", precision="int8").onnx_path.name == INT8_FILE
    # the default precision ("auto") takes the int8 file the export shipped, where it is faster (injected timings)
    assert runners.load_runner(out, task="sequence").onnx_path.name == INT8_FILE


def test_int8_is_chosen_on_the_runs_parity_sample_when_the_test_split_is_used_up(bert_seq_run, tmp_path):
    # the Detector's test splits (~100 records) are smaller than --samples: the check reads all of them, and the
    # int8 scheme is chosen on its training inputs (parity.jsonl) instead of on the check's own records
    run = tmp_path / "run"
    shutil.copytree(bert_seq_run, run)
    (run / "test.jsonl").write_text("".join(json.dumps({"text": f"Test question {i}?", "label": 1}) + "\n"
                                            for i in range(5)))
    (run / "parity.jsonl").write_text("".join(json.dumps({"text": f"Training prompt {i}."}) + "\n"
                                              for i in range(20)))
    check, check_source = parity_examples(run, 12)
    select, source = parity_examples(run, 12, held_out=True)
    assert len(check) == 5 and check_source.endswith("test.jsonl")
    assert len(select) == 12 and all(t[0].startswith("Training prompt") for t in select)
    assert source.endswith("parity.jsonl")
    report = export(run, tmp_path / "e", quantize="int8", agreement_floor=0.0, samples=12)
    assert report["int8_selection"] == {"source": str(run / "parity.jsonl"), "n_examples": 12,
                                        "disjoint_from_parity": True}
    assert report["inputs"]["n_examples"] == 5


def test_int8_below_floor_is_refused_but_the_fp32_export_is_written(bert_seq_run, tmp_path, capsys):
    out = tmp_path / "export"
    rc = main(["--model", str(bert_seq_run), "--out", str(out), "--quantize", "int8",
               "--agreement-floor", "1.01"])  # agreement can never reach 1.01
    assert rc == 0
    err = capsys.readouterr().err
    assert "warning: int8 refused" in err and "below the floor 1.01" in err and "--require-int8" in err
    assert (out / FP32_FILE).is_file() and not (out / INT8_FILE).exists()
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["status"] == "int8_refused" and report["int8_status"] == "refused" and report["passed"] is True
    # every int8 scheme was tried before refusing (more of the graph kept in fp32 each time), then the search
    tried = report["int8_schemes_tried"]
    assert [t["scheme"] for t in tried] == ["all", "embeddings_fp32", "ffn_output_fp32", "ffn_output_embeddings_fp32",
                                            "ffn_fp32", "ffn_embeddings_fp32", "blockwise_int8", "sensitive_fp32"]
    assert tried[0]["fp32_nodes"] < tried[2]["fp32_nodes"] < tried[4]["fp32_nodes"] and not any(t["passed"] for t in tried)
    assert [t["embeddings_fp32"] for t in tried[:7]] == [False, True] * 3 + [True]
    # four test records: none left over for a separate selection set, and the report says so; the search,
    # which fits the inputs it stops on, is then not run
    assert report["int8_selection"] == {"source": report["inputs"]["source"], "n_examples": 4,
                                        "disjoint_from_parity": False}
    assert "skipped" in tried[-1] and "kept_fp32" not in tried[-1]
    assert list(report["parity"]) == ["fp32"] and report["parity"]["fp32"]["passed"] is True
    assert report["files"] == {"fp32": FP32_FILE}
    refused = report["refused"]["int8"]
    assert refused["passed"] is False and refused["status"] == "refused" and 0 <= refused["label_agreement"] <= 1
    assert refused["threshold"] == "label_agreement >= 1.01" and refused["size_mb"] > 0
    assert (tmp_path / "export.failed" / INT8_FILE).is_file()  # the rejected file, kept for inspection
    assert json.loads((tmp_path / "export.failed" / REPORT_FILE).read_text())["int8_status"] == "refused"
    # The runtime loads the fp32 export.
    from inference.runners import load_runner

    assert load_runner(out, task="sequence").onnx_path.name == FP32_FILE  # auto: int8 was refused


def test_require_int8_exits_1_after_writing_fp32(bert_seq_run, tmp_path, capsys):
    out = tmp_path / "export"
    rc = main(["--model", str(bert_seq_run), "--out", str(out), "--quantize", "int8", "--require-int8",
               "--agreement-floor", "1.01"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "error: int8 refused" in err and f"written to {out}" in err
    assert (out / FP32_FILE).is_file() and not (out / INT8_FILE).exists()
    assert json.loads((out / REPORT_FILE).read_text())["int8_status"] == "refused"
    assert main(["--model", str(bert_seq_run), "--out", str(tmp_path / "x"), "--require-int8"]) == 2  # bad input
    assert "--require-int8 needs --quantize int8" in capsys.readouterr().err
    assert main(["--model", str(tmp_path / "no-such-run"), "--out", str(tmp_path / "y")]) == 2
    assert "no-such-run does not exist" in capsys.readouterr().err


def test_int8_is_chosen_on_records_the_parity_check_does_not_use(bert_seq_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(bert_seq_run, run)
    texts = [f"Question number {i}: who wrote play {i}?" for i in range(30)]
    (run / "test.jsonl").write_text("".join(json.dumps({"text": t, "label": 1}) + "\n" for t in texts))
    check, _ = parity_examples(run, 12)
    select, source = parity_examples(run, 12, held_out=True)
    assert len(check) == len(select) == 12 and not set(check) & set(select) and source.endswith("test.jsonl")
    assert len(parity_examples(run, 25, held_out=True)[0]) == 5  # only what the check left
    assert parity_examples(tmp_path / "none", 3, held_out=True)[0] == []  # built-in sentences are the check's
    report = export(run, tmp_path / "e", quantize="int8", agreement_floor=0.0, samples=12)
    assert report["int8_selection"] == {"source": str(run / "test.jsonl"), "n_examples": 12,
                                        "disjoint_from_parity": True}
    assert report["inputs"]["n_examples"] == 12 and report["int8_status"] == "shipped"
    assert [t["scheme"] for t in report["int8_schemes_tried"]] == ["all"]
    # with records to choose on and no named scheme passing, the sensitivity search runs: each matrix product
    # measured alone, at most half kept in fp32, the most damaging first
    report = export(run, tmp_path / "g", quantize="int8", agreement_floor=1.01, samples=12)
    search = report["int8_schemes_tried"][-1]
    assert search["scheme"] == "sensitive_fp32" and not search["passed"] and report["int8_status"] == "refused"
    assert len(search["mean_abs_diff_alone"]) == search["of_nodes"] > 0
    assert search["fp32_nodes"] == search["of_nodes"] // 2 == len(search["kept_fp32"])
    alone = list(search["mean_abs_diff_alone"].values())
    assert alone == sorted(alone, reverse=True) and search["kept_fp32"] == list(search["mean_abs_diff_alone"])[:search["fp32_nodes"]]


def test_int8_status_when_shipped(bert_seq_run, tmp_path):
    report = export(bert_seq_run, tmp_path / "e", quantize="int8", agreement_floor=0.0)
    assert report["int8_status"] == "shipped" and report["status"] == "ok" and "refused" not in report
    assert export(bert_seq_run, tmp_path / "f")["int8_status"] == "not_requested"


def test_corrupted_onnx_weight_is_detected(bert_seq_run, tmp_path, capsys):
    from onnx import numpy_helper

    out = tmp_path / "export"
    export(bert_seq_run, out)
    model = onnx.load(str(out / FP32_FILE))
    # The largest float initializer is the word-embedding matrix: every input reads it.
    init = max((i for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT),
               key=lambda i: np.prod(i.dims))
    arr = numpy_helper.to_array(init).copy()
    arr += np.random.default_rng(0).normal(0, 0.05, arr.shape).astype(arr.dtype)
    init.CopyFrom(numpy_helper.from_array(arr, init.name))
    onnx.save(model, str(out / FP32_FILE))

    result = verify_export(bert_seq_run, out)
    assert result["passed"] is False
    assert result["parity"]["fp32"]["max_abs_diff"] > 1e-4
    assert main(["--model", str(bert_seq_run), "--out", str(out), "--verify-only"]) == 1
    assert "fp32" in capsys.readouterr().err


def test_lora_adapter_only_run_is_merged(tiny_bert_dir, tmp_path):
    import onnxruntime as ort
    import torch
    from peft import AutoPeftModelForSequenceClassification

    from training.models import load_tokenizer

    run = make_run_dir(tiny_bert_dir, "sequence", tmp_path / "run", lora=True)
    assert not (run / "model.safetensors").exists()
    out = tmp_path / "export"
    report = export(run, out)
    assert report["merged_from_adapter"] is True and report["passed"]

    # The ONNX graph must equal the *unmerged* PEFT model, i.e. the adapter was really applied.
    peft_model = AutoPeftModelForSequenceClassification.from_pretrained(run / "adapter").eval()
    tok = load_tokenizer(str(run / "adapter"))
    enc = tok(["Who wrote Hamlet?", "a longer prompt about the history of Rome"], padding=True, return_tensors="np")
    with torch.no_grad():
        ref = peft_model(**{k: torch.from_numpy(v) for k, v in enc.items()}).logits.numpy()
    sess = ort.InferenceSession(str(out / FP32_FILE), providers=["CPUExecutionProvider"])
    got = sess.run(["logits"], {i.name: enc[i.name].astype(np.int64) for i in sess.get_inputs()})[0]
    assert np.abs(ref - got).max() < 1e-4
    base_only = AutoPeftModelForSequenceClassification.from_pretrained(run / "adapter").eval()
    with base_only.disable_adapter(), torch.no_grad():
        plain = base_only(**{k: torch.from_numpy(v) for k, v in enc.items()}).logits.numpy()
    assert np.abs(plain - got).max() > 1e-3  # the adapter changes the outputs, and the export kept that


def test_torch_exporter_fallback_modernbert(tiny_modernbert_dir, tmp_path):
    # The sequence run's test.jsonl has an ~80-token input: longer than the 64-token local attention window.
    run = make_run_dir(tiny_modernbert_dir, "sequence", tmp_path / "run")
    report = export(run, tmp_path / "export", exporter="torch")
    assert report["inputs"]["max_tokens"] > 64
    assert report["passed"] and report["exporter"] == "torch"
    assert sorted(report["onnx_inputs"]) == ["attention_mask", "input_ids"]


def test_refuses_pickles_and_existing_out(tmp_path, bert_seq_run):
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text("{}")
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(ExportError, match="safetensors"):
        export(pickled, tmp_path / "out")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("x")
    with pytest.raises(ExportError, match="--overwrite"):
        export(bert_seq_run, taken)
    with pytest.raises(ExportError, match="only replaces a previous export"):
        export(bert_seq_run, taken, overwrite=True)  # not an export: never deleted
    with pytest.raises(ExportError, match="only replaces a previous export"):
        export(bert_seq_run, bert_seq_run.parent, overwrite=True)  # the folder holding the run
    assert (taken / "keep.txt").read_text() == "x" and (bert_seq_run / "model.safetensors").is_file()


def test_bench_script_runs_on_an_export(bert_seq_run, tmp_path, capsys):
    """scripts/bench_export.py end to end on a tiny export (figures are not checked: timing is not a test)."""
    from script_loader import load_script

    bench = load_script("bench_export")
    out = tmp_path / "export"
    export(bert_seq_run, out, quantize="int8", agreement_floor=0.0)
    from inference.runners import FALLBACK_FILE

    (out / FALLBACK_FILE).write_text(json.dumps({"margin": 1e9, "fp32_file": FP32_FILE}))  # every input to fp32
    result_json = tmp_path / "bench.json"
    assert bench.main([str(out), "--lengths", "16", "--batches", "1", "2", "--budget", "0.05",
                       "--min-repeats", "2", "--agreement-samples", "4", "--json", str(result_json)]) == 0
    data = json.loads(result_json.read_text())["results"][0]
    assert data["run_dir"] == str(bert_seq_run.resolve())
    assert [(c["seq_len"], c["batch"]) for c in data["cells"]] == [(16, 1), (16, 2)]
    assert set(data["agreement"]) == {"onnx-fp32", "onnx-int8"}
    assert data["agreement"]["onnx-fp32"]["label_agreement"] == 1.0
    runtime = data["runtime"]
    assert set(runtime["pass_ms_p50"]) == {"fp32", "int8 alone", "int8 + fp32 fallback"}
    assert runtime["fallback_share"] == 1.0 and runtime["n_records"] == 4
    assert runtime["agreement_vs_torch"]["int8 + fp32 fallback"] == runtime["agreement_vs_torch"]["fp32"] == 1.0
    printed = capsys.readouterr().out
    assert "| export | 16 | 2 |" in printed and "int8 + fp32 fallback through the runtime" in printed


def test_fallback_margin_catches_every_flip_of_the_inputs_it_was_measured_on():
    from inference.runners import near_ties
    from training.export import fallback_margin, with_fallback

    rng = np.random.default_rng(0)
    fp32 = [rng.normal(size=(16, 3)).astype(np.float32) for _ in range(4)]
    int8 = [x + rng.normal(scale=0.3, size=x.shape).astype(np.float32) for x in fp32]  # flips some near-ties
    flips = np.concatenate([a.argmax(1) != b.argmax(1) for a, b in zip(fp32, int8)])
    assert flips.any()
    margin = fallback_margin(fp32, int8, quantile=1.0)
    mixed, rate = with_fallback(int8, fp32, margin)
    assert all((m.argmax(1) == f.argmax(1)).all() for m, f in zip(mixed, fp32))  # every flip went to fp32
    assert flips.mean() <= rate < 1.0
    assert fallback_margin(fp32, int8) < margin  # the default, a quantile, sends fewer inputs to fp32
    with pytest.raises(ValueError, match="quantile"):
        fallback_margin(fp32, int8, quantile=0.0)
    assert near_ties(np.array([[1.0, 0.9, -3.0], [2.0, 0.0, 0.1]]), 0.5).tolist() == [True, False]
    with pytest.raises(ValueError, match="num_labels"):
        near_ties(np.zeros(3), 0.1)


def test_runner_answers_near_ties_with_fp32_when_the_export_ships_a_fallback(bert_seq_run, tmp_path,
                                                                           auto_prefers_int8):
    from inference.runners import FALLBACK_FILE, ModelLoadError, load_runner

    out = tmp_path / "export"
    export(bert_seq_run, out, quantize="int8", agreement_floor=0.0)
    texts = ["Who wrote Hamlet?", "Write a haiku about rain.", "hi", "What is the tallest mountain in Africa?"]
    fp32 = load_runner(out, task="sequence", precision="fp32").classify(texts)
    int8 = load_runner(out, task="sequence").classify(texts)
    (out / FALLBACK_FILE).write_text(json.dumps({"margin": 1e9, "fp32_file": FP32_FILE}))  # every input is a tie
    runner = load_runner(out, task="sequence")
    assert np.array_equal(runner.classify(texts), fp32) and runner.rows_fallback == runner.rows_run == 4
    alone = load_runner(out, task="sequence", fallback=False)  # int8 alone, for benchmarks
    assert np.array_equal(alone.classify(texts), int8) and alone.rows_fallback == 0
    (out / FALLBACK_FILE).write_text(json.dumps({"margin": 0.0, "fp32_file": FP32_FILE}))  # no input is
    runner = load_runner(out, task="sequence")
    assert np.array_equal(runner.classify(texts), int8) and runner.rows_fallback == 0 and runner.rows_run == 4
    assert load_runner(out, task="sequence", precision="fp32").fallback_margin is None
    (out / FALLBACK_FILE).write_text(json.dumps({"margin": 0.5, "fp32_file": "missing.onnx"}))
    with pytest.raises(ModelLoadError, match=FALLBACK_FILE):
        load_runner(out, task="sequence")


def test_int8_that_misses_its_floor_ships_with_an_fp32_fallback_that_keeps_it(bert_seq_run, tmp_path, monkeypatch):
    """int8 noise simulated: the top fp32 logit of every input lowered by `shift`, more than any gap, so every
    label flips (agreement 0). The margin measured on the selection records is then `shift`, every flip has an
    int8 gap below it, and the fallback answers all of them with fp32: the export ships int8 with the fallback."""
    import training.export as ex
    from inference.runners import FALLBACK_FILE

    run = tmp_path / "run"
    shutil.copytree(bert_seq_run, run)
    texts = [f"Question number {i}: who wrote play {i}?" for i in range(24)]
    (run / "test.jsonl").write_text("".join(json.dumps({"text": t, "label": 1}) + "\n" for t in texts))
    plain = export(run, tmp_path / "fp32")
    assert plain["int8_status"] == "not_requested"
    batches = ex.encode_batches(ex.load_run_model(run)[1], [(t,) for t in texts], 96)
    gaps = np.concatenate([np.abs(np.diff(x, axis=1)).ravel() for x in ex.onnx_logits(tmp_path / "fp32" / FP32_FILE,
                                                                                        batches)])
    shift = float(2 * gaps.max() + 1e-3)
    real = ex.onnx_logits

    def noisy(path, batches):
        out = real(path, batches)
        if path.name != INT8_FILE:
            return out
        out = real(path.with_name(FP32_FILE), batches)
        for x in out:
            x[np.arange(len(x)), x.argmax(1)] -= shift
        return out

    monkeypatch.setattr(ex, "onnx_logits", noisy)
    monkeypatch.setattr(ex, "_quantize", lambda staging, *a, **k: (
        ex.quantize_int8(staging / FP32_FILE, staging / INT8_FILE, "blockwise_int8"), [{"scheme": "blockwise_int8",
                                                                                      "passed": False}])[1])
    report = export(run, tmp_path / "e", quantize="int8", agreement_floor=0.99, samples=12)
    int8 = report["parity"]["int8"]
    assert report["int8_status"] == "shipped" and report["status"] == "ok"
    assert int8["int8_alone_agreement"] == 0.0 and int8["label_agreement"] == 1.0 and int8["fallback_rate"] == 1.0
    assert int8["fallback_margin"] == pytest.approx(shift, rel=1e-4) and report["int8_fallback"]["passed"]
    spec = json.loads((tmp_path / "e" / FALLBACK_FILE).read_text())
    assert spec["fp32_file"] == FP32_FILE and spec["margin"] == pytest.approx(shift, rel=1e-4)
    assert "with the fp32 fallback 1.0000" in ex._summary(report)
    # a floor that even the fallback cannot keep: refused as before, and no fallback file ships
    report = export(run, tmp_path / "r", quantize="int8", agreement_floor=1.01, samples=12)
    assert report["int8_status"] == "refused" and not report["int8_fallback"]["passed"]
    assert not (tmp_path / "r" / FALLBACK_FILE).exists()


def test_nli_fallback_bench_refuses_an_export_without_a_fallback(bert_seq_run, tmp_path):
    from script_loader import load_script

    bench = load_script("bench_nli_fallback")
    out = tmp_path / "export"
    export(bert_seq_run, out, quantize="int8", agreement_floor=0.0)
    with pytest.raises(SystemExit, match="no int8_fallback.json"):
        bench.main(["--explainer", str(out), "--data-dir", str(tmp_path)])
    (out / "int8_fallback.json").write_text(json.dumps({"margin": 0.1, "fp32_file": FP32_FILE}))
    with pytest.raises(SystemExit, match="ragtruth_test_subset: not found"):
        bench.main(["--explainer", str(out), "--data-dir", str(tmp_path)])


def test_a_passing_scheme_is_trimmed_to_the_fewest_fp32_products_that_keep_the_floor(tmp_path, monkeypatch):
    """_quantize on a fake graph whose int8 error is a known sum per product: the named scheme that passes keeps
    four products fp32, the trim keeps only the two that matter, with the search's margin, and gives the scheme
    back when the margin cannot be shown; the products left in fp32 then go blockwise where the floor holds."""
    import training.export as ex
    from training.export import ParityInputs, ParityResult, search_target

    harm = {"ffn0": 0.008, "ffn1": 0.009, "ffn2": 0.0005, "ffn3": 0.0002, "attn0": 0.0001, "attn1": 0.0001}
    blockwise_share = {"value": 0.1}  # a blockwise product's harm, as a share of its dynamic int8 harm
    schemes = {"all": [], "ffn_fp32": ["ffn0", "ffn1", "ffn2", "ffn3"]}
    labels = {"n": 20_000}

    # each fake file holds the names of its quantised products ("nb:" = blockwise), so moves work as for real
    def quantize(src, dst, scheme, keep_fp32=()):
        kept = [*schemes.get(scheme, []), *keep_fp32]
        Path(dst).write_text(json.dumps(sorted(n for n in harm if n not in kept)))
        return kept

    def quantised(path):
        return set(json.loads(Path(path).read_text()))

    def blockwise(src, dst, nodes):
        Path(dst).write_text(json.dumps(sorted(quantised(src) | {f"nb:{n}" for n in nodes})))

    def agreement(path):
        return 1.0 - sum(harm[n[3:]] * blockwise_share["value"] if n.startswith("nb:") else harm[n]
                         for n in quantised(path))

    def check(path, reference, batches, task, *, floor=None, **_):
        a = agreement(path)
        return ParityResult(file=Path(path).name, n_examples=40, n_compared=labels["n"], max_abs_diff=1 - a,
                            mean_abs_diff=1 - a, label_agreement=a, threshold="", passed=a >= floor)

    monkeypatch.setattr(ex, "applicable_schemes", lambda path: list(schemes))
    monkeypatch.setattr(ex, "quantize_int8", quantize)
    monkeypatch.setattr(ex, "blockwise_products", blockwise)
    monkeypatch.setattr(ex, "check_file", check)
    monkeypatch.setattr(ex, "onnx_logits", lambda path, batches: [np.full((1, 2), 1 - agreement(path))])
    monkeypatch.setattr(ex, "compare", lambda reference, logits, batches, task: (1, 0, float(logits[0][0, 0]), 0))
    select = ParityInputs(batches=[], reference=[], source="parity.jsonl", n_examples=40, max_length=8)
    int8 = tmp_path / INT8_FILE

    target = search_target(0.99, 20_000)
    assert 0.99 < target < 0.9916  # two standard errors of an agreement near 0.99 on 20,000 labels
    tried = ex._quantize(tmp_path, select, "token", 0.99, disjoint=True)
    assert [t["scheme"] for t in tried] == ["all", "ffn_fp32", "sensitive_fp32", "kept_blockwise"]
    trim = tried[-2]
    assert trim["trims"] == "ffn_fp32" and trim["passed"] and trim["target"] == round(target, 5)
    # the most harmful first; with one the floor holds (0.9911) but not the margin, so two
    assert trim["kept_fp32"] == ["ffn1", "ffn0"] and trim["selection_agreement"] == 0.9991
    # the two kept products go blockwise (0.9991 - 0.0017 >= the plain floor): the file the check judges
    assert tried[-1] == {"scheme": "kept_blockwise", "products": 2, "selection_agreement": 0.9974, "passed": True}
    assert quantised(int8) == {"ffn2", "ffn3", "attn0", "attn1", "nb:ffn1", "nb:ffn0"}
    assert not (tmp_path / "model.kept_blockwise.onnx").exists()
    # blockwise that costs the floor: the trimmed file stays
    blockwise_share["value"] = 0.6
    tried = ex._quantize(tmp_path, select, "token", 0.99, disjoint=True)
    assert not tried[-1]["passed"] and quantised(int8) == {"ffn2", "ffn3", "attn0", "attn1"}
    blockwise_share["value"] = 0.1

    # a floor the trimmed file cannot keep with the margin: the scheme that passed is written back, and its four
    # fp32 products are tried blockwise (0.9998 - 0.0021 misses this floor, so they stay fp32)
    harm.update(ffn2=0.002, ffn3=0.002)  # ffn_fp32 alone: 0.9998; any trim: at most 0.998
    tried = ex._quantize(tmp_path, select, "token", 0.9985, disjoint=True)
    assert not tried[-2]["passed"] and tried[-1]["products"] == 4 and not tried[-1]["passed"]
    assert quantised(int8) == {"attn0", "attn1"}
    # without records of its own to choose on, nothing is trimmed (the check would judge what it was fitted to)
    assert [t["scheme"] for t in ex._quantize(tmp_path, select, "token", 0.99, disjoint=False)] == [
        "all", "ffn_fp32", "kept_blockwise"]
    # a selection too small to show the floor beyond noise: no search
    labels["n"] = 100
    harm.update(ffn2=0.0005, ffn3=0.0002)
    skipped = ex._quantize(tmp_path, select, "token", 0.99, disjoint=True)[-2]
    assert "skipped" in skipped and not skipped["passed"]
