"""`python -m inference.serve` as a process: starts with a model file missing (unavailable, not clean), answers,
and on SIGTERM finishes the request in flight before it exits; bad config is one error line, exit 2; the
service never imports torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
from serve_upstream import FakeUpstream, UvicornThread, free_port

REPO = Path(__file__).resolve().parents[1]
REQUEST = json.loads((REPO / "examples" / "eiffel_messages.json").read_text())[:3]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def test_cli_missing_model_and_graceful_sigterm(tmp_path):
    config = tmp_path / "inference.yaml"
    config.write_text(textwrap.dedent(f"""
        hallucination_mitigation:
          fail_mode: open
          fact_check_model: {{model_id: ""}}
          hallucination_model: {{model_id: {tmp_path / "missing-detector"}}}
          nli_model: {{model_id: ""}}
        serve:
          max_batch: 8
          shutdown_timeout_s: 20
        """))
    fake = FakeUpstream()
    with UvicornThread(fake.app) as upstream:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "inference.serve", "--config", str(config), "--upstream",
                                 upstream.url + "/v1", "--port", str(port), "--log-level", "warning"],
                                cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(base + "/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
                time.sleep(0.1)
            ready = httpx.get(base + "/readyz")
            while ready.json().get("reason") == "warming up":
                time.sleep(0.05)
                ready = httpx.get(base + "/readyz")
            assert ready.status_code == 503 and "missing-detector" in ready.text

            out = {}

            def call():
                out["r"] = httpx.post(base + "/v1/chat/completions", json={"model": "slow-1", "messages": REQUEST},
                                      timeout=30)

            t = threading.Thread(target=call)
            t.start()
            while not fake.requests and time.monotonic() < deadline:
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            t.join(30)
            r = out["r"]
            assert r.status_code == 200
            assert r.headers["x-vsr-verification-status"] == "unavailable"  # fail open, visibly
            assert r.json()["choices"][0]["message"]["content"].startswith("The Eiffel Tower was built in 1950")
            # uvicorn re-raises the signal once the graceful shutdown is done: "terminated by SIGTERM", no crash
            assert proc.wait(30) in (0, -signal.SIGTERM)
            assert "Traceback" not in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_cli_bad_config_is_one_error_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "inference.serve", "--config", str(REPO / "configs" / "inference.yaml"),
                           "--set", "serve.max_batch=0"], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: ") and "max_batch: must be >= 1" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "inference.serve", "--upstream", "ftp://x"], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "upstream: expected an http(s) URL" in proc.stderr


BLOCKED = textwrap.dedent("""
    import importlib.abc, sys

    class BlockTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "transformers", "optimum"):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, BlockTorch())
    import inference.serve.__main__
    from inference.detect import HaluGate
    from inference.serve import ServeSettings, create_app
    create_app(HaluGate.from_dirs(detector="missing"), ServeSettings())
    print("ok")
""")


def test_serve_does_not_import_torch():
    proc = subprocess.run([sys.executable, "-c", BLOCKED], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
