"""Soak test of inference.serve: a bounded stream of mixed requests on loopback, and what the service process
holds before and after (resident memory, open file descriptors, asyncio tasks, threads).

Three processes: the fake OpenAI-compatible upstream (tests/serve_upstream.py), the service (this script in
`--child` mode: `inference.serve.create_app` under uvicorn, plus one extra route, `GET /__soak`, that reports
the process's own VmRSS, open fds, asyncio tasks and threads) and this client (httpx, asyncio, bounded
concurrency). The request mix, by request number: plain chat completions, streamed chat completions, /v1/detect,
and malformed requests (invalid JSON, an unknown role, `stream: "yes"`, a lone surrogate, a body over
serve.max_body_bytes, an unknown content part), in a fixed rotation.

Measured: after --warmup requests ("before") and after each quarter of --requests (the last is "after"), each
time in the same state: the client's connections closed, the service's idle upstream connections expired and
one upstream connection open (see `snapshot`). Printed: requests sent, answered by status, lost (sent -
answered: transport errors, timeouts), incomplete streams, RSS growth (%), fds / tasks / threads before and
after and the series per quarter, and a verdict (exit status 1 on FAIL). Loopback only; it stops by itself.

    python scripts/soak_serve.py --requests 20000 --concurrency 16

Models: --models DIR with {sentinel,detector,explainer} export dirs; default tiny random-weight BERTs (2 layers,
hidden 32, MiniLM tokenizer) in runs/bench-serve/models, as scripts/bench_serve.py builds them (built when
absent); every threshold at 0 so that every stage runs on every checked answer.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

EIFFEL = json.loads((REPO / "examples" / "eiffel_messages.json").read_text())
REQUEST = EIFFEL[:3]
DETECT = {"context": EIFFEL[2]["content"], "question": EIFFEL[0]["content"], "answer": EIFFEL[3]["content"]}
MAX_BODY = 65_536
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}

# malformed bodies, as bytes a client might send; each is refused by both POST routes (400, or 413 for the large one)
MALFORMED = [
    b"{not json",
    json.dumps({"model": "m", "messages": [{"role": "robot", "content": "x"}]}).encode(),
    json.dumps({"model": "m", "messages": REQUEST, "stream": "yes"}).encode(),
    b'{"model": "m", "messages": [{"role": "user", "content": "How tall \\ud800?"}]}',
    json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * (MAX_BODY + 10)}]}).encode(),
    json.dumps({"model": "m", "messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]}).encode(),
]
PLAIN = json.dumps({"model": "m", "messages": REQUEST}).encode()
STREAM = json.dumps({"model": "m", "messages": REQUEST, "stream": True}).encode()
DETECT_BODY = json.dumps(DETECT).encode()


def plan(i: int) -> tuple[str, str, bytes, bool]:
    slot = i % 10
    if slot < 4:
        return "plain", "/v1/chat/completions", PLAIN, False
    if slot < 7:
        return "stream", "/v1/chat/completions", STREAM, True
    if slot < 8:
        return "detect", "/v1/detect", DETECT_BODY, False
    return "malformed", "/v1/chat/completions" if slot == 8 else "/v1/detect", MALFORMED[(i // 10) % len(MALFORMED)], False


# ---- the service process -------------------------------------------------------------------------------------

def child(args: argparse.Namespace) -> None:
    import uvicorn
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from inference.detect import HaluGate
    from inference.serve import create_app, load

    settings, serve = load(args.config)
    serve.upstream, serve.port = args.upstream, args.port
    settings.hallucination_mitigation.spin_wait = False
    app = create_app(HaluGate(settings), serve, auth_tokens=[])

    async def soak_stats(request):
        gc.collect()
        status = Path("/proc/self/status").read_text()
        rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
        return JSONResponse({"rss_mb": rss_kb / 1024, "fds": len(os.listdir("/proc/self/fd")),
                             "tasks": len(asyncio.all_tasks()), "threads": threading.active_count()})

    app.router.routes.insert(0, Route("/__soak", soak_stats, methods=["GET"]))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="error", access_log=False, lifespan="on",
                timeout_keep_alive=serve.keep_alive_s)


# ---- the client ------------------------------------------------------------------------------------------------

def tiny_models() -> Path:
    """The tiny random-weight exports scripts/bench_serve.py uses (runs/bench-serve/models), built when absent."""
    from detect_helpers import tiny_stack

    from training.models import resolve_base_model

    return tiny_stack(REPO / "runs" / "bench-serve" / "models", resolve_base_model("offline:minilm"))


async def send_all(base: str, start: int, n: int, concurrency: int, stats: dict) -> None:
    """Requests start .. start+n-1 of the rotation; counts into stats (by kind and status, lost, incomplete)."""
    next_i = start
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        async def worker():
            nonlocal next_i
            while next_i < start + n:
                i, next_i = next_i, next_i + 1
                kind, path, body, stream = plan(i)
                stats["sent"][kind] += 1
                try:
                    if stream:
                        async with client.stream("POST", path, content=body,
                                                 headers={"content-type": "application/json"}) as r:
                            text = (await r.aread()).decode("utf-8", "replace")
                        if r.status_code == 200 and not text.rstrip().endswith("data: [DONE]"):
                            stats["incomplete"][kind] += 1
                    else:
                        r = await client.post(path, content=body, headers={"content-type": "application/json"})
                    stats["answered"][(kind, r.status_code)] += 1
                except httpx.HTTPError as exc:
                    stats["lost"][(kind, type(exc).__name__)] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def snapshot(base: str) -> dict:
    """The service's figures in the same state each time: the client's connections closed, then (after the 2 s
    keep-alive expiry of the service's upstream pool) one plain request, whose pool access closes the expired
    idle upstream connections (httpx closes them lazily), so that exactly one upstream connection stays open."""
    time.sleep(3.0)
    with httpx.Client(base_url=base, timeout=60) as client:
        client.post("/v1/chat/completions", content=PLAIN, headers={"content-type": "application/json"})
    time.sleep(0.5)
    with httpx.Client(base_url=base, timeout=60) as client:
        return client.get("/__soak").json()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=20_000,
                   help="requests after the warm-up, sent in four measured quarters (default 20000)")
    p.add_argument("--warmup", type=int, default=1000, help="requests before the first measurement")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--models", help="dir with sentinel/detector/explainer ONNX exports (default: tiny models)")
    p.add_argument("--max-growth", type=float, default=10.0, help="RSS growth (%%) above which the exit status is 1")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--upstream", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0

    import yaml
    from bench_serve import process  # the same service start-up and readiness wait as the serve benchmark
    from serve_upstream import free_port

    from inference.hardware import cpu_info

    models = Path(args.models) if args.models else tiny_models()
    config = REPO / "runs" / "soak-serve" / "inference.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    low = {"threshold": 0.0}
    config.write_text(yaml.safe_dump({
        "hallucination_mitigation": {
            "num_threads": 1,
            "fact_check_model": {"model_id": str(models / "sentinel"), **low},
            "hallucination_model": {"model_id": str(models / "detector"), "min_span_confidence": 0.0, **low},
            "nli_model": {"model_id": str(models / "explainer")}},
        "serve": {"max_body_bytes": MAX_BODY}}))

    print(f"# soak_serve: {cpu_info().describe()}, Python "
          f"{platform.python_version()}, load average at start {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"# models: {models}; requests {args.requests} after {args.warmup} warm-up, concurrency "
          f"{args.concurrency}; mix per 10: 4 plain, 3 streamed, 1 /v1/detect, 2 malformed")
    with process([str(REPO / "tests" / "serve_upstream.py")]) as upstream:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with process([str(Path(__file__).resolve()), "--child", "--config", str(config), "--upstream",
                      upstream + "/v1", "--port", str(port)], ready_url=base + "/readyz"):
            warm = {k: Counter() for k in ("sent", "answered", "lost", "incomplete")}
            asyncio.run(send_all(base, 0, args.warmup, args.concurrency, warm))
            before = snapshot(base)
            stats = {k: Counter() for k in ("sent", "answered", "lost", "incomplete")}
            series, seconds, done = [before], 0.0, 0
            for part in range(4):  # four quarters, measured after each: a leak shows as a trend
                n = args.requests // 4 + (1 if part < args.requests % 4 else 0)
                t0 = time.perf_counter()
                asyncio.run(send_all(base, args.warmup + done, n, args.concurrency, stats))
                seconds += time.perf_counter() - t0
                done += n
                series.append(snapshot(base))
            after = series[-1]
    sent = sum(stats["sent"].values())
    answered = sum(stats["answered"].values())
    by_status = Counter()
    for (_, status), n in stats["answered"].items():
        by_status[status] += n
    growth = 100.0 * (after["rss_mb"] - before["rss_mb"]) / before["rss_mb"]
    print(f"\nrequests sent {sent} ({dict(stats['sent'])}), answered {answered}, lost {sent - answered}"
          f"{' ' + str(dict(stats['lost'])) if stats['lost'] else ''}, incomplete streams {sum(stats['incomplete'].values())}, "
          f"{seconds:.1f} s ({sent / seconds:.1f} req/s)")
    print(f"answered by status: {dict(sorted(by_status.items()))}")
    print("answered by kind and status: " + ", ".join(f"{k} {s}: {n}" for (k, s), n in sorted(stats["answered"].items())))
    print(f"RSS after warm-up {before['rss_mb']:.1f} MB, end {after['rss_mb']:.1f} MB: growth {growth:+.2f}%")
    print(f"open fds before {before['fds']}, after {after['fds']}; asyncio tasks before {before['tasks']}, "
          f"after {after['tasks']}; threads before {before['threads']}, after {after['threads']}")
    print("after warm-up and each quarter: RSS MB " + ", ".join(f"{x['rss_mb']:.1f}" for x in series)
          + "; fds " + ", ".join(str(x["fds"]) for x in series) + "; tasks " + ", ".join(str(x["tasks"]) for x in series))
    ok = (sent == answered and not stats["incomplete"] and growth <= args.max_growth
          and after["fds"] <= before["fds"] and after["tasks"] <= before["tasks"])
    print(f"verdict: {'PASS' if ok else 'FAIL'} (lost 0, incomplete 0, RSS growth <= {args.max_growth:g}%, "
          "fds and tasks not above their warm-up counts)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
