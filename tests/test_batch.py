"""python -m inference.batch on tiny random models exported to ONNX: every input format, the column mapping,
bad rows, atomic shards, the resume after a SIGKILL, the config check, worker processes, and the report's
figures on a hand-made output; the Ray engine on a local Ray instance: the same rows and results as the local
engine, and its resume."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from inference.aggregate import Tally, wilson_interval
from inference.batch import io as bio
from inference.batch.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

REPO = Path(__file__).resolve().parents[1]
CONTEXT = "The Eiffel Tower was built 1887-1889. It is 330 meters tall and stands in Paris."
# Random tiny models score tokens near 0.5: a threshold of 0.5 flags some answers and not others.
LOW = {"enabled": True, "backend": "onnx", "precision": "fp32", "num_threads": 1}


def _config(tiny_root: Path, path: Path, **detector) -> Path:
    m = dict(LOW)
    m["fact_check_model"] = {"model_id": str(tiny_root / "sentinel"), "threshold": 0.0}
    m["hallucination_model"] = {"model_id": str(tiny_root / "detector"), "threshold": 0.5,
                                "min_span_confidence": 0.0, **detector}
    m["nli_model"] = {"model_id": str(tiny_root / "explainer")}
    path.write_text(yaml.safe_dump({"hallucination_mitigation": m}), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_root(tiny_exports) -> Path:
    """The folder of conftest's tiny Sentinel / Detector / Explainer exports."""
    return tiny_exports["detector"].parent


@pytest.fixture(scope="session")
def config(tiny_root, tmp_path_factory) -> Path:
    return _config(tiny_root, tmp_path_factory.mktemp("batch-config") / "inference.yaml")


def rows(n: int, start: int = 0) -> list[dict]:
    out = []
    for i in range(start, start + n):
        out.append({"id": f"r{i}", "context": CONTEXT, "question": "How tall is the Eiffel Tower?" if i % 3 else "",
                    "answer": f"It is {300 + 7 * i} meters tall and was built in {1880 + i % 20}.",
                    "model": f"m{i % 2}"})
    return out


def write_jsonl(path: Path, items: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in items), encoding="utf-8")
    return path


def run_cli(config: Path, inp: Path, out: Path, *extra: str) -> int:
    return main(["--config", str(config), "--input", str(inp), "--output", str(out), *extra])


# ---- formats and columns -----------------------------------------------------------------------------------

def test_every_input_format_gives_the_same_results(config, tmp_path):
    data = rows(10)
    src = tmp_path / "src"
    src.mkdir()
    inputs = {"jsonl": write_jsonl(src / "a.jsonl", data)}
    (src / "a.json").write_text(json.dumps(data), encoding="utf-8")
    inputs["json"] = src / "a.json"
    import csv

    with (src / "a.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(data[0]))
        w.writeheader()
        w.writerows(data)
    inputs["csv"] = src / "a.csv"
    pq.write_table(pa.Table.from_pylist(data), src / "a.parquet", row_group_size=3)
    inputs["parquet"] = src / "a.parquet"
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(data).save_to_disk(str(src / "ds"))
    inputs["datasets"] = src / "ds"

    outputs = {}
    for fmt, path in inputs.items():
        assert bio.Source.open(path).format == fmt
        assert run_cli(config, path, tmp_path / fmt, "--shard-size", "4", "--group-by", "model") == 0
        outputs[fmt] = bio.read_rows(tmp_path / fmt)
    ref = outputs["jsonl"]
    assert [r["id"] for r in ref] == [d["id"] for d in data] and [r["row"] for r in ref] == list(range(10))
    assert [r["model"] for r in ref] == [d["model"] for d in data]
    assert {r["status"] for r in ref} <= {"ok", "skipped"} and any(r["status"] == "ok" for r in ref)
    assert [len(pq.read_table(p)) for p in bio.shard_paths(tmp_path / "jsonl")] == [4, 4, 2]
    for fmt, recs in outputs.items():
        assert recs == ref, fmt
    # the shard columns are the result JSON's own fields, spans a list of structs
    table = pq.read_table(bio.shard_paths(tmp_path / "jsonl")[0])
    assert pa.types.is_list(table.schema.field("spans").type)
    assert pa.types.is_struct(table.schema.field("spans").type.value_type)
    saved = yaml.safe_load((tmp_path / "jsonl" / "config.yaml").read_text())
    assert saved["batch"]["shard_size"] == 4 and saved["batch"]["format"] == "jsonl"
    assert saved["inference"]["hallucination_mitigation"]["hallucination_model"]["threshold"] == 0.5


def test_a_shard_row_is_the_result_json(config, tmp_path):
    from inference.detect import HaluGate

    data = rows(3)
    assert run_cli(config, write_jsonl(tmp_path / "a.jsonl", data), tmp_path / "out") == 0
    gate = HaluGate.from_config(config)
    want = [r.to_dict() for r in gate.detect_batch([{k: d[k] for k in ("context", "question", "answer")}
                                                     for d in data])]
    got = [bio.record_result(r) for r in bio.read_rows(tmp_path / "out")]
    for g, w in zip(got, want):
        w.pop("timings_ms")
        g.pop("timings_ms")
        assert g == w


def test_column_mapping_and_messages(config, tmp_path):
    data = rows(4)
    mapped = [{"uid": d["id"], "docs": [d["context"]], "prompt": d["question"], "reply": d["answer"]} for d in data]
    chats = [{"chat": [{"role": "tool", "content": d["context"]}, {"role": "user", "content": d["question"]},
                       {"role": "assistant", "content": d["answer"]}]} for d in data]
    plain = [{k: d[k] for k in ("context", "question", "answer")} for d in data]
    assert run_cli(config, write_jsonl(tmp_path / "ref.jsonl", data), tmp_path / "ref") == 0
    assert run_cli(config, write_jsonl(tmp_path / "m.jsonl", mapped), tmp_path / "m", "--id-column", "uid",
                   "--context-column", "docs", "--question-column", "prompt", "--answer-column", "reply") == 0
    assert run_cli(config, write_jsonl(tmp_path / "c.jsonl", chats), tmp_path / "c", "--messages-column",
                   "chat") == 0
    assert run_cli(config, write_jsonl(tmp_path / "p.jsonl", plain), tmp_path / "p") == 0
    ref = bio.read_rows(tmp_path / "ref")
    for name in ("m", "c", "p"):
        got = bio.read_rows(tmp_path / name)
        want_ids = [str(i) for i in range(4)] if name in ("c", "p") else [d["id"] for d in data]
        assert [r["id"] for r in got] == want_ids, name  # no id column: the row number
        for g, w in zip(got, ref):
            assert (g["status"], g["hallucination_score"], g["spans"]) == (w["status"], w["hallucination_score"],
                                                                          w["spans"]), name
    # a column named by a flag that the file does not have is a mistake in the command (exit 2)
    pq.write_table(pa.Table.from_pylist(mapped), tmp_path / "m.parquet")
    assert run_cli(config, tmp_path / "m.parquet", tmp_path / "bad", "--answer-column", "nope") == 2
    assert run_cli(config, tmp_path / "m.parquet", tmp_path / "bad2") == 2  # neither answer nor messages


def test_bad_rows_are_invalid_and_never_stop_the_run(tiny_root, tmp_path, capsys):
    cfg = _config(tiny_root, tmp_path / "cfg.yaml", max_context_tokens=64)
    good = rows(3)
    items = [good[0], {"id": "no-answer", "context": CONTEXT}, {"id": "int-answer", "answer": 5},
             {"id": "bad-context", "context": {"a": 1}, "answer": "x y"}, "{not json", "[1, 2]",
             {"id": "too-long", "context": CONTEXT * 20, "answer": "It is 500 meters tall."},
             {"id": "bad-chat", "messages": [{"role": "user", "content": "hi"}]}, good[1], good[2]]
    assert run_cli(cfg, write_jsonl(tmp_path / "a.jsonl", items), tmp_path / "out", "--shard-size", "4") == 0
    out = {r["id"]: r for r in bio.read_rows(tmp_path / "out")}
    assert len(out) == len(items)
    for key in ("no-answer", "int-answer", "bad-context", "4", "5", "too-long", "bad-chat"):
        assert out[key]["status"] == "invalid" and out[key]["reason"], key
        assert out[key]["hallucination_detected"] is None
    assert "answer" in out["no-answer"]["reason"] and "JSON" in out["4"]["reason"]
    assert "max_context_tokens" in out["too-long"]["reason"] and "inputs[" not in out["too-long"]["reason"]
    assert "assistant" in out["bad-chat"]["reason"]
    for d in good:  # the neighbours of the bad rows (same chunks) are scored
        assert out[d["id"]]["status"] in ("ok", "skipped")
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["verdicts"]["invalid"] == 7 and rep["rows"] == 10


# ---- shards, resume, config -------------------------------------------------------------------------------------

def test_shards_are_written_atomically_and_a_rerun_skips_them(config, tmp_path, monkeypatch):
    inp = write_jsonl(tmp_path / "a.jsonl", rows(12))
    out = tmp_path / "out"
    real = pq.write_table
    calls = {"n": 0}

    def dying_write(table, where, **kw):
        calls["n"] += 1
        if calls["n"] == 2:  # the second shard dies half written
            Path(where).write_bytes(b"PAR1 half a file")
            raise OSError("disk full (simulated)")
        return real(table, where, **kw)

    monkeypatch.setattr(pq, "write_table", dying_write)
    assert run_cli(config, inp, out, "--shard-size", "4", "--no-report") == 2
    monkeypatch.setattr(pq, "write_table", real)
    names = sorted(p.name for p in (out / "shards").iterdir())
    assert "part-00000.parquet" in names and "part-00001.parquet" not in names  # never a half shard
    assert any(n.startswith(".part-00001") for n in names)  # its temporary file
    assert run_cli(config, inp, out, "--shard-size", "4", "--no-report") == 0
    run = json.loads((out / "run.json").read_text())
    assert run["shards_before"] == 1 and run["shards_written"] == 2 and run["rows_scored"] == 8
    assert sorted(p.name for p in (out / "shards").iterdir()) == [f"part-0000{k}.parquet" for k in range(3)]
    assert run_cli(config, inp, out, "--shard-size", "4", "--no-report") == 0  # nothing left to do
    assert json.loads((out / "run.json").read_text())["rows_scored"] == 0
    # a shard with the wrong row count (a different input length) is scored again
    pq.write_table(pq.read_table(bio.shard_path(out, 2)).slice(0, 1), bio.shard_path(out, 2))
    assert run_cli(config, inp, out, "--shard-size", "4", "--no-report") == 0
    assert json.loads((out / "run.json").read_text())["rows_scored"] == 4


def test_a_rerun_with_another_config_is_refused(config, tmp_path, capsys):
    inp = write_jsonl(tmp_path / "a.jsonl", rows(4))
    out = tmp_path / "out"
    assert run_cli(config, inp, out, "--shard-size", "2", "--no-report") == 0
    capsys.readouterr()
    assert run_cli(config, inp, out, "--shard-size", "3", "--no-report") == 2
    assert "batch.shard_size" in capsys.readouterr().err
    assert run_cli(config, inp, out, "--shard-size", "2", "--no-report", "--set",
                   "hallucination_mitigation.hallucination_model.threshold=0.7") == 2
    assert "hallucination_model.threshold" in capsys.readouterr().err
    # engine / workers / progress are not part of a run's identity
    assert run_cli(config, inp, out, "--shard-size", "2", "--no-report", "--workers", "3", "--progress") == 0
    assert run_cli(config, inp, tmp_path / "lim", "--limit", "3", "--shard-size", "2", "--no-report") == 0
    assert [r["id"] for r in bio.read_rows(tmp_path / "lim")] == ["r0", "r1", "r2"]
    assert run_cli(config, inp, tmp_path / "lim", "--limit", "4", "--shard-size", "2", "--no-report") == 2


def test_a_model_that_does_not_load_stops_the_run_before_any_row(tiny_root, tmp_path, capsys):
    cfg = _config(tiny_root, tmp_path / "cfg.yaml")
    cfg.write_text(cfg.read_text().replace(str(tiny_root / "detector"), str(tmp_path / "no-such-detector")))
    inp = write_jsonl(tmp_path / "a.jsonl", rows(4))
    assert run_cli(cfg, inp, tmp_path / "out") == 2  # not 4 rows of `unavailable`
    assert "detector model failed to load" in capsys.readouterr().err
    assert not bio.shard_paths(tmp_path / "out")
    assert run_cli(cfg, inp, tmp_path / "out2", "--workers", "2") == 2


def _cli(config: Path, inp: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "inference.batch", "--config", str(config), "--input", str(inp),
            "--output", str(out), *extra]


@pytest.mark.slow
def test_resume_after_sigkill_loses_nothing_and_duplicates_nothing(config, tmp_path):
    n, size = 600, 5
    inp = write_jsonl(tmp_path / "a.jsonl", rows(n))
    args = ("--shard-size", str(size), "--workers", "2", "--no-report")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    full = tmp_path / "full"
    subprocess.run(_cli(config, inp, full, *args), check=True, env=env, cwd=REPO, capture_output=True)
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cli(config, inp, out, *args), env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(bio.shard_paths(out)) < 10:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers, no chance to clean up
    proc.wait()
    killed_at = len(bio.shard_paths(out))
    total = math.ceil(n / size)
    assert 10 <= killed_at < total, "the run ended before the kill: make it longer"
    rerun = subprocess.run(_cli(config, inp, out, *args), check=False, env=env, cwd=REPO, capture_output=True,
                           text=True)
    assert rerun.returncode == 0, rerun.stderr
    info = json.loads((out / "run.json").read_text())
    assert info["shards_before"] >= killed_at and info["shards_before"] + info["shards_written"] == total
    got, want = bio.read_rows(out), bio.read_rows(full)
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)) == n and set(ids) == {d["id"] for d in rows(n)}
    assert got == want  # identical to the uninterrupted run
    assert not [p for p in (out / "shards").iterdir() if p.name.startswith(".")]


def test_worker_processes_give_the_in_process_results(config, tmp_path):
    inp = write_jsonl(tmp_path / "a.jsonl", rows(24))
    assert run_cli(config, inp, tmp_path / "one", "--shard-size", "5", "--no-report") == 0
    assert run_cli(config, inp, tmp_path / "two", "--shard-size", "5", "--workers", "2", "--no-report") == 0
    assert bio.read_rows(tmp_path / "two") == bio.read_rows(tmp_path / "one")


# ---- the Ray engine (a local instance: 2 CPUs, no dashboard) --------------------------------------------------

@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_engine_gives_the_local_engine_rows_and_results(config, local_ray, tmp_path):
    items = [*rows(30), {"id": "no-answer", "context": "x"}, "{broken", *rows(5, start=30)]
    inp = write_jsonl(tmp_path / "a.jsonl", items)
    assert run_cli(config, inp, tmp_path / "local", "--shard-size", "6", "--group-by", "model") == 0
    assert run_cli(config, inp, tmp_path / "ray", "--shard-size", "6", "--group-by", "model", "--engine", "ray",
                   "--workers", "2") == 0
    got, want = bio.read_rows(tmp_path / "ray"), bio.read_rows(tmp_path / "local")
    assert len(got) == len(items) and [r["row"] for r in got] == list(range(len(items)))
    assert got == want
    assert sum(r["status"] == "invalid" for r in got) == 2
    rep = json.loads((tmp_path / "ray" / "report.json").read_text())
    assert rep["rows"] == len(items) and set(rep["groups"]["model"]) == {"m0", "m1", "(none)"}
    # a rerun on Ray skips what is there
    (tmp_path / "ray" / "shards" / "part-00002.parquet").unlink()
    assert run_cli(config, inp, tmp_path / "ray", "--shard-size", "6", "--group-by", "model", "--engine", "ray",
                   "--workers", "2", "--no-report") == 0
    info = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert (info["shards_before"], info["shards_written"], info["rows_scored"]) == (6, 1, 6)
    assert bio.read_rows(tmp_path / "ray") == want


# ---- the report -------------------------------------------------------------------------------------------------

def _wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The textbook Wilson score interval, written out to check the library's."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def _hand_made(out: Path) -> None:
    """12 rows: group a has 3 flagged and 2 clean answers and 1 invalid row; group b 1 flagged, 1 clean,
    2 skipped, 1 unavailable and 1 with no group value."""
    def rec(i, status, group, flagged=None, spans=(), score=None):
        r = bio.invalid_record("answer: required") if status == "invalid" else {
            "schema": "halugate.detect/v1", "status": status, "reason": {"skipped": "no_context",
                                                                          "unavailable": "model_unavailable"}.get(
                status, ""), "unverified_factual": False, "spans": [], "headers": [], "errors": [],
            "action": "none", "blocked": False, "context_tokens": 0, "detector_windows": 0}
        answer = f"Answer {i} says 1950 and 500 meters."
        r.update(row=i, id=f"h{i}", model=group, hallucination_detected=flagged, hallucination_score=score,
                 checked_answer=answer, max_severity=max((s[2] for s in spans), default=0),
                 spans=[{"start": a, "end": b, "text": answer[a:b], "confidence": c, "severity": sev,
                         "nli_label": "contradiction", "nli_confidence": 0.9, "explanation": "",
                         "evidence": None, "premise_coverage": None, "ungrounded": []}
                        for a, b, sev, c in spans])
        return r

    s1, s2 = (14, 18, 2, 0.9), (23, 33, 4, 0.8)
    recs = [rec(0, "ok", "a", True, [s1], 0.91), rec(1, "ok", "a", True, [s1, s2], 0.97),
            rec(2, "ok", "a", True, [s2], 0.55), rec(3, "ok", "a", False, [], 0.12), rec(4, "ok", "a", False, [], 0.03),
            rec(5, "invalid", "a"),
            rec(6, "ok", "b", True, [s1], 0.62), rec(7, "ok", "b", False, [], 0.41), rec(8, "skipped", "b"),
            rec(9, "skipped", "b"), rec(10, "unavailable", "b"), rec(11, "ok", None, False, [], 0.0)]
    sch = bio.schema(["model"])
    for k in range(3):
        bio.write_shard(out, k, pa.Table.from_pylist(recs[4 * k: 4 * k + 4], schema=sch))


def test_report_figures_on_a_hand_made_output(tmp_path, capsys):
    out = tmp_path / "out"
    _hand_made(out)
    assert main(["--report-only", "--output", str(out), "--group-by", "model", "--top-k", "2"]) == 0
    rep = json.loads((out / "report.json").read_text())
    o = rep["overall"]
    assert rep["rows"] == o["n"] == 12 and rep["shards"] == 3 and rep["duplicate_ids"] == 0
    assert (o["checked"], o["hallucinated"], o["skipped"], o["unavailable"], o["invalid"]) == (8, 4, 2, 1, 1)
    assert o["hallucination_rate"] == 0.5 and o["spans_per_response"] == 0.625  # 5 spans / 8 checked
    assert o["hallucination_rate_ci95"] == pytest.approx(_wilson(4, 8), abs=1e-4)
    assert o["unavailable_share"] == round(1 / 12, 4)
    assert o["unavailable_share_ci95"] == pytest.approx(_wilson(1, 12), abs=1e-4)
    assert o["invalid_share_ci95"] == pytest.approx(_wilson(1, 12), abs=1e-4)
    a, b, none = rep["groups"]["model"]["a"], rep["groups"]["model"]["b"], rep["groups"]["model"]["(none)"]
    assert (a["n"], a["checked"], a["hallucinated"], a["invalid"]) == (6, 5, 3, 1) and a["hallucination_rate"] == 0.6
    assert a["hallucination_rate_ci95"] == pytest.approx(_wilson(3, 5), abs=1e-4)
    assert (b["n"], b["checked"], b["hallucinated"], b["skipped"], b["unavailable"]) == (6 - 1, 2, 1, 2, 1)
    assert none["n"] == 1 and none["hallucination_rate"] == 0.0
    assert rep["spans_per_answer"]["0"] == 4 and rep["spans_per_answer"]["1"] == 3 and rep["spans_per_answer"]["2"] == 1
    assert sum(rep["score_histogram"]["hallucinated"]) == 4 and sum(rep["score_histogram"]["clean"]) == 4
    assert rep["score_histogram"]["hallucinated"][19] == 1 and rep["score_histogram"]["clean"][0] == 2
    assert [e["id"] for e in rep["most_confident_flagged"]] == ["h1", "h0"]  # highest score first, top 2
    assert rep["skip_reasons"] == {"no_context": 2} and rep["invalid_reasons"] == {"answer": 1}
    md = (out / "report.md").read_text()
    assert "<mark>1950</mark><sup>[contradiction, sev 2]</sup>" in md and "## By model" in md
    assert "50.0%" in md and "## Plots" in md
    for name in ("score_histogram.png", "spans_per_answer.png", "by_model.png"):
        assert (out / "plots" / name).stat().st_size > 1000
    assert main(["--report-only", "--output", str(out), "--group-by", "nope"]) == 2
    assert main(["--report-only", "--output", str(tmp_path / "empty")]) == 2


def test_tally_is_halurate_group_row():
    t = Tally.of([("hallucinated", 2), ("clean", 0), ("skipped", 5), ("unavailable", 1)])
    assert t.summary() == {"n": 4, "checked": 2, "hallucinated": 1, "skipped": 1, "unavailable": 1,
                           "hallucination_rate": 0.5, "spans_per_response": 1.0}
    assert wilson_interval(0, 0) is None
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(_wilson(0, 10)[1], abs=1e-4)
