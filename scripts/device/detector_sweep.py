"""Detector recipe sweep under the 5-fold CV protocol (eval.detector --cv 5), every (arm, fold) one process, all
at once on one GPU: what a CPU session cannot afford (one CV of the offline recipe is 75-150 min on 2 cores).

    python3 scripts/device/detector_sweep.py WORK OUT BUDGET_S [smoke]

Folds run until BUDGET_S - SWEEP_AGGREGATE_S (default 150 s); arms with all five folds are then aggregated
(cross-fold calibration: each arm reruns its fold models over the other folds, on the CPU cores). OUT gets
summary.json (per fold and mean of each arm) and sweep.tgz (every arm's JSON, reports and logs, no weights).
SWEEP_MODEL names the base model directory; SWEEP_ARMS (comma-separated names) picks arms; `smoke` runs one arm
for two steps on two folds (the CPU check). Arms are choices to measure, never defaults: a winner goes into
configs/ only after a CPU rerun of its CV.

Ran on 2026-12-04 (H200; docs/experiments.md, "recipe sweep on an H200"): with SWEEP_BUDGET=480 all 35 folds of the
first seven arms trained in 368 s, but the aggregation then had 75 s and timed out at one thread per process, so
only the fold calibration came back; hence the larger reserve and the threads below. The seed arms ran in a
second call (SWEEP_ARMS, 20 folds in 270 s).
"""
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WORK, OUT, BUDGET = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
SMOKE = len(sys.argv) > 4
T0 = time.time()
MODEL = os.environ["SWEEP_MODEL"]
CONFIG = "configs/detector.offline.yaml"

ARMS = {  # name -> (--set overrides, relative cost for ordering)
    "e10": (["train.epochs=10"], 10),
    "e6_splice3": (["train.epochs=6", "data.augment.splice_per_record=3"], 8),
    "e6": (["train.epochs=6"], 6),
    "e6_unweighted": (["train.epochs=6", "train.class_weighted=false"], 6),
    "base": ([], 3),
    "base_seed7": (["run.seed=7"], 3),
    "untrained": (["train.max_steps=1"], 1),  # control: what the grounding combiner does with a random head
    # the seed's share of the spread (run second, SWEEP_ARMS): is a recipe's gain larger than a reseed's?
    "base_seed1": (["run.seed=1"], 3),
    "base_seed2": (["run.seed=2"], 3),
    "base_seed3": (["run.seed=3"], 3),
    "e6_splice3_seed7": (["train.epochs=6", "data.augment.splice_per_record=3", "run.seed=7"], 8),
}
FOLDS = [0, 1, 2, 3, 4]
if os.environ.get("SWEEP_ARMS"):
    ARMS = {a: ARMS[a] for a in os.environ["SWEEP_ARMS"].split(",")}
if SMOKE:
    ARMS = {"base": (["train.max_steps=2"], 1)}
    FOLDS = [0, 1]
WORKERS = int(os.environ.get("SWEEP_WORKERS", "40"))
AGGREGATE_S = float(os.environ.get("SWEEP_AGGREGATE_S", "150"))


def cmd(arm, extra):
    sets = [f"model.base_model={MODEL}", *ARMS[arm][0]]
    c = [sys.executable, "-m", "eval.detector", "--cv", "5", "--config", CONFIG,
         "--data-dir", os.environ["HALUGATE_DATA_DIR"], "--out", str(WORK / arm)]
    for s in sets:
        c += ["--set", s]
    return c + extra


def run(c, log, timeout, threads=1):
    if timeout <= 5:
        return "skipped"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(c, check=False, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout,
                                env=env).returncode
        except subprocess.TimeoutExpired:
            return "timeout"
    return rc


def left(reserve):
    return BUDGET - (time.time() - T0) - reserve


jobs = sorted(((a, f) for a in ARMS for f in FOLDS), key=lambda j: -ARMS[j[0]][1])
for a in ARMS:
    (WORK / a).mkdir(parents=True, exist_ok=True)
status = {}
with ThreadPoolExecutor(WORKERS) as pool:
    futs = {pool.submit(lambda a=a, f=f: run(cmd(a, ["--folds", str(f)]), WORK / a / f"job-{f}.log",
                                             left(AGGREGATE_S))): (a, f) for a, f in jobs}
    for fu, (a, f) in futs.items():
        status[f"{a}/{f}"] = fu.result()
        print(f"{time.time() - T0:6.0f}s {a} fold {f}: {status[f'{a}/{f}']}", flush=True)

# Aggregate the arms whose folds all finished (cross-fold calibration: OOF predictions of every fold model).
done = [a for a in ARMS if all((WORK / a / f"fold-{f}" / "fold_metrics.json").is_file() for f in FOLDS)]
if not SMOKE:
    with ThreadPoolExecutor(WORKERS) as pool:
        threads = max(1, (os.cpu_count() or 1) // max(1, len(done)))  # the folds' GPU work is over: share the cores
        for a, rc in zip(done, pool.map(lambda a: run(cmd(a, []), WORK / a / "aggregate.log", left(20), threads),
                                        done)):
            print(f"{time.time() - T0:6.0f}s aggregate {a}: {rc}", flush=True)


def fold_row(a, f):
    p = WORK / a / f"fold-{f}" / "fold_metrics.json"
    if not p.is_file():
        return None
    d = json.loads(p.read_text())
    r = d["rows"]
    return {"span": r["detector"]["span"]["overall"]["f1"], "example": r["detector"]["example"]["overall"]["f1"],
            "token": r["detector"]["token"]["overall"]["f1"],
            "span_alone": r["detector_without_combiner"]["span"]["overall"]["f1"],
            "auroc": d["auroc"].get("overall"), "steps": d["global_steps"], "train_s": d["train_seconds"]}


summary = {"status": status, "elapsed_s": time.time() - T0, "arms": {}}
lines = []
for a in ARMS:
    rows = {f: fold_row(a, f) for f in FOLDS}
    have = {f: r for f, r in rows.items() if r}
    arm = {"sets": ARMS[a][0], "folds": have}
    m = WORK / a / "metrics.json"
    if m.is_file() and a in done:
        arm["metrics"] = json.loads(m.read_text()).get("summary")
    summary["arms"][a] = arm

    def ms(key, have=have):
        v = [r[key] for r in have.values() if r[key] is not None]
        return f"{100 * statistics.mean(v):.1f}±{100 * statistics.pstdev(v):.1f}" if v else "-"
    per = " / ".join(f"{100 * have[f]['span']:.1f}" if f in have else "--" for f in FOLDS)
    lines.append(f"{a:16s} folds {len(have)} span {ms('span')} ({per}) example {ms('example')} token {ms('token')} "
                 f"alone {ms('span_alone')} auroc {ms('auroc')}")
(OUT / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
print("\n".join(lines), flush=True)
with tarfile.open(OUT / "sweep.tgz", "w:gz") as tar:
    for p in sorted(WORK.rglob("*")):
        if (p.is_file() and p.suffix in {".json", ".jsonl", ".md", ".log", ".yaml"} and "checkpoint" not in str(p)
                and not p.name.startswith(("tokenizer", "special_tokens"))):
            tar.add(p, arcname=str(p.relative_to(WORK)))
print(f"done in {time.time() - T0:.0f}s", flush=True)
