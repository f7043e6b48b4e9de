"""The real path: tiny random BERT models exported to ONNX by training.export, run by inference.detect on ONNX
Runtime (also without torch), compared with the torch backend, int8, batching, long contexts and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from detect_helpers import export_tiny, make_run_dir

from inference.detect import HaluGate
from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS, SENTINEL_LABELS
from inference.runners import Features, ModelLoadError, load_runner
from inference.spans import encode_detector_input

REPO = Path(__file__).resolve().parents[1]
CONTEXT = "The Eiffel Tower was built 1887-1889. It is 330 meters tall and stands in Paris."
QUESTION = "When was the Eiffel Tower built, and how tall is it?"
ANSWER = "The Eiffel Tower was built in 1950 and is 500 meters tall."
# Random tiny models score every token near 0.5: thresholds at 0 make every stage produce output to compare.
LOW = ["hallucination_mitigation.hallucination_model.threshold=0.0",
       "hallucination_mitigation.hallucination_model.min_span_confidence=0.0",
       "hallucination_mitigation.hallucination_model.enable_nli_filtering=false",
       "hallucination_mitigation.fact_check_model.threshold=0.0"]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory, minilm_dir):
    root = tmp_path_factory.mktemp("tiny-halugate")
    out = {}
    for stage, task, labels, seed in (("sentinel", "sequence", SENTINEL_LABELS, 1),
                                      ("detector", "token", DETECTOR_LABELS, 2),
                                      ("explainer", "sequence", EXPLAINER_LABELS, 3)):
        run = make_run_dir(root / "runs" / stage, task, labels, minilm_dir, seed)
        export_tiny(run, root / "export" / stage, quantize=stage == "detector")
        out[stage] = {"run": run, "export": root / "export" / stage}
    return out


def gate_for(tiny, kind="export", backend="onnx", extra=(), precision="fp32"):
    return HaluGate.from_dirs(detector=tiny["detector"][kind], sentinel=tiny["sentinel"][kind],
                              explainer=tiny["explainer"][kind], backend=backend, precision=precision,
                              overrides=[*LOW, *extra])


def test_default_precision_takes_int8_where_the_export_shipped_it_and_it_is_faster(tiny, auto_prefers_int8):
    gate = gate_for(tiny, precision="auto")
    assert gate.settings.hallucination_mitigation.precision == "auto"
    assert gate.runners["detector"].precision == "int8"  # exported with an int8 file, faster (injected timings)
    assert gate.runners["detector"].precision_decision.source == "measured"
    assert gate.runners["sentinel"].precision == gate.runners["explainer"].precision == "fp32"  # fp32 only


def test_batched_windows_give_the_spans_of_one_at_a_time(tiny):
    gate = gate_for(tiny, extra=["hallucination_mitigation.hallucination_model.max_length=96"])
    filler = "Filler sentence number one about nothing in particular. "
    inputs = [{"context": filler * k + CONTEXT, "question": QUESTION, "answer": ANSWER} for k in (0, 6, 15)]
    batch = gate.detect_batch(inputs)
    assert [r.detector_windows for r in batch][-1] > 2  # several windows, of different counts per input
    for item, b in zip(inputs, batch):
        s = gate.detect(**item)
        assert b.detector_windows == s.detector_windows
        assert [(x.start, x.end) for x in b.spans] == [(x.start, x.end) for x in s.spans]
        assert b.hallucination_score == pytest.approx(s.hallucination_score, abs=1e-5)


def test_onnx_end_to_end(tiny):
    gate = gate_for(tiny)
    assert gate.load_errors == {}
    assert {r.backend for r in gate.runners.values()} == {"onnx"}
    assert "token_type_ids" in gate.runners["detector"].input_names  # read from the graph
    r = gate.detect(context=CONTEXT, question=QUESTION, answer=ANSWER)
    assert r.status == "ok" and r.fact_check_needed is True and 0 <= r.fact_check_confidence <= 1
    assert r.spans and r.hallucination_detected is True
    for s in r.spans:
        assert ANSWER[s.start:s.end] == s.text
        assert s.nli_label in EXPLAINER_LABELS and 1 <= s.severity <= 4
    assert r.headers["x-vsr-hallucination-detected"] == "true"
    assert r.headers["x-vsr-max-severity"] == str(r.max_severity)
    assert all(r.timings_ms[k] > 0 for k in ("sentinel", "detector", "explainer", "total"))
    json.loads(r.to_json())


def test_onnx_and_torch_backends_agree(tiny):
    onnx_gate, torch_gate = gate_for(tiny), gate_for(tiny, kind="run", backend="torch")
    assert {r.backend for r in torch_gate.runners.values()} == {"torch"}
    enc = encode_detector_input(onnx_gate.runners["detector"].tokenizer, CONTEXT, QUESTION, ANSWER, task_type="QA")
    feats = [Features(enc.input_ids, enc.token_type_ids)]
    a = onnx_gate.runners["detector"].probabilities(feats)[0]
    b = torch_gate.runners["detector"].probabilities(feats)[0]
    assert np.abs(a - b).max() < 1e-4
    ra = onnx_gate.detect(context=CONTEXT, question=QUESTION, answer=ANSWER)
    rb = torch_gate.detect(context=CONTEXT, question=QUESTION, answer=ANSWER)
    assert [(s.start, s.end, s.nli_label, s.severity) for s in ra.spans] == \
        [(s.start, s.end, s.nli_label, s.severity) for s in rb.spans]
    for sa, sb in zip(ra.spans, rb.spans):
        assert sa.confidence == pytest.approx(sb.confidence, abs=1e-4)
        assert sa.nli_confidence == pytest.approx(sb.nli_confidence, abs=1e-4)
    assert ra.fact_check_confidence == pytest.approx(rb.fact_check_confidence, abs=1e-4)


def test_int8_export_runs(tiny):
    fp32 = load_runner(tiny["detector"]["export"], "token")
    int8 = load_runner(tiny["detector"]["export"], "token", precision="int8")
    assert int8.onnx_path.name == "model_quantized.onnx" and int8.precision == "int8"
    enc = encode_detector_input(fp32.tokenizer, CONTEXT, QUESTION, ANSWER, task_type="QA")
    feats = [Features(enc.input_ids, enc.token_type_ids)]
    diff = np.abs(fp32.probabilities(feats)[0] - int8.probabilities(feats)[0]).max()
    assert diff < 0.05  # int8 rounding, not a different model
    with pytest.raises(ModelLoadError, match="no int8 ONNX model"):
        load_runner(tiny["sentinel"]["export"], "sequence", precision="int8")


def test_batch_equals_single_calls_with_padding(tiny):
    gate = gate_for(tiny)
    inputs = [{"context": CONTEXT, "question": QUESTION, "answer": ANSWER},
              {"context": CONTEXT * 5, "question": "How tall?", "answer": "It is 330 meters tall."},
              {"context": "Paris is in France.", "answer": "Paris is in Germany, said the 1950 guide."}]
    batch = gate.detect_batch(inputs)
    for item, b in zip(inputs, batch):
        s = gate.detect(**item)
        assert [(x.start, x.end, x.nli_label) for x in b.spans] == [(x.start, x.end, x.nli_label) for x in s.spans]
        for xb, xs in zip(b.spans, s.spans):
            assert xb.confidence == pytest.approx(xs.confidence, abs=1e-5)


def test_long_context_runs_in_windows_on_the_real_model(tiny):
    gate = gate_for(tiny)
    context = ("Filler sentence number one about nothing in particular. " * 150) + CONTEXT
    r = gate.detect(context=context, question=QUESTION, answer=ANSWER)
    assert r.status == "ok" and r.context_tokens > 1000 and r.detector_windows >= 3
    single = gate.detect(context=CONTEXT, question=QUESTION, answer=ANSWER)
    assert single.detector_windows == 1


def test_load_errors_name_the_problem(tiny, tmp_path):
    with pytest.raises(ModelLoadError, match="a token classifier, but a sequence classifier is needed"):
        load_runner(tiny["detector"]["export"], "sequence")
    with pytest.raises(ModelLoadError, match="model directory not found"):
        load_runner(tmp_path / "nope", "token")
    with pytest.raises(ModelLoadError, match="training.export"):
        load_runner(tiny["detector"]["run"], "token")  # a run dir has no ONNX file
    with pytest.raises(ModelLoadError, match="declares a token classifier"):
        load_runner(tiny["detector"]["run"], "sequence", backend="torch")


TORCH_FREE = textwrap.dedent("""
    import importlib.abc, json, sys

    class BlockTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "transformers", "optimum"):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, BlockTorch())
    from inference.detect import HaluGate
    gate = HaluGate.from_dirs(detector=sys.argv[1], sentinel=sys.argv[2], explainer=sys.argv[3],
                              overrides=["hallucination_mitigation.hallucination_model.threshold=0.0",
                                         "hallucination_mitigation.hallucination_model.min_span_confidence=0.0",
                                         "hallucination_mitigation.fact_check_model.threshold=0.0"])
    assert gate.load_errors == {}, gate.load_errors
    r = gate.detect(messages=json.loads(sys.argv[4]))
    assert r.status == "ok", r.to_json()
    assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "transformers")]
    print(r.to_json(indent=None))
""")


def test_onnx_path_imports_and_runs_without_torch(tiny):
    messages = [{"role": "user", "content": QUESTION}, {"role": "tool", "content": CONTEXT},
                {"role": "assistant", "content": ANSWER}]
    proc = subprocess.run([sys.executable, "-c", TORCH_FREE, str(tiny["detector"]["export"]),
                           str(tiny["sentinel"]["export"]), str(tiny["explainer"]["export"]), json.dumps(messages)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == "ok" and result["spans"]


def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "inference.detect", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, input=stdin, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_cli_prints_json_and_headers(tiny, tmp_path):
    config = tmp_path / "inference.yaml"
    config.write_text(textwrap.dedent(f"""
        hallucination_mitigation:
          fact_check_model: {{model_id: {tiny['sentinel']['export']}, threshold: 0.0}}
          hallucination_model: {{model_id: {tiny['detector']['export']}, threshold: 0.0, min_span_confidence: 0.0}}
          nli_model: {{model_id: {tiny['explainer']['export']}}}
        """))
    proc = _cli("--config", str(config), "--context", CONTEXT, "--question", QUESTION, "--answer", ANSWER)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "ok" and result["hallucination_detected"] is True
    assert "x-vsr-hallucination-detected: true" in proc.stderr

    batch = "\n".join(json.dumps(x) for x in [
        {"messages": [{"role": "user", "content": "Write a poem"}, {"role": "assistant", "content": "Roses."}]},
        {"context": CONTEXT, "question": QUESTION, "answer": ANSWER}])
    proc = _cli("--config", str(config), "--input", "-", "--compact", stdin=batch)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [(x["status"], x["reason"]) for x in rows] == [("skipped", "no_context"), ("ok", "")]
    assert rows[0]["unverified_factual"] is True  # the Sentinel threshold is 0 here: every prompt is fact-seeking


def test_cli_bad_input_is_one_clear_line(tiny):
    proc = _cli("--detector", str(tiny["detector"]["export"]), "--context", CONTEXT)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --answer is required (or --input / --messages)"
    proc = _cli("--detector", str(tiny["detector"]["export"]), "--input", "-", stdin='{"answer": 3}')
    assert proc.returncode == 2 and "answer: expected a string, got int" in proc.stderr
    proc = _cli("--config", "nope.yaml", "--answer", "a")
    assert proc.returncode == 2 and "nope.yaml: config file not found" in proc.stderr
    # a model named on the command line that does not load: the flag and the reason, no result
    proc = _cli("--detector", str(tiny["detector"]["export"]), "--explainer", "/nonexistent/explainer",
                "--context", CONTEXT, "--answer", ANSWER)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().endswith(
        "error: --explainer: /nonexistent/explainer: model directory not found")


def test_repository_config_loads_with_overrides(tiny):
    gate = HaluGate.from_config(REPO / "configs" / "inference.yaml", [
        f"hallucination_mitigation.fact_check_model.model_id={tiny['sentinel']['export']}",
        f"hallucination_mitigation.hallucination_model.model_id={tiny['detector']['export']}",
        f"hallucination_mitigation.nli_model.model_id={tiny['explainer']['export']}",
        "hallucination_mitigation.precision=int8"])
    assert gate.load_errors.keys() == {"sentinel", "explainer"}  # only the Detector was exported with int8
    assert gate.runners["detector"].precision == "int8"
    r = gate.detect(context=CONTEXT, question=QUESTION, answer=ANSWER)
    # "1950" and "500 meters" are flagged by the exact check whatever the random Detector says, so the missing
    # Explainer is reported as well
    assert [s.text for s in r.spans] == ["1950", "500 meters"]
    assert r.status == "unavailable" and {e["stage"] for e in r.errors} == {"sentinel", "explainer"}


def test_long_sentinel_prompt_and_nli_pair_are_cut_to_fit(tiny):
    runner = load_runner(tiny["sentinel"]["export"], "sequence")
    feats = runner.encode("word " * 2000)
    assert len(feats) == 512 and feats.input_ids[-1] == runner.tok.sep_id
    pair = runner.encode("premise " * 600, "hypothesis " * 50)
    assert len(pair) == 512 and pair.token_type_ids.count(1) == 51  # the longer side was cut
    assert runner.classify(["word " * 2000, ("premise " * 600, "short hypothesis")]).shape == (2, 2)
    assert runner.tokenizer.truncation is None  # the shared tokenizer is never left truncating


def test_threads_and_spin_wait_settings_keep_the_results(tiny):
    feats = [Features(list(range(101, 140)), [0] * 39)]
    default = load_runner(tiny["sentinel"]["export"], "sequence")
    server = load_runner(tiny["sentinel"]["export"], "sequence", num_threads=1, spin_wait=False)
    assert np.allclose(default.probabilities(feats)[0], server.probabilities(feats)[0], atol=1e-6)
