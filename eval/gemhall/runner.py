"""Ask every (item, t) pair once, grade it, and append it to a JSONL log the moment it finishes.

The log (`results.jsonl` under --out) is the run's memory: rerunning the same command reloads it and
calls the backend only for pairs that are missing or ended in an error. Each record is written with a
single write + flush, so an interrupted run (Ctrl-C, kill) leaves whole lines; a torn last line from a
hard kill is cut off on the next start.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eval.backends import Backend, BackendError, FatalBackendError, acall_or_error, call_or_error

from .data import Item
from .idk import is_idk
from .metrics import score
from .prompt import build_prompt

LOG_NAME = "results.jsonl"
RUN_NAME = "run.json"
PROMPT_VERSION = 1  # bump when build_prompt changes, so old logs are not silently mixed with new ones


class ResumeError(ValueError):
    """The log under --out belongs to a different run; the message says what differs."""


def run_resumable(tool: str, what: str, log_path: Path, run):
    """`run()` -> (its result, 0); or (None, exit code) with a message saying the log keeps what finished.

    Shared by the resumable CLIs (gemhall, halurate): 2 for a log of another run, 3 when the backend refuses
    for good (bad key, unknown model), 130 on Ctrl-C.
    """
    import sys

    try:
        return run(), 0
    except ResumeError as exc:
        print(f"{tool}: error: {exc}", file=sys.stderr)
        return None, 2
    except FatalBackendError as exc:
        print(f"{tool}: stopped: {exc}\nFinished {what} are kept in {log_path}; fix the problem and rerun the "
              "same command to resume.", file=sys.stderr)
        return None, 3
    except KeyboardInterrupt:
        print(f"\n{tool}: interrupted. Finished {what} are kept in {log_path}; rerun the same command to resume.",
              file=sys.stderr)
        return None, 130


def key_of(item_id: str, t: float) -> tuple[str, float]:
    return (item_id, float(t))


class ResultLog:
    """The append-only JSONL log under --out (one write + flush per record), shared by the resumable CLIs.

    A subclass names its records (`what`, for the error message) and their key (`key`); gemhall's are keyed
    by (item id, threshold).
    """

    what = "result record"

    def __init__(self, out_dir: str | Path):
        self.path = Path(out_dir) / LOG_NAME
        self._fh = None

    @staticmethod
    def key(rec: dict):
        return key_of(rec["id"], rec["t"])

    def load(self) -> dict:
        """Records by key; for a key logged more than once (an error, then a retry) the last wins."""
        if not self.path.exists():
            return {}
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):  # torn final write: drop it, the record is simply redone
            raw = raw[: raw.rfind(b"\n") + 1]
            self.path.write_bytes(raw)
        records: dict = {}
        for lineno, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                records[self.key(rec)] = rec
            except (ValueError, KeyError, TypeError) as exc:
                raise ResumeError(f"{self.path}: line {lineno}: not a {self.what} ({exc}); "
                                  "fix or remove the line, or use a new --out") from None
        return records

    def append(self, record: dict) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8")
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def check_fingerprint(out_dir: Path, fingerprint: dict, has_records: bool) -> None:
    """Refuse to resume a log written with a different backend, model, sampling or prompt."""
    path = out_dir / RUN_NAME
    if has_records and path.exists():
        previous = json.loads(path.read_text(encoding="utf-8"))
        diffs = [f"{k}: {previous.get(k)!r} -> {fingerprint.get(k)!r}"
                 for k in sorted(set(previous) | set(fingerprint)) if previous.get(k) != fingerprint.get(k)]
        if diffs:
            raise ResumeError(f"{out_dir} holds results of a different run ({'; '.join(diffs)}); "
                              "use a new --out, or delete the old results to start over")
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fingerprint, indent=2) + "\n", encoding="utf-8")


def check_items(records: dict, items: Sequence[Item], log_path: Path) -> None:
    by_id = {it.id: it for it in items}
    for (item_id, t), rec in records.items():
        item = by_id.get(item_id)
        if item is not None and (rec.get("question") != item.question or rec.get("gold") != item.gold):
            raise ResumeError(f"{log_path}: item {item_id!r} (t={t:g}) was logged with a different question or "
                              "gold than the data now has; use a new --out for changed data")


@dataclass
class RunStats:
    total: int = 0
    resumed: int = 0
    attempted: int = 0
    errors: int = 0
    seconds: float = 0.0
    records: list[dict] = field(default_factory=list)


class Runner:
    def __init__(
        self,
        backend: Backend,
        judge,
        out_dir: str | Path,
        *,
        max_output_tokens: int = 128,
        temperature: float = 0.0,
        seed: int | None = 1234,
        thinking_budget: int | None = None,
        workers: int = 8,
        progress: bool = False,
        fingerprint: dict | None = None,
    ):
        self.backend, self.judge = backend, judge
        self.out_dir = Path(out_dir)
        self.gen_kwargs = {"max_output_tokens": max_output_tokens, "temperature": temperature, "seed": seed,
                           "thinking_budget": thinking_budget}
        self.workers = max(1, workers)
        self.progress = progress
        self.fingerprint = fingerprint or {}
        self.log = ResultLog(self.out_dir)

    # -- one pair ------------------------------------------------------------------------------
    def _record(self, item: Item, t: float, pred: str, *, abstained=False, correct=None, error=None,
                judged=None, latency=0.0) -> dict:
        return {
            "id": item.id, "t": float(t), "question": item.question, "gold": item.gold,
            "unknown_ok": item.unknown_ok, "category": item.category, "pred": pred,
            "abstained": abstained if not error else None,
            "correct": correct if not error else None,
            "score": score(bool(correct), abstained, t) if not error else None,
            "error": error, "judge": judged, "latency_s": round(latency, 4), "extra": item.extra,
        }

    def _grade(self, item: Item, t: float, pred: str | None, error: BackendError | None, start: float):
        """The finished record when no judge call is needed (a failed generation, an IDK, or an unknown_ok
        item), else None."""
        if error is not None:
            return self._record(item, t, "", error=str(error), latency=time.perf_counter() - start)
        abstained = is_idk(pred)
        if abstained or item.unknown_ok:
            # unknown_ok items are right only as IDK and never reach the judge
            correct = abstained and item.unknown_ok
            return self._record(item, t, pred, abstained=abstained, correct=correct,
                                latency=time.perf_counter() - start)
        return None

    def _judged(self, item: Item, t: float, pred: str, verdict, error: BackendError | None, start: float) -> dict:
        """The finished record once the judge has answered `verdict` = (correct, judged), or failed."""
        if error is not None:
            return self._record(item, t, pred, error=f"judge: {error}", latency=time.perf_counter() - start)
        correct, judged = verdict
        return self._record(item, t, pred, correct=correct, judged=judged, latency=time.perf_counter() - start)

    def evaluate(self, item: Item, t: float) -> dict:
        start = time.perf_counter()
        pred, error = call_or_error(self.backend.generate, build_prompt(item.question, t), **self.gen_kwargs)
        rec = self._grade(item, t, pred, error, start)
        if rec is not None:
            return rec
        return self._judged(item, t, pred, *call_or_error(self.judge.judge, item, pred), start)

    async def aevaluate(self, item: Item, t: float) -> dict:
        start = time.perf_counter()
        pred, error = await acall_or_error(self.backend.agenerate(build_prompt(item.question, t), **self.gen_kwargs))
        rec = self._grade(item, t, pred, error, start)
        if rec is not None:
            return rec
        return self._judged(item, t, pred, *await acall_or_error(self.judge.ajudge(item, pred)), start)

    # -- the whole run -------------------------------------------------------------------------
    def prepare(self, items: Sequence[Item], thresholds: Sequence[float]):
        records = self.log.load()
        check_fingerprint(self.out_dir, self.fingerprint, bool(records))
        check_items(records, items, self.log.path)
        pairs = [(item, float(t)) for item in items for t in thresholds]
        pending = [(it, t) for it, t in pairs
                   if key_of(it.id, t) not in records or records[key_of(it.id, t)].get("error")]
        return records, pairs, pending

    def run(self, items: Sequence[Item], thresholds: Sequence[float], *, use_async: bool = False,
            on_start=None) -> RunStats:
        """Run what is missing. KeyboardInterrupt and FatalBackendError propagate; the log stays valid.
        `on_start` is called once the log has been checked, before the first call."""
        records, pairs, pending = self.prepare(items, thresholds)
        if on_start is not None:
            on_start()
        stats = RunStats(total=len(pairs), resumed=len(pairs) - len(pending), attempted=len(pending))
        start = time.perf_counter()
        bar = _progress_bar(len(pending), self.progress)

        def done(rec: dict) -> None:
            self.log.append(rec)
            records[key_of(rec["id"], rec["t"])] = rec
            bar.update(1)

        try:
            if use_async:
                asyncio.run(self._run_async(pending, done))
            else:
                for item, t in pending:  # the caller owns the backend and closes it
                    done(self.evaluate(item, t))
        finally:
            bar.close()
            self.log.close()
            stats.seconds = time.perf_counter() - start
        stats.records = [records[key_of(it.id, t)] for it, t in pairs]
        stats.errors = sum(1 for r in stats.records if r.get("error"))
        return stats

    async def _run_async(self, pending, done) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        for pair in pending:
            queue.put_nowait(pair)

        async def worker():
            while True:
                try:
                    item, t = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                done(await self.aevaluate(item, t))

        tasks = [asyncio.create_task(worker()) for _ in range(min(self.workers, len(pending)))]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # async transports belong to this event loop: release them before it closes
            await self.backend.aclose()
            judge_backend = getattr(self.judge, "backend", None)
            if judge_backend is not None and judge_backend is not self.backend:
                await judge_backend.aclose()


def _progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled or total == 0, desc="gemhall", unit="call", dynamic_ncols=True)
