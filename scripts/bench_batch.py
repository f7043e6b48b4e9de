"""Benchmark of `python -m inference.batch`: flat memory, resume after a kill, streaming overhead, Ray vs local.

Data: RAGTruth answers (HALUGATE_DATA_DIR/ragtruth_test_subset, both files: the 611 distinct answers that come
with their context; test_balanced's QA rows have none) repeated with new ids (`<ragtruth id>~<copy>`) up to the sizes asked, with the generating model as a
group column. Models: --config (default configs/inference.yaml, the `make demo` exports); --set overrides.

1. Memory: the CLI in a fresh process on the first --small rows and on --large rows; rows in / rows out and the
   peak RSS of the process tree (the driver and its workers, sampled every 0.1 s). Target: large <= 1.2 x small.
2. Kill and resume: the --small run again, SIGKILLed (the whole process group) once half of its shards are
   written, then rerun: duplicate ids, missing ids, and rows that differ from the uninterrupted run of step 1
   (every result field but timings_ms). Target: 0, 0, 0.
3. Streaming overhead on the first --compare rows, all in this process, each timed from model load to last
   result: `HaluGate.detect_batch` on the rows held in memory (the JSONL read whole, one call), then the local
   engine (`inference.batch` main(), shards and all). Target: local rows/s >= 0.9 x in-memory rows/s.
4. Ray vs local on the first --ray rows: the local engine with --ray-workers processes and the Ray engine with
   --ray-workers actors (a local Ray instance started before the clock; the actors' model loads are timed), both
   timed as in 3; identical results and rows/s side by side. Target: Ray >= 0.7 x local.

    python scripts/bench_batch.py --small 2000 --large 20000 \
        --compare 1000 --ray 1000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inference.batch import io as bio
from inference.batch.cli import main as batch_main

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def ragtruth_rows(data_dir: Path) -> list[dict]:
    from training.data.spans import ragtruth_row_record

    out, seen = [], set()
    for name in ("test_balanced.jsonl", "gpt_baseline_predictions.jsonl"):
        path = data_dir / "ragtruth_test_subset" / name
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = ragtruth_row_record(json.loads(line))
                # test_balanced's QA rows carry no passages; 45 answers are in both files: each is taken once
                if rec["answer"] and rec["context"] and rec["id"] not in seen:
                    seen.add(rec["id"])
                    out.append({"id": rec["id"], "context": rec["context"], "question": rec["question"],
                                "answer": rec["answer"], "task_type": rec["task_type"],
                                "model": rec.get("model") or "(unknown)"})
    return out


def write_input(base: list[dict], n: int, path: Path) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            row = dict(base[i % len(base)])
            row["id"] = f"{row['id']}~{i // len(base)}"
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def tree_rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def cli(args, inp: Path, out: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "inference.batch", "--input", str(inp), "--output", str(out), "--shard-size",
           str(args.shard_size), "--workers", str(args.workers), "--group-by", "model", *extra]
    if args.config:
        cmd += ["--config", args.config]
    for o in args.overrides:
        cmd += ["--set", o]
    return cmd


def run_measured(cmd: list[str], kill_at_shards: int = 0, out: Path | None = None) -> dict:
    """Run a CLI process; peak RSS of its tree; optionally SIGKILL the group once `kill_at_shards` exist."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    peak = 0
    killed = False
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        if kill_at_shards and out is not None and len(bio.shard_paths(out)) >= kill_at_shards:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.1)
    stdout, stderr = proc.communicate()
    if proc.returncode not in (0,) and not killed:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr[-3000:]}")
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak / 2**20, "killed": killed,
            "stdout": stdout}


def compare(got: list[dict], want: list[dict], n: int, ids: list[str]) -> dict:
    got_ids = [r["id"] for r in got]
    by_row = {r["row"]: r for r in want}
    return {"rows_out": len(got), "duplicate_ids": len(got_ids) - len(set(got_ids)),
            "missing_ids": len(set(ids) - set(got_ids)),
            "rows_differing": sum(1 for r in got if by_row.get(r["row"]) != r) + max(0, n - len(got))}


def in_memory(args, inp: Path) -> dict:
    """detect_batch on every row held in memory, timed from model load to the last result."""
    from inference.batch.engines import build_gate, threads_per_worker
    from inference.config import to_dict
    from inference.settings import default_config_path, load_settings

    t0 = time.perf_counter()
    settings = load_settings(args.config or default_config_path(), args.overrides)
    gate = build_gate(to_dict(settings), threads_per_worker(1))
    rows = [json.loads(line) for line in inp.read_text(encoding="utf-8").splitlines()]
    items = [{k: r[k] for k in ("context", "question", "answer", "task_type")} for r in rows]
    results = gate.detect_batch(items)
    seconds = time.perf_counter() - t0
    return {"rows": len(results), "seconds": seconds, "rows_per_s": len(results) / seconds}


def engine_run(args, inp: Path, out: Path, *extra: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    argv = cli(args, inp, out, "--no-report", *extra)[3:]
    t0 = time.perf_counter()
    rc = batch_main(argv)
    seconds = time.perf_counter() - t0
    if rc:
        raise SystemExit(f"inference.batch {' '.join(argv)}: exit {rc}")
    n = json.loads((out / "run.json").read_text())["rows_scored"]
    return {"rows": n, "seconds": seconds, "rows_per_s": n / seconds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=None)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--data-dir", default=os.environ.get("HALUGATE_DATA_DIR", str(REPO.parent / "shared" / "data")))
    p.add_argument("--out", default="runs/bench-batch")
    p.add_argument("--small", type=int, default=2000)
    p.add_argument("--large", type=int, default=20000)
    p.add_argument("--compare", type=int, default=1000, help="rows for the streaming-overhead comparison")
    p.add_argument("--ray", type=int, default=1000, help="rows for Ray vs local (0: skip)")
    p.add_argument("--ray-workers", type=int, default=2)
    p.add_argument("--workers", type=int, default=1, help="local engine worker processes")
    p.add_argument("--shard-size", type=int, default=256)
    p.add_argument("--skip", nargs="*", default=[], choices=["memory", "resume", "overhead", "ray"])
    args = p.parse_args()

    from inference.hardware import cpu_info

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = ragtruth_rows(Path(args.data_dir))
    print(f"hardware: {cpu_info().describe()}; load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"data: {len(base)} RAGTruth answers (ragtruth_test_subset), repeated with new ids; config: "
          f"{args.config or 'configs/inference.yaml'} {' '.join(args.overrides)}; workers {args.workers}, "
          f"shard size {args.shard_size}")
    sizes = {"small": args.small, "large": args.large}
    inputs = {k: write_input(base, n, out / f"{k}.jsonl") for k, n in sizes.items()}
    report: dict = {"hardware": cpu_info().describe()}

    if "memory" not in args.skip:
        for k, n in sizes.items():
            shutil.rmtree(out / k, ignore_errors=True)
            m = run_measured(cli(args, inputs[k], out / k))
            rows_out = len(bio.read_rows(out / k))
            report[f"memory_{k}"] = {"rows_in": n, "rows_out": rows_out, "peak_rss_mb": round(m["peak_rss_mb"], 1),
                                     "seconds": round(m["seconds"], 1), "rows_per_s": round(n / m["seconds"], 2)}
            print(f"[memory] {n} rows: rows out {rows_out}, peak RSS {m['peak_rss_mb']:.0f} MB, "
                  f"{m['seconds']:.0f} s ({n / m['seconds']:.1f} rows/s end to end)", flush=True)
        ratio = report["memory_large"]["peak_rss_mb"] / report["memory_small"]["peak_rss_mb"]
        report["memory_ratio"] = round(ratio, 3)
        print(f"[memory] peak RSS {args.large} / {args.small} rows = {ratio:.3f} (target <= 1.2)", flush=True)

    if "resume" not in args.skip:
        full, killed = out / "small", out / "small-killed"
        if not bio.shard_paths(full):
            run_measured(cli(args, inputs["small"], full))
        shutil.rmtree(killed, ignore_errors=True)
        total = len(bio.plan(args.small, args.shard_size))
        m = run_measured(cli(args, inputs["small"], killed), kill_at_shards=max(1, total // 2), out=killed)
        at = len(bio.shard_paths(killed))
        run_measured(cli(args, inputs["small"], killed))
        ids = [json.loads(line)["id"] for line in inputs["small"].read_text(encoding="utf-8").splitlines()]
        c = compare(bio.read_rows(killed), bio.read_rows(full), args.small, ids)
        info = json.loads((killed / "run.json").read_text())
        report["resume"] = {"killed": m["killed"], "shards_at_kill": at, "shards": total,
                            "rerun_shards_written": info["shards_written"], **c}
        print(f"[resume] SIGKILL with {at}/{total} shards written; the rerun wrote {info['shards_written']}: rows out "
              f"{c['rows_out']}/{args.small}, duplicate ids {c['duplicate_ids']}, missing ids {c['missing_ids']}, "
              f"rows differing from the uninterrupted run {c['rows_differing']}", flush=True)

    compare_in = write_input(base, args.compare, out / "compare.jsonl")
    if "overhead" not in args.skip:
        mem = in_memory(args, compare_in)
        loc = engine_run(args, compare_in, out / "compare-local")
        ratio = loc["rows_per_s"] / mem["rows_per_s"]
        report["overhead"] = {"in_memory": mem, "local": loc, "ratio": round(ratio, 3)}
        print(f"[overhead] {args.compare} rows: detect_batch in memory {mem['rows_per_s']:.2f} rows/s "
              f"({mem['seconds']:.1f} s), local engine ({args.workers} worker(s)) {loc['rows_per_s']:.2f} rows/s "
              f"({loc['seconds']:.1f} s): ratio {ratio:.3f} (target >= 0.9)", flush=True)

    if args.ray and "ray" not in args.skip:
        import ray

        ray_in = write_input(base, args.ray, out / "ray.jsonl")
        loc = engine_run(args, ray_in, out / "ray-local", "--workers", str(args.ray_workers))
        t0 = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
        start_s = time.perf_counter() - t0
        try:
            rr = engine_run(args, ray_in, out / "ray-ray", "--engine", "ray", "--workers", str(args.ray_workers))
        finally:
            ray.shutdown()
        ids = [json.loads(line)["id"] for line in ray_in.read_text(encoding="utf-8").splitlines()]
        c = compare(bio.read_rows(out / "ray-ray"), bio.read_rows(out / "ray-local"), args.ray, ids)
        ratio = rr["rows_per_s"] / loc["rows_per_s"]
        report["ray"] = {"local": loc, "ray": rr, "ray_start_s": round(start_s, 1), "ratio": round(ratio, 3), **c}
        print(f"[ray] {args.ray} rows: local engine ({args.ray_workers} workers) {loc['rows_per_s']:.2f} rows/s "
              f"({loc['seconds']:.1f} s), Ray "
              f"engine ({args.ray_workers} actors, local instance started in {start_s:.1f} s before the clock) "
              f"{rr['rows_per_s']:.2f} rows/s ({rr['seconds']:.1f} s): ratio {ratio:.3f} (target >= 0.7); rows "
              f"differing {c['rows_differing']}, rows out {c['rows_out']}", flush=True)

    (out / "bench.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"written: {out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
