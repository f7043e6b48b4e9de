"""Faults at start-up and at run time, on the real ONNX path (tiny random BERTs exported by training.export):

| fault                                  | detect CLI                      | service                               |
|----------------------------------------|---------------------------------|---------------------------------------|
| truncated / corrupted model.onnx       | exit 2, names the file          | /readyz 503 naming it; `unavailable`  |
| tokenizer.json missing                 | exit 2, names the directory     | same                                  |
| config names a directory that is not   | exit 2, names the config + path | same                                  |
| a session that raises / returns NaN    | -                               | `unavailable` (never "clean")         |

The Detector is required by the CLI (nothing can be checked without it); a Sentinel or Explainer that does not
load makes the results `unavailable` with a warning naming the file (docs/robustness.md)."""

from __future__ import annotations

import random
import shutil
import textwrap
from pathlib import Path

import httpx
import numpy as np
import pytest
from serve_upstream import UvicornThread, start_service

from inference.detect import HaluGate, main
from inference.serve import ServeSettings, create_app
from inference.settings import load_settings

CONTEXT = "The Eiffel Tower was built 1887-1889. It is 330 meters tall and stands in Paris."
ANSWER = "The Eiffel Tower was built in 1950 and is 500 meters tall."


def _truncated(d: Path) -> str:
    f = d / "model.onnx"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
    return str(f)


def _corrupted(d: Path) -> str:
    f = d / "model.onnx"
    data = bytearray(f.read_bytes())
    rng = random.Random(0)
    for i in range(0, len(data), 97):
        data[i] = rng.randrange(256)
    f.write_bytes(bytes(data))
    return str(f)


def _no_tokenizer(d: Path) -> str:
    (d / "tokenizer.json").unlink()
    return "tokenizer.json"


def _nonexistent(d: Path) -> str:
    shutil.rmtree(d)
    return str(d)


FAULTS = {"truncated_onnx": _truncated, "corrupted_onnx": _corrupted, "missing_tokenizer": _no_tokenizer,
          "nonexistent_model_dir": _nonexistent}


@pytest.fixture(params=sorted(FAULTS))
def broken(request, tiny_exports, tmp_path):
    """(config path, the text the error must name) for each fault, done to a copy of the Detector's export."""
    stage = "detector"
    dirs = {}
    for name, src in tiny_exports.items():
        dirs[name] = tmp_path / name
        shutil.copytree(src, dirs[name])
    named = FAULTS[request.param](dirs[stage])
    config = tmp_path / "inference.yaml"
    config.write_text(textwrap.dedent(f"""
        hallucination_mitigation:
          precision: fp32
          fact_check_model: {{model_id: {dirs['sentinel']}, threshold: 0.0}}
          hallucination_model: {{model_id: {dirs['detector']}}}
          nli_model: {{model_id: {dirs['explainer']}}}
        """))
    return config, named


def test_detect_cli_refuses_to_start_naming_the_file(broken, capsys):
    config, named = broken
    assert main(["--config", str(config), "--context", CONTEXT, "--question", "When?", "--answer", ANSWER]) == 2
    err = capsys.readouterr()
    assert err.out == ""  # no result printed
    line = err.err.strip().splitlines()[-1]
    assert line.startswith("error: ") and named in line and "hallucination_model.model_id" in line, line


def _serve(gate) -> tuple[UvicornThread, str]:
    app = create_app(gate, ServeSettings(), auth_tokens=[])
    server = start_service(app)
    return server, server.url


def test_service_readyz_is_503_naming_the_file_and_results_are_unavailable(broken):
    config, named = broken
    gate = HaluGate(load_settings(config))
    server, base = _serve(gate)
    try:
        ready = httpx.get(base + "/readyz")
        assert ready.status_code == 503 and named in ready.json()["reason"], ready.json()
        assert httpx.get(base + "/healthz").status_code == 200
        r = httpx.post(base + "/v1/detect", json={"context": CONTEXT, "question": "When?", "answer": ANSWER})
        result = r.json()
        assert r.status_code == 200 and result["status"] == "unavailable"
        assert result["hallucination_detected"] is None and "x-vsr-hallucination-detected" not in r.headers
        assert r.headers["x-vsr-verification-status"] == "unavailable"
    finally:
        server.stop()


class _Raising:
    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, *args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : simulated failure")


class _NaN(_Raising):
    def run(self, *args, **kwargs):
        return [np.full_like(o, np.nan) for o in self.inner.run(*args, **kwargs)]


@pytest.mark.parametrize("stage", ["sentinel", "detector", "explainer"])
@pytest.mark.parametrize("fault", [_Raising, _NaN], ids=["session_raises", "session_returns_nan"])
def test_a_session_failing_mid_run_is_unavailable_never_clean(tiny_exports, stage, fault):
    """A NaN from a session used to pass silently: a NaN Sentinel skipped verification as "not fact-seeking",
    a NaN Detector or Explainer gave an `ok` result."""
    gate = HaluGate.from_dirs(detector=tiny_exports["detector"], sentinel=tiny_exports["sentinel"],
                              explainer=tiny_exports["explainer"], precision="fp32",
                              overrides=["hallucination_mitigation.fact_check_model.threshold=0.0"])
    assert gate.detect(context=CONTEXT, question="When?", answer=ANSWER).status == "ok"
    runner = gate.runners[stage]
    runner.session = fault(runner.session)
    r = gate.detect(context=CONTEXT, question="When?", answer=ANSWER)
    assert (r.status, r.reason) == ("unavailable", "model_unavailable") and r.errors[0]["stage"] == stage
    assert r.headers["x-vsr-verification-status"] == "unavailable"
    if stage == "detector":
        assert r.hallucination_detected is None and "x-vsr-hallucination-detected" not in r.headers


# ---- the detect CLI's input files ----------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--input", "--messages", "--context-file"])
def test_cli_input_file_with_byte_0xff_is_exit_2_naming_the_file(flag, tmp_path, capsys):
    """A file that is not UTF-8 (here starting with a UTF-16 BOM, bytes ff fe) escaped as a UnicodeDecodeError
    traceback; it is one error line naming the file and the offset now, before any model loads."""
    bad = tmp_path / "input.json"
    bad.write_bytes(b'\xff\xfe{"answer": "x"}')
    extra = ["--answer", "x"] if flag == "--context-file" else []
    assert main(["--detector", str(tmp_path / "unused"), flag, str(bad), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"error: {bad}: not UTF-8 text (byte 0xff at offset 0)"


def test_cli_messages_file_with_invalid_json_names_the_file(tmp_path, capsys):
    bad = tmp_path / "chat.json"
    bad.write_text("{bad")
    assert main(["--detector", str(tmp_path / "unused"), "--messages", str(bad)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"{bad}: invalid JSON (Expecting property name enclosed in "
                                                    "double quotes, line 1 column 2)")


def test_cli_input_file_nested_100000_deep_is_exit_2_naming_the_file(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["--detector", str(tmp_path / "unused"), "--input", str(deep)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"{deep}: JSON nested deeper than the parser allows")
