"""Throughput of the gemhall harness against a loopback emulator with a fixed reply latency.

Runs the real async harness (Runner + backend + rate/concurrency/retry layer + JSONL log) against the
Gemini REST emulator (real google-genai client) or the OpenAI-compatible one, at several concurrency
levels, and prints achieved requests/s over the ideal concurrency / latency. Target: >= 0.9 at 16.

    .venv/bin/python scripts/bench_gemhall_throughput.py [--backend gemini|openai] [--latency 0.1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.backends import CallLimits, make_backend
from eval.gemhall.data import Item
from eval.gemhall.judges import ExactJudge
from eval.gemhall.runner import Runner
from tests.loopback import GeminiEmulator, OpenAIEmulator

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def emulator_process(kind: str, latency: float):
    """The emulator in its own process, as a real server would be (no GIL shared with the client)."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.loopback", kind, "--latency", str(latency)],
                            cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def emulator_thread(kind: str, latency: float):
    cls = GeminiEmulator if kind == "gemini" else OpenAIEmulator
    with cls(default=lambda request: "B", latency=latency) as server:
        yield server.url


def run_once(backend_name: str, url: str, concurrency: int, n_requests: int, out: Path) -> float:
    limits = CallLimits.create(concurrency=concurrency, max_retries=0)
    base_url = url + "/v1" if backend_name == "openai" else url
    backend = make_backend(backend_name, model="bench-model", base_url=base_url, limits=limits)
    items = [Item(f"b{i}", f"[b{i}] Which option? A, B, C or D.", "B", False, "bench") for i in range(n_requests)]
    runner = Runner(backend, ExactJudge(), out, workers=concurrency)
    start = time.perf_counter()
    stats = runner.run(items, [0.5], use_async=True)
    elapsed = time.perf_counter() - start
    backend.close()
    assert stats.errors == 0 and stats.attempted == n_requests, stats
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["gemini", "openai"], default="gemini")
    parser.add_argument("--latency", type=float, default=0.1, help="emulator reply latency in seconds")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16, 32])
    parser.add_argument("--seconds", type=float, default=3.0, help="ideal duration of each level")
    parser.add_argument("--in-process", action="store_true",
                        help="run the emulator in a thread of this process (shares the GIL with the client)")
    args = parser.parse_args()
    os.environ.setdefault("GOOGLE_API_KEY", "bench-key")
    for var in ("GOOGLE_GENAI_USE_VERTEXAI",):
        os.environ.pop(var, None)

    where = "in-process thread" if args.in_process else "separate process"
    print(f"gemhall throughput: backend {args.backend} (real client) vs loopback emulator ({where}), "
          f"latency {args.latency * 1000:.0f} ms; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print(f"{'concurrency':>11} {'requests':>8} {'seconds':>8} {'req/s':>8} {'ideal':>8} {'ratio':>6}")
    emulator = emulator_thread if args.in_process else emulator_process
    with emulator(args.backend, args.latency) as url, tempfile.TemporaryDirectory() as tmp:
        run_once(args.backend, url, 4, 8, Path(tmp) / "warmup")  # imports, sessions
        ratios = {}
        for c in args.concurrency:
            ideal = c / args.latency
            n = max(c, round(ideal * args.seconds / c) * c)
            elapsed = run_once(args.backend, url, c, n, Path(tmp) / f"c{c}")
            achieved = n / elapsed
            ratios[c] = achieved / ideal
            print(f"{c:>11} {n:>8} {elapsed:>8.2f} {achieved:>8.1f} {ideal:>8.1f} {ratios[c]:>6.2f}")
    if 16 in ratios:
        print(f"target ratio >= 0.90 at concurrency 16: {'met' if ratios[16] >= 0.9 else 'NOT met'} "
              f"({ratios[16]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
