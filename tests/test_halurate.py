"""halurate: generation through a loopback LLM endpoint, HaluGate with rule-based runners (and real tiny models
through the CLI), resume without regeneration, score mode, unavailable / refused inputs, and exact aggregate
metrics on a hand-built fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.backends import FatalBackendError, make_backend
from eval.halurate import Runner, compute_metrics, load_records
from eval.halurate.report import highlight, worst
from eval.halurate.runner import RecordLog
from tests.halurate_fakes import fake_gate
from tests.loopback import OpenAIEmulator, Reply

REPO = Path(__file__).resolve().parents[1]

RECORDS = [
    {"id": "q1", "context": "The Oberoi Group has its head office in Delhi.", "question": "Where is the head office?",
     "category": "hotels", "reference_answer": "Delhi"},
    {"id": "q2", "context": "Arthur's Magazine was published in Philadelphia.", "question": "Where was it published?",
     "category": "magazines"},
    {"id": "q3", "context": "The Berlin Wall fell in 1989.", "question": "When did the wall fall?",
     "category": "history"},
    {"id": "q4", "context": "Mount Kenya is in Kenya.", "question": "Write a poem about the mountain.",
     "category": "creative"},
    {"id": "q5", "context": "The Eiffel Tower is in Paris.", "question": "Where is the Eiffel Tower?",
     "category": "history"},
]
ANSWERS = {"head office": "The head office is in Mumbai.", "published": "It was published in Philadelphia.",
           "wall fall": "The wall fell in 1999.", "poem": "Snow on the peak, Berlin far away.",
           "Eiffel": "The Eiffel Tower is in Paris."}


def make_classifier_dir(base: str, task: str, path: Path) -> str:
    """A tiny random classifier run dir (merged model + tokenizer + label_map.json) for the torch backend."""
    import torch

    from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS
    from training.models import build_model, load_tokenizer

    labels = EXPLAINER_LABELS if task == "sequence" else DETECTOR_LABELS
    torch.manual_seed(0)
    model = build_model(base, task, labels, None)
    path.mkdir(parents=True)
    model.save_pretrained(path, safe_serialization=True)
    load_tokenizer(base).save_pretrained(path)
    (path / "label_map.json").write_text(json.dumps({"labels": labels}))
    return str(path)


def answer_for(request) -> str:
    for key, answer in ANSWERS.items():
        if key in request.prompt:
            return answer
    return "I do not know."


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def data_file(tmp_path) -> Path:
    return write_jsonl(tmp_path / "records.jsonl", RECORDS)


def backend_for(server):
    return make_backend("openai", model="m", base_url=server.url + "/v1", max_retries=0, timeout_s=10)


def run(records, gate, out, server=None, **kw):
    backend = backend_for(server) if server is not None else None
    mode = "generate" if backend is not None else "score"
    runner = Runner(records, gate, out, mode=mode, backend=backend, gen_kwargs={"max_output_tokens": 32},
                    batch_size=2, fingerprint={"mode": mode, "model": "m"}, **kw)
    return runner.run()


# ---- generation + detection + resume ------------------------------------------------------------------------

def test_generate_detect_and_resume_without_regeneration(tmp_path, data_file, minilm_dir):
    records = load_records(str(data_file))
    out = tmp_path / "run"
    gate = fake_gate(minilm_dir)
    calls = {"n": 0}

    def flaky(request):  # the 4th call fails for good: the run stops, the log keeps what is done
        calls["n"] += 1
        return Reply.error(401, "bad key") if calls["n"] == 4 else answer_for(request)

    with OpenAIEmulator(flaky) as srv, pytest.raises(FatalBackendError):
        run(records, gate, out, srv)
    logged = RecordLog(out).load()
    assert sorted(k for k, v in logged.items() if v["answer"] is not None) == ["q1", "q2", "q3"]
    assert logged["q1"]["verdict"] == "hallucinated" and logged["q3"]["verdict"] == "pending"

    with OpenAIEmulator(answer_for) as srv:
        entries, stats = run(records, gate, out, srv)
    assert len(srv.requests) == 2  # only q4 and q5 are generated again
    assert all("Question: Write a poem" in p or "Eiffel" in p for p in srv.prompts)
    assert stats.answers_reused == 3 and stats.generated == 2 and stats.detections_reused == 2
    v = {e["id"]: e["verdict"] for e in entries}
    assert v == {"q1": "hallucinated", "q2": "clean", "q3": "hallucinated", "q4": "skipped", "q5": "clean"}
    q1 = entries[0]["detection"]["spans"][0]
    assert q1["text"] == "Mumbai" and q1["nli_label"] == "contradiction" and q1["severity"] == 4
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["q1", "q2", "q3", "q4", "q5"]  # compacted, in data order

    gate.runners["detector"].calls = 0
    with OpenAIEmulator(answer_for) as srv:
        _, stats = run(records, gate, out, srv)
    assert len(srv.requests) == 0 and gate.runners["detector"].calls == 0 and stats.detections_reused == 5


def test_changed_detection_settings_redetect_without_regeneration(tmp_path, data_file, minilm_dir):
    records = load_records(str(data_file))
    out = tmp_path / "run"
    with OpenAIEmulator(answer_for) as srv:
        run(records, fake_gate(minilm_dir), out, srv)
    gate = fake_gate(minilm_dir, sentinel=False, explainer=False, bad_words=("published",))
    with OpenAIEmulator(answer_for) as srv:
        entries, stats = run(records, gate, out, srv)
    assert len(srv.requests) == 0 and stats.detected == 5 and stats.detections_reused == 0
    assert {e["id"]: e["verdict"] for e in entries}["q2"] == "hallucinated"
    # no Sentinel: the poem is checked too, and its "Berlin" is a name its context lacks (the exact check)
    assert {e["id"]: e["verdict"] for e in entries}["q4"] == "hallucinated"


def test_resume_refuses_changed_data_or_model(tmp_path, data_file, minilm_dir):
    from eval.gemhall.runner import ResumeError

    records = load_records(str(data_file))
    out = tmp_path / "run"
    with OpenAIEmulator(answer_for) as srv:
        run(records, fake_gate(minilm_dir), out, srv)
    changed = write_jsonl(tmp_path / "changed.jsonl", [dict(RECORDS[0], context="Something else.")])
    with OpenAIEmulator(answer_for) as srv, pytest.raises(ResumeError, match="q1"):
        run(load_records(str(changed)), fake_gate(minilm_dir), out, srv)
    with OpenAIEmulator(answer_for) as srv:
        runner = Runner(records, fake_gate(minilm_dir), out, backend=backend_for(srv),
                        fingerprint={"mode": "generate", "model": "other"})
        with pytest.raises(ResumeError, match="model"):
            runner.run()
        assert len(srv.requests) == 0


def test_generation_errors_are_retried_on_the_next_run(tmp_path, data_file, minilm_dir):
    records = load_records(str(data_file))[:2]
    out = tmp_path / "run"
    with OpenAIEmulator([Reply.server_error(500), "It was published in Philadelphia."]) as srv:
        entries, _ = run(records, fake_gate(minilm_dir), out, srv)
    assert [e["verdict"] for e in entries] == ["generation_error", "clean"]
    assert compute_metrics(entries)["verdicts"]["generation_error"] == 1
    with OpenAIEmulator(answer_for) as srv:
        entries, _ = run(records, fake_gate(minilm_dir), out, srv)
    assert len(srv.requests) == 1 and [e["verdict"] for e in entries] == ["hallucinated", "clean"]


# ---- score mode, unavailable, refused input -----------------------------------------------------------------

def test_score_mode_uses_existing_answers_and_gold(tmp_path, minilm_dir):
    rows = [{"id": "a", "context": "Delhi is the seat.", "question": "Where?", "answer": "It is in Mumbai.",
             "spans": [{"start": 9, "end": 15, "text": "Mumbai"}], "task_type": "qa"},
            {"id": "b", "context": "Delhi is the seat.", "question": "Where?", "answer": "It is in Delhi.",
             "spans": [], "task_type": "QA"},
            {"id": "c", "context": "Delhi is the seat.", "question": "Where?", "answer": "Delhi, in 1999.",
             "spans": [], "task_type": "QA"}]
    records = load_records(str(write_jsonl(tmp_path / "a.jsonl", rows)), mode="score")
    entries, stats = run(records, fake_gate(minilm_dir), tmp_path / "run")
    assert stats.generated == 0 and [e["verdict"] for e in entries] == ["hallucinated", "clean", "hallucinated"]
    m = compute_metrics(entries)
    assert m["gold"] == {"n": 3, "gold_hallucinated": 1, "precision": 0.5, "recall": 1.0, "f1": 0.6667,
                         "accuracy": 0.6667}
    assert set(m["by_task_type"]) == {"QA"}
    with pytest.raises(Exception, match="answer"):
        load_records(str(write_jsonl(tmp_path / "b.jsonl", [{"context": "x", "question": "y"}])), mode="score")


def test_unavailable_is_never_clean_and_is_retried(tmp_path, minilm_dir):
    records = load_records(str(write_jsonl(tmp_path / "a.jsonl", [
        {"id": "a", "context": "Delhi.", "question": "Where?", "answer": "Delhi."}])), mode="score")
    gate = fake_gate(minilm_dir)

    def broken(*a, **k):
        raise RuntimeError("onnxruntime exploded")

    gate.runners["detector"].logits = broken
    entries, _ = run(records, gate, tmp_path / "run")
    m = compute_metrics(entries)
    assert entries[0]["verdict"] == "unavailable" and m["unavailable"] == 1
    assert m["checked"] == 0 and m["hallucination_rate"] is None and m["hallucination_rate_scored"] is None
    entries, stats = run(records, fake_gate(minilm_dir), tmp_path / "run")
    assert stats.detected == 1 and entries[0]["verdict"] == "clean"


def test_refused_input_is_isolated_from_its_batch(tmp_path, minilm_dir):
    rows = [{"id": "short", "context": "Delhi.", "question": "Where?", "answer": "Delhi."},
            {"id": "long", "context": "word " * 400, "question": "Where?", "answer": "Delhi."}]
    records = load_records(str(write_jsonl(tmp_path / "a.jsonl", rows)), mode="score")
    gate = fake_gate(minilm_dir)
    gate.settings.hallucination_mitigation.hallucination_model.max_context_tokens = 100
    entries, _ = run(records, gate, tmp_path / "run")
    assert [e["verdict"] for e in entries] == ["clean", "input_error"]
    assert "max_context_tokens" in entries[1]["detection_error"]
    assert compute_metrics(entries)["verdicts"]["input_error"] == 1


# ---- exact aggregates on a hand-built fixture ----------------------------------------------------------------

def _span(sev, label, conf=0.9):
    return {"start": 0, "end": 3, "text": "abc", "confidence": conf, "nli_label": label, "nli_confidence": 0.8,
            "severity": sev, "explanation": ""}


def _entry(i, verdict, spans=(), category="c1", task="QA", sentinel=0.9, reason="", status=None):
    status = status or {"hallucinated": "ok", "clean": "ok"}.get(verdict, verdict)
    det = None if verdict in ("generation_error", "input_error", "pending") else {
        "status": status, "reason": reason, "spans": list(spans), "max_severity": max((s["severity"] for s in spans),
                                                                                       default=0),
        "fact_check_confidence": sentinel, "fact_check_needed": None if sentinel is None else sentinel >= 0.6,
        "timings_ms": {"total": 10.0}}
    return {"id": f"r{i}", "verdict": verdict, "answer": None if verdict == "generation_error" else "abc",
            "category": category, "task_type": task, "detection": det,
            "generation": {"latency_s": 2.0, "error": "boom" if verdict == "generation_error" else None}}


def test_exact_aggregate_metrics_on_a_hand_built_fixture():
    entries = [
        _entry(1, "hallucinated", [_span(4, "contradiction"), _span(2, "neutral")]),
        _entry(2, "hallucinated", [_span(2, "neutral")], category="c2"),
        _entry(3, "hallucinated", [_span(1, "entailment"), _span(2, None)], task="Summary"),
        _entry(4, "clean"),
        _entry(5, "clean", category="c2"),
        _entry(6, "skipped", sentinel=0.2, reason="no_fact_check_needed"),
        _entry(7, "skipped", sentinel=None, reason="no_context", category="c2"),
        _entry(8, "unavailable", sentinel=None, status="unavailable"),
        _entry(9, "input_error"),
        _entry(10, "generation_error"),
    ]
    m = compute_metrics(entries)
    assert m["n_records"] == 10 and m["answered"] == 9
    assert m["verdicts"] == {"hallucinated": 3, "clean": 2, "skipped": 2, "unavailable": 1, "input_error": 1,
                             "generation_error": 1, "pending": 0}
    assert (m["checked"], m["scored"], m["hallucinated"]) == (5, 7, 3)
    assert m["hallucination_rate"] == 0.6 and m["hallucination_rate_scored"] == 0.4286
    assert m["unavailable"] == 1 and m["unavailable_rate"] == 0.1111
    assert m["spans"] == 5 and m["spans_per_response"] == 1.0 and m["spans_per_hallucinated_response"] == 1.6667
    assert m["nli_labels"] == {"contradiction": 1, "neutral": 2, "entailment": 1, "unexplained": 1}
    assert m["contradiction_vs_fabrication"] == {"contradiction": 1, "fabrication": 2, "contradiction_share": 0.3333,
                                                 "ratio": 0.5}
    assert m["severity_histogram"] == {"1": 1, "2": 3, "3": 0, "4": 1}
    assert m["max_severity_histogram"] == {"0": 2, "1": 0, "2": 2, "3": 0, "4": 1}
    assert m["sentinel"] == {"asked": 6, "skipped": 1, "skip_rate": 0.1667}
    assert m["skip_reasons"] == {"no_fact_check_needed": 1, "no_context": 1}
    assert m["by_category"]["c1"] == {"n": 7, "checked": 3, "hallucinated": 2, "skipped": 1, "unavailable": 1,
                                      "hallucination_rate": 0.6667, "spans_per_response": 1.3333}
    assert m["by_category"]["c2"]["hallucination_rate"] == 0.5
    assert m["by_task_type"]["Summary"] == {"n": 1, "checked": 1, "hallucinated": 1, "skipped": 0, "unavailable": 0,
                                            "hallucination_rate": 1.0, "spans_per_response": 2.0}
    assert m["timing"] == {"generation_s_mean": 2.0, "generation_s_total": 18.0, "detection_batch_ms_mean": 10.0}
    assert [e["id"] for e in worst(entries, 3)] == ["r1", "r3", "r2"]  # severity, then span count


def test_reference_answer_block_and_highlight():
    from eval.halurate.metrics import reference_match

    assert reference_match("The office is in Delhi, India.", "Delhi") is True
    assert reference_match("Mumbai.", "Delhi") is False and reference_match(None, "Delhi") is None
    a = _entry(1, "hallucinated", [_span(4, "contradiction")])
    b = _entry(2, "clean")
    a.update(answer="Mumbai.", reference_answer="Delhi")
    b.update(answer="Delhi.", reference_answer="Delhi")
    ref = compute_metrics([a, b])["reference_answer"]
    assert ref["contains_reference"]["hallucination_rate"] == 0.0 and ref["lacks_reference"]["hallucinated"] == 1
    html = highlight("It is in <Mumbai>.", [{"start": 9, "end": 17, "severity": 4, "nli_label": "contradiction"}])
    assert html == "It is in <mark>&lt;Mumbai&gt;</mark><sup>[contradiction, sev 4]</sup>."


# ---- CLI with real tiny models -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, tiny_bert_dir):
    base = tmp_path_factory.mktemp("halurate-models")
    return {"detector": make_classifier_dir(tiny_bert_dir, "token", base / "detector"),
            "explainer": make_classifier_dir(tiny_bert_dir, "sequence", base / "explainer")}


def test_cli_generate_and_report_with_real_tiny_models(tmp_path, data_file, tiny_models):
    from eval.halurate.cli import main

    out = tmp_path / "run"
    args = ["--data", str(data_file), "--backend", "openai", "--model", "m", "--max-retries", "0",
            "--inference-config", str(REPO / "configs" / "inference.yaml"), "--sentinel", "none",
            "--detector", tiny_models["detector"], "--explainer", tiny_models["explainer"], "--detect-backend",
            "torch", "--set", "hallucination_mitigation.hallucination_model.threshold=0.0",
            "--set", "hallucination_mitigation.hallucination_model.min_span_confidence=0.0",
            "--set", "hallucination_mitigation.hallucination_model.enable_nli_filtering=false", "--out", str(out)]
    with OpenAIEmulator(answer_for) as srv:
        assert main(args + ["--base-url", srv.url + "/v1"]) == 0
        assert len(srv.requests) == 5
    entries = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [e["verdict"] for e in entries] == ["hallucinated"] * 5  # threshold 0: every answer token is flagged
    assert all(s["nli_label"] in ("entailment", "neutral", "contradiction") for s in entries[0]["detection"]["spans"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["hallucination_rate"] == 1.0 and metrics["sentinel"]["asked"] == 0
    assert set(metrics["by_category"]) == {"hotels", "magazines", "history", "creative"}
    report = (out / "report.md").read_text()
    assert "<mark>" in report and "Worst examples (5 of 5 flagged)" in report and "python -m eval.halurate" in report
    assert all((out / "plots" / f).is_file() for f in ("severity.png", "nli_labels.png", "by_group.png"))
    assert (out / "config.yaml").is_file() and (out / "run.json").is_file()
    with OpenAIEmulator(answer_for) as srv:  # resume through the CLI: nothing to generate or detect
        assert main(args + ["--base-url", srv.url + "/v1"]) == 0
        assert len(srv.requests) == 0


def test_cli_errors_name_the_problem(tmp_path, capsys, tiny_models):
    from eval.halurate.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"context": "x", "question": "y"}\n{"context": 3}\n')
    assert main(["--data", str(bad), "--mode", "score", "--detector", tiny_models["detector"]]) == 2
    assert f"{bad}:1: field 'answer' is required" in capsys.readouterr().err
    assert main(["--data", str(bad), "--backend", "openai", "--model", "m", "--detector", tiny_models["detector"]]) == 2
    assert f"{bad}:2: context must be" in capsys.readouterr().err
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data: {sourc: x}\n")
    assert main(["--config", str(cfg)]) == 2
    assert "data.sourc: unknown key" in capsys.readouterr().err


def test_shipped_config_loads():
    from eval.halurate.cli import parse_config

    cfg = parse_config(["--config", str(REPO / "configs" / "halurate.yaml")])
    assert cfg.data.source == "halueval_qa" and cfg.data.limit == 100 and cfg.generation.backend == "local"
    assert cfg.detection.detector == "runs/detector-offline"


# ---- real data -----------------------------------------------------------------------------------------------

@pytest.mark.data
def test_real_data_sources(data_dir):
    qa = load_records("halueval_qa", data_dir=data_dir)
    assert len(qa) == 1000 and qa[0].id == "halueval_qa-0" and qa[0].reference_answer == "Arthur's Magazine"
    assert qa[0].question and qa[0].context and qa[0].answer is None
    scored = load_records("halueval_qa", mode="score", data_dir=data_dir, limit=4)
    assert [bool(r.gold_spans) for r in scored] == [False, True, False, True]
    rt = load_records("ragtruth_test_subset", mode="score", data_dir=data_dir)
    assert {r.task_type for r in rt} == {"QA", "Summary", "Data2txt"} and all(r.category for r in rt)
    gen = load_records("ragtruth_test_subset", data_dir=data_dir)
    assert len(gen) < len(rt) and len({r.id for r in gen}) == len(gen)


def test_model_dirs_reach_the_gate_settings_as_given():
    """--detector 'runs/x #1' is the model dir, not `runs/x` (no YAML re-parse of the flag values)."""
    from eval.halurate.config import DetectionSettings
    from eval.halurate.detection import gate_settings

    settings = DetectionSettings(detector="runs/x #1", sentinel="none", explainer="on", backend="torch",
                                 overrides=["hallucination_mitigation.hallucination_model.threshold=0.5"])
    m = gate_settings(settings).hallucination_mitigation
    assert m.hallucination_model.model_id == "runs/x #1" and m.hallucination_model.threshold == 0.5
    assert m.fact_check_model.model_id == "" and m.nli_model.model_id == "on"
    assert m.backend == "torch"
