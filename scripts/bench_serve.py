"""Benchmark of inference.serve against a loopback fake upstream, all in one run (loopback addresses only).

Three processes: the fake OpenAI-compatible upstream (tests/serve_upstream.py), the service
(`python -m inference.serve`, restarted per configuration) and this client (httpx, asyncio). Every request is
the Eiffel example (examples/eiffel_messages.json: question + tool result; the upstream supplies the answer).

0. The ceiling: in-process `HaluGate.detect_batch` cost per input at batch 1 / 4 / 16 (no HTTP).
1. Added latency at concurrency 1: p50 through the proxy minus p50 calling the same upstream directly, against
   the detection stack's own p50 (`timings_ms.total` that the service reports from /v1/detect on the same input);
   the three paths take turns request by request. Target: added <= detection + 5 ms.
2. Throughput at concurrency 32, micro-batching on vs off (the same service started twice, once with
   `--no-batching`), measured in alternating rounds: requests/s, p50, p99, errors, lost responses. Target: on
   >= 2x off, 0 errors, 0 lost. The same for /v1/detect alone (no upstream hop).
3. A bounded load test: up to --load-requests requests in at most --load-seconds at concurrency 32; stops by
   itself. Counts by status, lost = sent - answered.
4. A fault test: upstream 500s, upstream timeouts, truncated bodies (JSON and stream), and a service whose
   Detector model file is missing; counts by status (and how many said `unavailable`).

Models: --models DIR with {sentinel,detector,explainer} ONNX export dirs (default: runs/demo/export when it
exists), else tiny random-weight BERTs (2 layers, hidden 32, MiniLM tokenizer) built like the tests build
them, into runs/bench-serve/models. Thresholds are set to 0 so that every stage (Explainer included) runs.

    nice -n 19 env OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_serve.py --latency-requests 200 \
        --throughput-requests 512 --load-requests 5000 --load-seconds 120 --fault-requests 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from serve_upstream import free_port

from inference.detect import HaluGate
from inference.hardware import cpu_info
from inference.messages import parse_input
from training.models import resolve_base_model

EIFFEL = json.loads((REPO / "examples" / "eiffel_messages.json").read_text())
REQUEST = EIFFEL[:3]
DETECT = {"context": EIFFEL[2]["content"], "question": EIFFEL[0]["content"], "answer": EIFFEL[3]["content"]}
LOW = {"fact_check_model": {"threshold": 0.0},
       "hallucination_model": {"threshold": 0.0, "min_span_confidence": 0.0, "enable_nli_filtering": False}}
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
OVERRIDES: list[str] = []  # --set, for every service started


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * len(values) + 0.5) - 1))]


# ---- models and processes ------------------------------------------------------------------------------------------

def models_dir(arg: str | None) -> tuple[Path, str]:
    if arg:
        return Path(arg), f"export dirs under {arg}"
    demo = REPO / "runs" / "demo" / "export"
    if all((demo / s / "model.onnx").exists() for s in ("sentinel", "detector", "explainer")):
        return demo, "runs/demo/export (make demo: quick-trained MiniLM models)"
    from detect_helpers import tiny_stack

    out = tiny_stack(REPO / "runs" / "bench-serve" / "models", resolve_base_model("offline:minilm"))
    return out, "tiny random-weight BERTs (2 layers, hidden 32, MiniLM tokenizer), runs/bench-serve/models"


def write_config(path: Path, models: Path, *, missing_detector: bool = False, **serve) -> Path:
    import yaml

    m = {"num_threads": 1,
         "fact_check_model": {"model_id": str(models / "sentinel"), **LOW["fact_check_model"]},
         "hallucination_model": {"model_id": str(models / ("missing-detector" if missing_detector else "detector")),
                                  **LOW["hallucination_model"]},
         "nli_model": {"model_id": str(models / "explainer")}}
    path.write_text(yaml.safe_dump({"hallucination_mitigation": m, "serve": serve}))
    return path


@contextlib.contextmanager
def process(args: list[str], ready_url: str | None = None, expect_ready: bool = True):
    proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        if ready_url is None:
            yield proc.stdout.readline().strip()
        else:
            deadline = time.monotonic() + 120
            while True:
                try:
                    r = httpx.get(ready_url)
                    if r.status_code == 200 or (not expect_ready and r.json().get("reason") != "warming up"):
                        break
                except (httpx.TransportError, ValueError):
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"service did not become ready: {' '.join(args)}")
                time.sleep(0.1)
            yield ready_url.rsplit("/", 1)[0]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def service(config: Path, upstream: str, *extra: str, expect_ready: bool = True):
    port = free_port()
    extra = (*extra, *(x for o in OVERRIDES for x in ("--set", o)))
    with process(["-m", "inference.serve", "--config", str(config), "--upstream", upstream, "--port", str(port),
                  "--log-level", "error", *extra], f"http://127.0.0.1:{port}/readyz", expect_ready) as url:
        yield url


# ---- the client ------------------------------------------------------------------------------------------------------

async def run_requests(url: str, n: int, concurrency: int, *, model: str = "m", stream: bool = False,
                       deadline_s: float | None = None, path: str = "/chat/completions", body=None) -> dict:
    """n requests (or until deadline_s), `concurrency` at a time. Latencies of 200s, statuses, lost."""
    payload = body if body is not None else {"model": model, "messages": REQUEST, "stream": stream}
    latencies, statuses, lost, bodies = [], Counter(), 0, []
    unavailable = incomplete = 0
    errors: Counter = Counter()
    sent = 0
    stop_at = time.perf_counter() + deadline_s if deadline_s else None
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits, trust_env=False) as client:
        async def worker():
            nonlocal sent, lost, unavailable, incomplete
            while sent < n and (stop_at is None or time.perf_counter() < stop_at):
                sent += 1
                t0 = time.perf_counter()
                try:
                    r = await client.post(path, json=payload)
                    text = r.text
                except httpx.HTTPError as exc:
                    lost += 1
                    errors[f"{type(exc).__name__}: {exc}"[:120]] += 1
                    continue
                dt = time.perf_counter() - t0
                statuses[r.status_code] += 1
                if r.headers.get("x-vsr-verification-status") == "unavailable" or '"unavailable"' in text:
                    unavailable += 1
                if r.status_code == 200:
                    latencies.append(dt)
                    if path == "/detect":
                        bodies.append(r.json())
                    elif (stream and "[DONE]" not in text) or (not stream and not r.json().get("choices")):
                        incomplete += 1  # a 200 without a complete answer (a broken stream ends with an error)
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return {"sent": sent, "answered": sum(statuses.values()), "statuses": dict(sorted(statuses.items())),
            "lost": lost, "latencies": latencies, "elapsed": elapsed, "bodies": bodies, "unavailable": unavailable,
            "incomplete": incomplete, "errors": dict(errors)}


def batch_ceiling(models: Path, sizes=(1, 4, 16), reps: int = 15) -> dict[int, float]:
    """In-process HaluGate.detect_batch, ms per input at each batch size (median of `reps` rounds of 16 inputs,
    sizes interleaved): the most micro-batching can save on the detection itself."""
    overrides = ["hallucination_mitigation.num_threads=1"] + [
        f"hallucination_mitigation.{stage}.{k}={v}" for stage, kv in LOW.items() for k, v in kv.items()]
    gate = HaluGate.from_dirs(detector=models / "detector", sentinel=models / "sentinel",
                              explainer=models / "explainer", overrides=overrides)
    item = parse_input({"messages": EIFFEL})
    for bs in sizes:
        gate.detect_batch([item] * bs)
    per: dict[int, list[float]] = {bs: [] for bs in sizes}
    for _ in range(reps):
        for bs in sizes:
            t0, n = time.perf_counter(), 0
            while n < 16:
                gate.detect_batch([item] * bs)
                n += bs
            per[bs].append((time.perf_counter() - t0) / n * 1000)
    return {bs: pct(v, 50) for bs, v in per.items()}


def merge(runs: list[dict]) -> dict:
    statuses: Counter = Counter()
    errors: Counter = Counter()
    for r in runs:
        statuses.update(r["statuses"])
        errors.update(r["errors"])
    answered = sum(r["answered"] for r in runs)
    return {"answered": answered, "rps": answered / sum(r["elapsed"] for r in runs), "statuses": dict(statuses),
            "latencies": [x for r in runs for x in r["latencies"]], "lost": sum(r["lost"] for r in runs),
            "incomplete": sum(r["incomplete"] for r in runs), "errors": dict(errors),
            "errors_n": answered - statuses.get(200, 0)}


def interleaved_c1(upstream: str, v1: str, n: int) -> dict[str, list[float]]:
    """Concurrency 1, the three paths taking turns request by request (ms)."""
    out: dict[str, list[float]] = {"direct": [], "proxy": [], "detect": [], "stack": []}
    chat = {"model": "m", "messages": REQUEST}
    with httpx.Client(timeout=60, trust_env=False) as client:
        for i in range(n + 20):
            for key, url, body in (("direct", upstream + "/chat/completions", chat),
                                   ("proxy", v1 + "/chat/completions", chat), ("detect", v1 + "/detect", DETECT)):
                t0 = time.perf_counter()
                r = client.post(url, json=body)
                dt = (time.perf_counter() - t0) * 1000
                r.raise_for_status()
                if i >= 20:  # the first 20 rounds warm up
                    out[key].append(dt)
                    if key == "detect":
                        out["stack"].append(r.json()["timings_ms"]["total"])
    return out


def run(coro):
    return asyncio.run(coro)


def metric_value(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return float("nan")


# ---- the benchmark ---------------------------------------------------------------------------------------------------

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help="dir with sentinel/detector/explainer ONNX exports (default: see above)")
    p.add_argument("--latency-requests", type=int, default=200)
    p.add_argument("--throughput-requests", type=int, default=512)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="alternating on/off rounds of the throughput test")
    p.add_argument("--load-requests", type=int, default=5000)
    p.add_argument("--load-seconds", type=float, default=120.0)
    p.add_argument("--fault-requests", type=int, default=40, help="requests per fault kind")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every service started, e.g. serve.max_wait_ms=5")
    p.add_argument("--out", help="also write the figures as JSON here")
    args = p.parse_args()
    if args.load_seconds > 120 or args.load_requests > 5000:
        raise SystemExit("the load test is bounded: at most 5000 requests and 120 s")

    OVERRIDES.extend(args.overrides)
    models, model_note = models_dir(args.models)
    work = REPO / "runs" / "bench-serve"
    work.mkdir(parents=True, exist_ok=True)
    cpu = cpu_info().describe()  # model name, CPU class, the features that decide speed, cores
    load_before = os.getloadavg()
    print(f"# inference.serve benchmark: {cpu}, Python {platform.python_version()}, "
          f"load average {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f} at start")
    print(f"# models: {model_note}; every stage runs (thresholds 0); ONNX fp32, 1 intra-op thread; "
          f"overrides: {' '.join(args.overrides) or 'none'}")
    ceiling = batch_ceiling(models)
    print("\n## 0. The detection stack in-process (HaluGate.detect_batch, no HTTP), ms per input\n")
    print("| batch size | " + " | ".join(str(b) for b in ceiling) + " |\n|---|" + "---:|" * len(ceiling))
    print("| ms per input | " + " | ".join(f"{v:.2f}" for v in ceiling.values()) + " |")
    print(f"\nbatch {max(ceiling)} vs 1: {ceiling[1] / ceiling[max(ceiling)]:.2f}x per input: the most that "
          "micro-batching can save on detection at this model size")
    c = args.concurrency
    report: dict = {"cpu": cpu, "cpu_info": cpu_info().as_dict(), "cores": os.cpu_count(), "models": model_note,
                    "load_start": load_before,
                    "ceiling_ms_per_input": ceiling}
    cfg = write_config(work / "serve.yaml", models)
    fault_cfg = write_config(work / "serve-faults.yaml", models, upstream_timeout_s=1.0)
    missing_cfg = write_config(work / "serve-missing.yaml", models, missing_detector=True)

    with process(["-m", "tests.serve_upstream"]) as upstream_root:
        upstream = upstream_root + "/v1"
        with service(cfg, upstream) as url, service(cfg, upstream, "--no-batching") as url_off:
            v1, v1_off = url + "/v1", url_off + "/v1"
            lat = interleaved_c1(upstream, v1, args.latency_requests)
            d50, p50 = pct(lat["direct"], 50), pct(lat["proxy"], 50)
            s50 = pct(lat["stack"], 50)
            added = p50 - d50
            print(f"\n## 1. Added latency, concurrency 1 ({args.latency_requests} requests per path, the paths "
                  "interleaved request by request)\n")
            print("| path | p50 ms | p99 ms |\n|---|---:|---:|")
            for name, key in (("upstream direct", "direct"), ("through inference.serve (header action)", "proxy"),
                              ("/v1/detect round trip (same input, client view)", "detect"),
                              ("detection stack alone (`timings_ms.total` reported by /v1/detect)", "stack")):
                print(f"| {name} | {pct(lat[key], 50):.2f} | {pct(lat[key], 99):.2f} |")
            print(f"\nadded latency p50 {added:.2f} ms vs detection p50 {s50:.2f} ms + 5 ms = {s50 + 5:.2f} ms: "
                  f"{'met' if added <= s50 + 5 else 'NOT met'} (proxy overhead beyond detection {added - s50:.2f} ms)")
            report["latency"] = {"direct_p50_ms": d50, "proxy_p50_ms": p50, "stack_p50_ms": s50, "added_ms": added,
                                 "detect_roundtrip_p50_ms": pct(lat["detect"], 50)}

            # batching on and off: two services, measured in alternating rounds so that the other load on the
            # machine drifts over both alike
            rows = {"on": [], "off": []}
            detect_rows = {"on": [], "off": []}
            run(run_requests(v1_off, 20, 4))
            before = [metric_value(url, f"halugate_batch_size_{x}") for x in ("sum", "count")]
            for _ in range(args.rounds):
                for name, base in (("on", v1), ("off", v1_off)):
                    rows[name].append(run(run_requests(base, args.throughput_requests, c)))
            after = [metric_value(url, f"halugate_batch_size_{x}") for x in ("sum", "count")]
            mean_batch = {"on": (after[0] - before[0]) / max(1.0, after[1] - before[1]), "off": 1.0}
            for _ in range(args.rounds):
                for name, base in (("on", v1), ("off", v1_off)):
                    detect_rows[name].append(run(run_requests(base, args.throughput_requests, c, path="/detect",
                                                              body=DETECT)))
        print(f"\n## 2. Throughput, concurrency {c} ({args.rounds} alternating rounds of {args.throughput_requests} "
              "requests per setting)\n")
        print("| micro-batching | req/s (all rounds) | req/s per round | p50 ms | p99 ms | mean batch | errors | lost "
              "| incomplete |\n|---|---:|---|---:|---:|---:|---:|---:|---:|")
        agg = {}
        for name, runs in rows.items():
            a = merge(runs)
            agg[name] = a
            per_round = ", ".join(f"{r['answered'] / r['elapsed']:.1f}" for r in runs)
            print(f"| {name} | {a['rps']:.1f} | {per_round} | {pct(a['latencies'], 50) * 1000:.1f} | "
                  f"{pct(a['latencies'], 99) * 1000:.1f} | {mean_batch[name]:.2f} | {a['errors_n']} | {a['lost']} | "
                  f"{a['incomplete']} |")
            if a["errors"]:
                print(f"batching {name}: lost requests by client error: {a['errors']}")
        ratio = agg["on"]["rps"] / agg["off"]["rps"]
        rounds = [on["answered"] / on["elapsed"] / (off["answered"] / off["elapsed"])
                  for on, off in zip(rows["on"], rows["off"])]
        print(f"\nbatching on / off: {ratio:.2f}x over all rounds (per round: "
              f"{', '.join(f'{x:.2f}' for x in rounds)}; target >= 2x: {'met' if ratio >= 2 else 'NOT met'})")
        d_agg = {k: merge(v) for k, v in detect_rows.items()}
        d_ratio = d_agg["on"]["rps"] / d_agg["off"]["rps"]
        print(f"\nsame, POST /v1/detect only (no upstream hop), concurrency {c}: on {d_agg['on']['rps']:.1f} req/s, "
              f"off {d_agg['off']['rps']:.1f} req/s, {d_ratio:.2f}x; errors / lost: on {d_agg['on']['errors_n']} / "
              f"{d_agg['on']['lost']}, off {d_agg['off']['errors_n']} / {d_agg['off']['lost']}")
        report["throughput"] = {k: {"rps": v["rps"], "statuses": v["statuses"], "lost": v["lost"],
                                    "incomplete": v["incomplete"], "mean_batch": mean_batch[k],
                                    "p50_ms": pct(v["latencies"], 50) * 1000, "p99_ms": pct(v["latencies"], 99) * 1000}
                                for k, v in agg.items()}
        report["throughput"].update(ratio=ratio, round_ratios=rounds, detect_only_ratio=d_ratio)

        with service(cfg, upstream) as url:
            load = run(run_requests(url + "/v1", args.load_requests, c, deadline_s=args.load_seconds))
        print(f"\n## 3. Load test: up to {args.load_requests} requests in at most {args.load_seconds:.0f} s, "
              f"concurrency {c}\n")
        print("| sent | answered | by status | lost | incomplete | seconds | req/s | p50 ms | p99 ms |\n"
              "|---:|---:|---|---:|---:|---:|---:|---:|---:|")
        print(f"| {load['sent']} | {load['answered']} | {load['statuses']} | {load['lost']} | {load['incomplete']} | "
              f"{load['elapsed']:.1f} | "
              f"{load['answered'] / load['elapsed']:.1f} | {pct(load['latencies'], 50) * 1000:.1f} | "
              f"{pct(load['latencies'], 99) * 1000:.1f} |")
        if load["errors"]:
            print(f"\nlost requests by client error: {load['errors']}")
        report["load"] = {k: load[k] for k in ("sent", "answered", "statuses", "lost", "incomplete", "elapsed",
                                               "errors")}

        n = args.fault_requests
        faults = {}
        with service(fault_cfg, upstream) as url:
            v1 = url + "/v1"
            faults["upstream 500"] = run(run_requests(v1, n, 8, model="fail-500"))
            faults["upstream timeout (2 s reply, 1 s limit)"] = run(run_requests(v1, n, 8, model="slow-2"))
            faults["truncated JSON body"] = run(run_requests(v1, n, 8, model="truncate"))
            faults["truncated stream (header action: passthrough)"] = run(
                run_requests(v1, n, 8, model="truncate", stream=True))
            faults["healthy requests in between"] = run(run_requests(v1, n, 8))
        with service(missing_cfg, upstream, expect_ready=False) as url:
            faults["missing Detector model file (fail_mode open)"] = run(run_requests(url + "/v1", n, 8))
        print(f"\n## 4. Fault test ({n} requests per kind, concurrency 8)\n")
        print("| fault | sent | answered | by status | said unavailable | 200 ended by an error event | lost |\n"
              "|---|---:|---:|---|---:|---:|---:|")
        for name, r in faults.items():
            print(f"| {name} | {r['sent']} | {r['answered']} | {r['statuses']} | {r['unavailable']} | "
                  f"{r['incomplete']} | {r['lost']} |")
        print("\n(truncated stream: the status line was already 200 when the upstream stream broke, so the service "
              "ends it with an OpenAI-style error event and no [DONE]; the openai client raises APIError on it)")
        report["faults"] = {k: {x: v[x] for x in ("sent", "answered", "statuses", "unavailable", "incomplete", "lost")}
                            for k, v in faults.items()}
    load_after = os.getloadavg()
    print(f"\n# load average at the end {load_after[0]:.2f} / {load_after[1]:.2f} / {load_after[2]:.2f}")
    report["load_end"] = load_after
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
