"""End to end: the real google-genai client (and the openai backend) against loopback emulators."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eval.backends import CallLimits, make_backend
from eval.gemhall.behavior import behavior_checks
from eval.gemhall.cli import main
from eval.gemhall.data import Item
from eval.gemhall.judges import ExactJudge, LLMJudge
from eval.gemhall.metrics import compute_metrics
from eval.gemhall.runner import ResultLog, Runner
from tests.loopback import FakeClock, GeminiEmulator, OpenAIEmulator, Reply, max_in_window

REPO = Path(__file__).resolve().parents[1]
THRESHOLDS = [0.5, 0.8]

ITEMS = [
    Item("q1", "[q1] What is 2+2?", "4", False, "math"),
    Item("q2", "[q2] Capital of France?", "Paris", False, "geo"),
    Item("q3", "[q3] Colour of a clear daytime sky?", "blue", False, "common"),
    Item("q4", "[q4] The answer to everything?", "42", False, "trivia"),
    Item("q5", "[q5] Say x.", "x", False, "misc"),
    Item("u1", "[u1] What does math.fibonorm(10) return?", "", True, "unanswerable"),
    Item("u2", "[u2] Who was the first king of Atlantis?", "", True, "unanswerable"),
]

# (item, t) -> scripted reply; q5 at t=0.8 always fails with 500 and becomes an error row
REPLIES = {
    ("q1", 0.5): "4", ("q2", 0.5): "Paris.", ("q3", 0.5): "red", ("q4", 0.5): "IDK", ("q5", 0.5): "x",
    ("u1", 0.5): "IDK", ("u2", 0.5): "King Atlas",
    ("q1", 0.8): "4", ("q2", 0.8): "I don't know", ("q3", 0.8): "idk", ("q4", 0.8): "42.0",
    ("u1", 0.8): "IDK", ("u2", 0.8): "",
}


def pair_of(prompt: str) -> tuple[str, float]:
    item = re.search(r"^\[(\w+)\]", prompt).group(1)
    t = float(re.search(r"Answer only if you are > ([0-9.]+) confident", prompt).group(1))
    return item, t


def scripted(request) -> object:
    key = pair_of(request.prompt)
    if key == ("q5", 0.8):
        return Reply.server_error(500)
    return REPLIES[key]


@pytest.fixture
def gemini_env(monkeypatch):
    for var in ("GOOGLE_GENAI_USE_VERTEXAI", "GEMINI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")


def quick_limits(**kwargs) -> CallLimits:
    clock = FakeClock()
    return CallLimits.create(clock=clock, sleep=clock.sleep, asleep=clock.asleep, **kwargs)


def check_expected_metrics(metrics: dict) -> None:
    a, b = metrics["0.5"], metrics["0.8"]
    # t=0.5: q1 q2 q5 right, q3 and u2 wrong, q4 and u1 IDK
    assert (a["n"], a["answered"], a["abstentions"], a["errors"], a["correct"], a["wrong"]) == (7, 5, 2, 0, 3, 2)
    assert a["coverage"] == pytest.approx(5 / 7)
    assert a["accuracy_conditioned_on_answering"] == pytest.approx(0.6)
    assert a["hallucination_rate_among_answers"] == pytest.approx(0.4)
    assert a["avg_expected_score"] == pytest.approx((1 + 1 - 1 + 0 + 1 + 0 - 1) / 7)
    # t=0.8 (penalty 4): q1 and q4 (42.0 == 42) right, the rest IDK (empty counts), q5 an error
    assert (b["n"], b["answered"], b["abstentions"], b["errors"], b["correct"], b["wrong"]) == (6, 2, 4, 1, 2, 0)
    assert b["coverage"] == pytest.approx(2 / 6)
    assert b["accuracy_conditioned_on_answering"] == 1.0
    assert b["hallucination_rate_among_answers"] == 0.0
    assert b["avg_expected_score"] == pytest.approx(2 / 6)
    assert b["abstention_rate_unanswerable"] == 1.0 and b["abstention_rate_answerable"] == pytest.approx(0.5)


@pytest.mark.parametrize("use_async", [False, True])
def test_scripted_run_exact_metrics(tmp_path, gemini_env, use_async):
    limits = quick_limits(max_retries=2, concurrency=4)
    with GeminiEmulator(scripted, latency=0.005) as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)
        runner = Runner(backend, ExactJudge(), tmp_path, workers=4, seed=1234)
        stats = runner.run(ITEMS, THRESHOLDS, use_async=use_async)
    assert stats.total == 14 and stats.attempted == 14 and stats.errors == 1
    assert len(server.requests) == 13 + 3  # the failing pair: 1 attempt + 2 retries
    metrics = compute_metrics(stats.records, THRESHOLDS)
    check_expected_metrics(metrics)
    behavior = behavior_checks(metrics)
    assert behavior["coverage_monotonicity"]["ok"]
    assert behavior["calibration"]["below_threshold"] == []
    error_row = next(r for r in stats.records if r["error"])
    assert (error_row["id"], error_row["t"], error_row["score"], error_row["abstained"]) == ("q5", 0.8, None, None)
    assert "gave up after 3 attempts" in error_row["error"]
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 14
    assert all(req.body["generationConfig"]["seed"] == 1234 for req in server.requests)
    assert all(req.body["generationConfig"]["maxOutputTokens"] == 128 for req in server.requests)


def test_rerun_retries_only_error_rows(tmp_path, gemini_env):
    with GeminiEmulator(scripted) as server:
        backend = make_backend("gemini", base_url=server.url, limits=quick_limits(max_retries=0))
        Runner(backend, ExactJudge(), tmp_path).run(ITEMS, THRESHOLDS)
        assert len(server.requests) == 14
        server.set_script(lambda req: "x")  # the server recovered
        stats = Runner(backend, ExactJudge(), tmp_path).run(ITEMS, THRESHOLDS)
    assert len(server.requests) == 15 and pair_of(server.requests[-1].prompt) == ("q5", 0.8)
    assert stats.resumed == 13 and stats.errors == 0
    assert compute_metrics(stats.records, [0.8])["0.8"]["correct"] == 3


def test_interrupted_run_resumes_without_duplicate_calls(tmp_path, gemini_env):
    with GeminiEmulator(scripted) as server:
        backend = make_backend("gemini", base_url=server.url, limits=quick_limits(max_retries=0))
        original = backend._call_once
        calls = {"n": 0}

        def interrupting(prompt, params):
            calls["n"] += 1
            if calls["n"] == 6:
                raise KeyboardInterrupt  # Ctrl-C in the middle of the run
            return original(prompt, params)

        backend._call_once = interrupting
        with pytest.raises(KeyboardInterrupt):
            Runner(backend, ExactJudge(), tmp_path).run(ITEMS, THRESHOLDS)
        logged = ResultLog(tmp_path).load()
        assert len(logged) == 5 and len(server.requests) == 5

        backend._call_once = original
        stats = Runner(backend, ExactJudge(), tmp_path).run(ITEMS, THRESHOLDS)
    asked = [pair_of(r.prompt) for r in server.requests]
    assert len(asked) == len(set(asked)) == 14  # every pair asked exactly once over both runs
    assert stats.resumed == 5 and stats.attempted == 9
    check_expected_metrics(compute_metrics(stats.records, THRESHOLDS))


def test_torn_last_line_is_dropped_and_redone(tmp_path, gemini_env):
    with GeminiEmulator(scripted) as server:
        backend = make_backend("gemini", base_url=server.url, limits=quick_limits(max_retries=0))
        Runner(backend, ExactJudge(), tmp_path).run(ITEMS[:2], [0.5])
        log = tmp_path / "results.jsonl"
        text = log.read_text()
        log.write_text(text[: len(text) - 20])  # a kill in the middle of the second write
        stats = Runner(backend, ExactJudge(), tmp_path).run(ITEMS[:2], [0.5])
    assert stats.resumed == 1 and stats.attempted == 1 and len(server.requests) == 3
    assert len(log.read_text().splitlines()) == 2


def test_corrupt_log_line_is_reported(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"id": "q1", "t": 0.5}\nnot json\n{"id": "q2", "t": 0.5}\n')
    with pytest.raises(ValueError, match=r"results.jsonl: line 2: not a result record"):
        ResultLog(tmp_path).load()


def test_llm_judge_shares_limits_and_skips_idk_and_unknown_ok(tmp_path):
    clock = FakeClock()
    limits = CallLimits.create(rpm_limit=5, max_retries=2, clock=clock, sleep=clock.sleep, asleep=clock.asleep)
    judged = []

    def script(request):
        prompt = request.prompt
        if prompt.startswith("You are a strict grader"):
            candidate = re.search(r"Candidate answer: (.*)", prompt).group(1)
            reference = re.search(r"Reference answer: (.*)", prompt).group(1)
            judged.append(candidate)
            if candidate == "four":
                return Reply.rate_limited("2s") if judged.count("four") == 1 else "YES"
            return "maybe" if candidate == "hmm" else ("YES" if candidate.lower() == reference.lower() else "NO")
        return {"q1": "four", "q2": "paris", "q3": "red", "q4": "IDK", "q5": "hmm", "u1": "IDK", "u2": "Atlas"}[
            pair_of(prompt)[0]]

    with OpenAIEmulator(script) as server:
        backend = make_backend("openai", model="m", base_url=server.url + "/v1", limits=limits)
        judge = LLMJudge(backend, seed=1234)
        stats = Runner(backend, judge, tmp_path, workers=3).run(ITEMS, [0.5], use_async=True)
    # judge only for answered, answerable items: q1 (twice: one 429), q2, q3, q5 -- never q4/u1 (IDK) or u2
    assert sorted(judged) == ["four", "four", "hmm", "paris", "red"]
    judge_requests = [r for r in server.requests if r.prompt.startswith("You are a strict grader")]
    assert all(r.body["max_tokens"] == 4 and r.body["temperature"] == 0.0 for r in judge_requests)
    assert limits.retry.waits == [2.0]
    assert len(limits.rate.history) == len(server.requests) == 12
    assert max_in_window(limits.rate.history) == 5
    m = compute_metrics(stats.records, [0.5])["0.5"]
    assert (m["answered"], m["correct"], m["errors"]) == (4, 2, 1)  # q5's judge said "maybe": an error row
    bad = next(r for r in stats.records if r["id"] == "q5")
    assert "judge: no YES/NO" in bad["error"] and bad["pred"] == "hmm"


def test_rate_limit_holds_through_a_whole_run(tmp_path, gemini_env):
    clock = FakeClock()
    limits = CallLimits.create(rpm_limit=4, concurrency=8, max_retries=1, clock=clock, sleep=clock.sleep,
                               asleep=clock.asleep)
    with GeminiEmulator(lambda req: "4") as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)
        Runner(backend, ExactJudge(), tmp_path, workers=8).run(ITEMS, THRESHOLDS, use_async=True)
    assert len(limits.rate.history) == 14 == len(server.requests)
    assert max_in_window(limits.rate.history) == 4
    assert clock.now - 1000.0 >= 3 * 60  # 14 requests at 4/min need at least three full windows


# -- the CLI -------------------------------------------------------------------------------------------

def toy_script(request):
    prompt = request.prompt
    if "strawberry" in prompt:
        return "3"
    if "ice cube" in prompt:
        return "Float." if "> 0.5 " in prompt else "IDK"
    return "It returns 55."


def test_cli_writes_every_output(tmp_path, capsys):
    out = tmp_path / "out"
    with OpenAIEmulator(toy_script) as server:
        argv = ["run", "--data", str(REPO / "examples" / "toy.csv"), "--thresholds", "0.5", "0.75", "0.9",
                "--backend", "openai", "--model", "m", "--base-url", server.url + "/v1", "--out", str(out)]
        assert main(argv) == 0
        assert len(server.requests) == 9
        assert main(argv + ["--async"]) == 0  # rerun: everything resumed, nothing asked
        assert len(server.requests) == 9
    for name in ("results.csv", "results.jsonl", "metrics.json", "behavior.json", "rc_curve.png", "report.md",
                 "config.yaml", "run.json"):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["0.5"]["coverage"] == 1.0 and metrics["0.5"]["correct"] == 2
    assert metrics["0.9"]["abstentions"] == 1 and metrics["0.9"]["avg_expected_score"] == pytest.approx(-8 / 3)
    with (out / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:11] == ["id", "t", "question", "gold", "unknown_ok", "pred", "abstained", "correct",
                                 "score", "category", "error"]
    assert len(rows) == 9 and rows[0]["category"] == "counting"
    report = (out / "report.md").read_text()
    assert "rc_curve.png" in report and "Threshold-to-policy" in report and "| 0.95 |" in report
    assert (out / "rc_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "coverage monotonic: yes" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["run", "--data", "examples/toy.csv"], "--thresholds is required"),
    (["run", "--data", "examples/toy.csv", "--thresholds", "0.5", "1.0"], "each must be in [0, 1)"),
    (["run", "--thresholds", "0.5"], "needs --data"),
    (["mmlu", "--thresholds", "0.5", "--idk-frac", "1.2"], "idk_frac: must be in [0, 1]"),
    (["run", "--data", "nope.csv", "--thresholds", "0.5", "--backend", "local"], "nope.csv: data file not found"),
])
def test_cli_rejects_bad_input(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_cli_reports_bad_csv_with_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,question,gold,unknown_ok\nq1,Q?,,0\n")
    assert main(["run", "--data", str(bad), "--thresholds", "0.5", "--backend", "local", "--out",
                 str(tmp_path / "o")]) == 2
    assert f"{bad}: line 2, column 3 (gold)" in capsys.readouterr().err


def test_cli_refuses_to_mix_runs_in_one_out(tmp_path, capsys):
    out = tmp_path / "out"
    with OpenAIEmulator(toy_script) as server:
        base = ["run", "--data", str(REPO / "examples" / "toy.csv"), "--thresholds", "0.5", "--backend", "openai",
                "--base-url", server.url + "/v1", "--out", str(out)]
        assert main(base + ["--model", "m1"]) == 0
        assert main(base + ["--model", "m2"]) == 2
        assert len(server.requests) == 3
    assert "holds results of a different run (model: 'm1' -> 'm2')" in capsys.readouterr().err


def test_cli_config_file_with_flag_override(tmp_path):
    out = tmp_path / "out"
    cfg = tmp_path / "gemhall.yaml"
    with OpenAIEmulator(toy_script) as server:
        cfg.write_text(f"thresholds: [0.5, 0.9]\nbackend: openai\nmodel: m\nbase_url: {server.url}/v1\n"
                       f"data: {REPO / 'examples' / 'toy.csv'}\nout: {out}\nseed: 7\n")
        assert main(["run", "--config", str(cfg), "--thresholds", "0.5"]) == 0
        assert len(server.requests) == 3 and server.requests[0].body["seed"] == 7
    assert "- 0.5\n" in (out / "config.yaml").read_text()
    cfg.write_text("thresholds: [0.5]\nbogus: 1\n")
    assert main(["run", "--config", str(cfg)]) == 2


# -- a real process, killed and resumed ----------------------------------------------------------------

def _count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def sigint_not_ignored():
    """A test session started from a background job inherits SIGINT ignored, which the child would inherit too
    (and Python then installs no Ctrl-C handler). A Python-level handler here is reset to the default in the
    child at exec, as under a terminal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_killed_process_resumes_without_redoing_finished_pairs(tmp_path, sigint_not_ignored):
    data = tmp_path / "items.csv"
    data.write_text("id,question,gold,unknown_ok\n" + "".join(f"i{i},[i{i}] What is {i}+0?,{i},0\n"
                                                              for i in range(10)))
    out = tmp_path / "out"
    log = out / "results.jsonl"

    def answer(request):
        return pair_of(request.prompt)[0][1:]

    # Slow replies, two at a time: the run cannot finish all 20 pairs before the signal lands.
    with OpenAIEmulator(answer, latency=0.3) as server:
        argv = [sys.executable, "-m", "eval.gemhall", "run", "--data", str(data), "--thresholds", "0.5", "0.9",
                "--backend", "openai", "--model", "m", "--base-url", server.url + "/v1", "--out", str(out),
                "--concurrency", "2"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        for sig in (signal.SIGINT, signal.SIGKILL):  # Ctrl-C, then a hard kill
            before = _count_lines(log)
            proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            deadline = time.monotonic() + 60
            while _count_lines(log) < before + 4 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.01)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=30)
            if sig == signal.SIGINT:
                assert proc.returncode == 130 and b"rerun the same command to resume" in err
            else:
                assert proc.returncode == -signal.SIGKILL
        done_before = {(json.loads(line)["id"], json.loads(line)["t"]) for line in log.read_text().splitlines()}
        assert 8 <= len(done_before) < 20
        asked_before = len(server.requests)
        assert main(argv[3:]) == 0
    asked_after = [pair_of(r.prompt) for r in server.requests[asked_before:]]
    assert sorted(asked_after) == sorted({(f"i{i}", t) for i in range(10) for t in (0.5, 0.9)} - done_before)
    assert _count_lines(log) == 20
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["0.5"]["correct"] == metrics["0.9"]["correct"] == 10


def test_shipped_config_file_parses():
    from eval.gemhall.cli import parse_config

    cfg = parse_config(["mmlu", "--config", str(REPO / "configs" / "gemhall.yaml"), "--limit", "5"])
    assert cfg.command == "mmlu" and cfg.backend == "local" and cfg.thresholds == [0.5, 0.75, 0.9]
    assert cfg.idk_frac == 0.3 and cfg.limit == 5 and cfg.seed == 1234


@pytest.mark.parametrize("use_async", [False, True])
def test_fatal_errors_stop_the_run_and_keep_finished_results(tmp_path, capsys, use_async):
    out = tmp_path / "out"
    replies = ["3", Reply.error(401, "invalid api key")]
    with OpenAIEmulator(replies, default=lambda request: Reply.error(401, "invalid api key")) as server:
        argv = ["run", "--data", str(REPO / "examples" / "toy.csv"), "--thresholds", "0.5", "0.9", "--backend",
                "openai", "--model", "m", "--base-url", server.url + "/v1", "--out", str(out),
                "--concurrency", "1"] + (["--async"] if use_async else [])
        assert main(argv) == 3
    err = capsys.readouterr().err
    assert "gemhall: stopped" in err and "401" in err and "rerun the same command" in err
    assert len(server.requests) == 2  # no retries on 401, no further items tried
    assert len(ResultLog(out).load()) == 1
