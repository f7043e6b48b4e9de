"""scripts/soak_serve.py at a small size: it runs, every request is answered, and it prints its figures (the
full-size run, 20,000 requests at concurrency 16, is in docs/robustness.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_soak_script_small_run():
    proc = subprocess.run([sys.executable, "scripts/soak_serve.py", "--requests", "300", "--warmup", "100",
                           "--concurrency", "8", "--max-growth", "100"], cwd=REPO, capture_output=True, text=True,
                          timeout=600, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "requests sent 300" in out and "answered 300, lost 0," in out and "incomplete streams 0" in out
    for figure in ("RSS after warm-up", "open fds before", "asyncio tasks before", "answered by status"):
        assert figure in out
