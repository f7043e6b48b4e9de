"""`precision: auto`: the faster of an export's fp32 and int8 ONNX files on this CPU, measured once and cached.

Which file is faster depends on the CPU: dynamic int8 (MatMulInteger) gains from VNNI and AVX-512 and loses to
fp32 on AVX2-only CPUs, so no fixed choice is the fastest everywhere. With `precision: auto` the runner
(inference.runners.OnnxRunner) asks `decide()`:

1. Correctness first: int8 is a candidate only where the export shipped an int8 file (training.export writes
   it only when it kept its agreement floor against fp32). No int8 file: fp32, nothing timed.
2. Cache: the decision is keyed by both files (path, size, modification time), the CPU (model name and the
   features that decide speed: inference.hardware), the thread count, the execution providers, the
   onnxruntime version and the timing shape. A hit costs one small JSON read; any change (a re-export, another
   CPU, another onnxruntime) is a miss.
3. A miss times both files on a representative input (one 512-token window for a token classifier, one
   128-token text for a sequence classifier; shorter where the model is), a warm-up each, then `RUNS`
   alternating calls each; the median of each. int8 is chosen only when its median is at least `MIN_GAIN`
   (3%) below fp32's: on a tie the exact model wins.
4. The decision and both timings are logged, kept on the runner (`runner.precision_decision`), shown by the
   service's /metrics, and written to the cache (a write that fails is logged, never fatal).

`precision: fp32 | int8` (or `onnx_file`) forces a file and times nothing. The cache lives in
$HALUGATE_CACHE_DIR, else $XDG_CACHE_HOME/halugate, else ~/.cache/halugate (`precision.json`).

    python -m inference.precision runs/demo/export/detector --task token      # decide (or show the cached one)
    python -m inference.precision runs/demo/export/detector --task token --retime
    python -m inference.precision --clear
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from inference.hardware import CpuInfo, cpu_info
from inference.runners import FALLBACK_FILE

log = logging.getLogger("halugate.inference")

CACHE_ENV = "HALUGATE_CACHE_DIR"
CACHE_FILE = "precision.json"
CACHE_VERSION = 1
MAX_ENTRIES = 256        # oldest decisions dropped beyond this
RUNS = 5                 # timed calls per file (after one warm-up each), alternating
MIN_GAIN = 0.03          # int8 must be this much faster than fp32 (median) to be chosen
TOKEN_LENGTH = 512       # the timing input: one window of a token classifier (the Detector) ...
SEQUENCE_LENGTH = 128    # ... one text / pair of a sequence classifier (Sentinel, Explainer)


@dataclass
class PrecisionDecision:
    """Which file a runner uses and why."""

    precision: str                  # "fp32" | "int8"
    file: str                       # the ONNX file's name
    source: str                     # measured | cached | forced | only-fp32 | only-int8 | pinned
    reason: str
    fp32_ms: float | None = None    # median of the timing calls (measured, or as measured when cached)
    int8_ms: float | None = None
    shape: list[int] | None = None  # [batch, tokens] of the timing input
    cpu_class: str = ""
    cpu: str = ""
    measured_at: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        timed = (f"; int8 {self.int8_ms:.1f} ms vs fp32 {self.fp32_ms:.1f} ms median on {self.shape}"
                 if self.fp32_ms is not None and self.int8_ms is not None else "")
        return f"{self.precision} ({self.file}, {self.source}): {self.reason}{timed}"


# ---- the rule --------------------------------------------------------------------------------------------------

def choose(fp32_ms: float, int8_ms: float, min_gain: float = MIN_GAIN) -> str:
    """"int8" when its time is at least `min_gain` below fp32's, else "fp32" (the exact model wins ties)."""
    if not (fp32_ms > 0 and int8_ms > 0):
        raise ValueError(f"timings must be positive, got fp32 {fp32_ms} ms, int8 {int8_ms} ms")
    return "int8" if int8_ms <= fp32_ms * (1.0 - min_gain) else "fp32"


def timing_shape(task: str, max_length: int) -> tuple[int, int]:
    """(batch, tokens) of the timing input for a model of `task` reading at most `max_length` tokens."""
    return (1, max(8, min(max_length, TOKEN_LENGTH if task == "token" else SEQUENCE_LENGTH)))


# ---- timing ----------------------------------------------------------------------------------------------------

def timing_feeds(session, shape: tuple[int, int], vocab_size: int = 30000, seed: int = 0) -> dict[str, np.ndarray]:
    """Feeds for an onnxruntime session: random ordinary token ids (not the low special ids), full attention,
    the second half as segment 1 (a Detector's answer; a pair's second text)."""
    batch, length = shape
    rng = np.random.default_rng(seed)
    ids = rng.integers(min(1000, vocab_size // 2), max(vocab_size, 2), size=(batch, length), dtype=np.int64)
    types = np.zeros((batch, length), dtype=np.int64)
    types[:, length // 2:] = 1
    values = {"input_ids": ids, "attention_mask": np.ones((batch, length), dtype=np.int64),
              "token_type_ids": types,
              "position_ids": np.broadcast_to(np.arange(length, dtype=np.int64), (batch, length)).copy()}
    feeds = {}
    for inp in session.get_inputs():
        if inp.name not in values:
            raise ValueError(f"unsupported graph input {inp.name!r}")
        feeds[inp.name] = values[inp.name].astype(np.int32) if inp.type == "tensor(int32)" else values[inp.name]
    return feeds


def time_sessions(sessions: dict[str, object], feeds: dict[str, dict], runs: int = RUNS,
                  clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Milliseconds per call of each session on its feeds: one warm-up call each, then `runs` rounds in which
    every session runs once (alternating, so that a change of machine load hits all alike)."""
    for name, session in sessions.items():
        session.run(None, feeds[name])
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(runs):
        for name, session in sessions.items():
            t = clock()
            session.run(None, feeds[name])
            times[name].append((clock() - t) * 1000.0)
    return times


# ---- the cache -------------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    """$HALUGATE_CACHE_DIR, else $XDG_CACHE_HOME/halugate, else ~/.cache/halugate."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "halugate"


def file_identity(path: Path) -> dict:
    st = Path(path).stat()
    return {"path": str(Path(path).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def cache_key(fp32: Path, int8: Path, cpu: CpuInfo, *, threads: int, providers: Sequence[str],
              shape: tuple[int, int], runtime: str) -> tuple[str, dict]:
    """The cache key (a hash) and what it hashes: both files, the CPU, threads, providers, onnxruntime, shape."""
    parts = {"fp32": file_identity(fp32), "int8": file_identity(int8), "cpu": cpu.fingerprint,
             "threads": int(threads), "providers": list(providers), "onnxruntime": runtime, "shape": list(shape)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24], parts


class PrecisionCache:
    """The decisions of this user, one JSON file; unreadable or unwritable files are logged and passed over."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path is not None else cache_dir() / CACHE_FILE

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, json.JSONDecodeError) as exc:
            log.warning("precision cache %s unreadable (%s): deciding afresh", self.path, exc)
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(
                data.get("entries"), dict):
            return {}
        return data["entries"]

    def get(self, key: str) -> dict | None:
        entry = self._read().get(key)
        return entry if isinstance(entry, dict) and entry.get("precision") in ("fp32", "int8") else None

    def put(self, key: str, entry: dict) -> bool:
        entries = self._read()
        entries[key] = entry
        if len(entries) > MAX_ENTRIES:
            for old in sorted(entries, key=lambda k: entries[k].get("measured_at", ""))[: len(entries) - MAX_ENTRIES]:
                del entries[old]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".precision.", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": CACHE_VERSION, "entries": entries}, fh, indent=1, sort_keys=True)
            os.replace(tmp, self.path)  # atomic: a concurrent reader sees the old file or the new one
            return True
        except OSError as exc:
            log.warning("precision cache %s not written (%s): the decision holds for this process only",
                        self.path, exc)
            return False

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


# ---- the decision ----------------------------------------------------------------------------------------------

def model_vocab_size(model_dir: Path) -> int:
    try:
        return int(json.loads((model_dir / "config.json").read_text(encoding="utf-8"))["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return 30000


def fallback_share(model_dir: str | Path) -> float:
    """The share of inputs an int8 sequence classifier with an fp32 fallback (int8_fallback.json) sends to fp32 as
    well, from its export's parity check (export_report.json: parity.int8.fallback_rate); 0 without a fallback."""
    model_dir = Path(model_dir)
    if not (model_dir / FALLBACK_FILE).is_file():
        return 0.0
    try:
        rate = json.loads((model_dir / "export_report.json").read_text(encoding="utf-8"))["parity"]["int8"][
            "fallback_rate"]
        return min(1.0, max(0.0, float(rate)))
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("%s: int8_fallback.json without a fallback_rate in export_report.json: int8 is timed alone",
                    model_dir)
        return 0.0


def decide(model_dir: str | Path, *, fp32: Path | None, int8: Path | None, task: str, max_length: int,
           load: Callable[[Path], object], threads: int = 1, providers: Sequence[str] = ("CPUExecutionProvider",),
           cache: PrecisionCache | None = None, cpu: CpuInfo | None = None, retime: bool = False,
           timer: Callable[[dict, dict], dict[str, list[float]]] | None = None,
           runtime: str | None = None, int8_fallback_share: float = 0.0) -> tuple[PrecisionDecision, object | None]:
    """The file `precision: auto` runs for this export on this CPU, and its loaded session when timing loaded it
    (else None: the caller loads `decision.file`). `load(path)` makes a session; `timer(sessions, feeds)`
    returns milliseconds per call (default `time_sessions`; tests inject their own). `int8_fallback_share`: the
    share of inputs int8 also sends to fp32 (`fallback_share`); int8 is charged that share of fp32's time."""
    model_dir = Path(model_dir)
    cpu = cpu or cpu_info()
    base = {"cpu_class": cpu.cpu_class, "cpu": cpu.describe()}
    if int8 is None or fp32 is None:
        only, path = ("fp32", fp32) if int8 is None else ("int8", int8)
        reason = ("the export shipped no int8 file (not quantised, or int8 missed its agreement floor)"
                  if int8 is None else "the export has no fp32 file")
        return PrecisionDecision(only, path.name, f"only-{only}", reason, **base), None
    if runtime is None:
        import onnxruntime

        runtime = onnxruntime.__version__
    cache = cache if cache is not None else PrecisionCache()
    shape = timing_shape(task, max_length)
    key, parts = cache_key(fp32, int8, cpu, threads=threads, providers=providers, shape=shape, runtime=runtime)
    if int8_fallback_share:
        key, parts = key + f"-fb{int8_fallback_share:.4f}", {**parts, "int8_fallback_share": int8_fallback_share}
    entry = None if retime else cache.get(key)
    if entry is not None:
        chosen = entry["precision"]
        decision = PrecisionDecision(chosen, (int8 if chosen == "int8" else fp32).name, "cached",
                                     f"{entry.get('reason') or 'measured before'} (cached in {cache.path})",
                                     entry.get("fp32_ms"), entry.get("int8_ms"),
                                     entry.get("shape"), measured_at=entry.get("measured_at", ""), **base)
        log.info("%s: precision auto -> %s", model_dir, decision.line())
        return decision, None
    sessions = {"fp32": load(fp32), "int8": load(int8)}
    vocab = model_vocab_size(model_dir)
    feeds = {name: timing_feeds(s, shape, vocab) for name, s in sessions.items()}
    times = (timer or time_sessions)(sessions, feeds)
    # a clock too coarse for a tiny model can read 0: clamp, so that a tie (fp32) comes out
    fp32_raw, int8_raw = (max(statistics.median(times[n]), 1e-6) for n in ("fp32", "int8"))
    int8_raw += int8_fallback_share * fp32_raw  # its near-ties run again in fp32 (inference.runners)
    chosen = choose(fp32_raw, int8_raw)
    fp32_ms, int8_ms = round(fp32_raw, 3), round(int8_raw, 3)
    reason = (f"int8 measured {fp32_raw / int8_raw:.2f}x faster than fp32 on this CPU" if chosen == "int8" else
              f"int8 not at least {MIN_GAIN:.0%} faster than fp32 on this CPU ({fp32_raw / int8_raw:.2f}x)")
    if int8_fallback_share:
        reason += f" (int8 charged its fp32 fallback on {int8_fallback_share:.1%} of inputs)"
    decision = PrecisionDecision(chosen, (int8 if chosen == "int8" else fp32).name, "measured", reason, fp32_ms,
                                 int8_ms, list(shape), measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), **base)
    cache.put(key, {**parts, "precision": chosen, "reason": reason, "fp32_ms": fp32_ms, "int8_ms": int8_ms,
                    "shape": list(shape),
                    "fp32_all_ms": [round(x, 2) for x in times["fp32"]],
                    "int8_all_ms": [round(x, 2) for x in times["int8"]],
                    "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
                    "cpu_class": cpu.cpu_class, "cpu_description": cpu.describe(),
                    "measured_at": decision.measured_at})
    log.info("%s: precision auto -> %s", model_dir, decision.line())
    return decision, sessions[chosen]


def forced(precision: str, path: Path, *, pinned: bool = False) -> PrecisionDecision:
    """The decision record of a forced precision or a pinned `onnx_file` (nothing timed)."""
    cpu = cpu_info()
    source = "pinned" if pinned else "forced"
    reason = "onnx_file set in the config" if pinned else f"precision: {precision} set in the config"
    return PrecisionDecision(precision, path.name, source, reason, cpu_class=cpu.cpu_class, cpu=cpu.describe())


# ---- CLI -------------------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Show or redo the `precision: auto` decision for an export dir")
    p.add_argument("model_dir", nargs="?", help="an export dir (model.onnx + model_quantized.onnx)")
    p.add_argument("--task", choices=["token", "sequence"], default="token")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: the physical cores, as the runtime)")
    p.add_argument("--retime", action="store_true", help="time both files again and replace the cached decision")
    p.add_argument("--clear", action="store_true", help="delete the cache file")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cache = PrecisionCache()
    if args.clear:
        cache.clear()
        print(f"removed {cache.path}")
        if not args.model_dir:
            return 0
    if not args.model_dir:
        p.error("model_dir is required (or --clear)")
    from inference.runners import ModelLoadError, load_runner

    try:
        if args.retime:
            os.environ["HALUGATE_PRECISION_RETIME"] = "1"
        runner = load_runner(args.model_dir, args.task, precision="auto", num_threads=args.threads)
    except (ModelLoadError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"CPU: {cpu_info().describe()}")
    print(json.dumps(runner.precision_decision.as_dict(), indent=2))
    print(f"cache: {cache.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
