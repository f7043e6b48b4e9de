"""Generate answers (or take the data's own), run every (context, question, answer) through HaluGate, and log
each record the moment it changes.

The log (`results.jsonl` under --out) is the run's memory, as in gemhall: a rerun of the same command reloads
it, reuses every finished answer (the backend is called only for records without one, or whose generation
failed) and every detection made under the same detection settings (a changed HaluGate config or model dir
re-detects the stored answers; `unavailable` results are retried). Records are appended one JSON line at a time
(a single write + flush), so an interrupted run leaves whole lines; while a run is in progress an id may appear
more than once (the last line wins). A finished run rewrites the file with one line per record, in data order.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eval.backends import Backend, BackendError, acall_or_error, call_or_error
from eval.gemhall.runner import ResultLog, ResumeError, check_fingerprint
from inference.detect import HaluGate

from .data import EvalRecord
from .detection import detect_items, gate_key
from .prompt import build_prompt

LOG_NAME = "results.jsonl"
VERDICTS = ("hallucinated", "clean", "skipped", "unavailable", "input_error", "generation_error", "pending")


class RecordLog(ResultLog):
    """gemhall's append-only JSONL log (one write + flush per record), keyed by record id."""

    what = "halurate record"

    @staticmethod
    def key(rec: dict) -> str:
        return str(rec["id"])

    def rewrite(self, entries: Sequence[dict]) -> None:
        """Replace the log with one line per record (atomic rename)."""
        self.close()
        tmp = self.path.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for e in entries:
                fh.write(json.dumps(e, ensure_ascii=False) + "\n")
        tmp.replace(self.path)


def verdict_of(entry: dict) -> str:
    if (entry.get("generation") or {}).get("error"):
        return "generation_error"
    if entry.get("answer") is None:
        return "pending"
    if entry.get("detection_error"):
        return "input_error"
    det = entry.get("detection")
    if det is None:
        return "pending"
    if det["status"] == "ok":
        return "hallucinated" if det["spans"] else "clean"
    return det["status"]  # skipped | unavailable


def new_entry(rec: EvalRecord, mode: str) -> dict:
    return {
        "id": rec.id, "source": rec.source, "category": rec.category, "task_type": rec.task_type,
        "question": rec.question, "context": rec.context, "input_hash": rec.input_hash,
        "reference_answer": rec.reference_answer, "gold_spans": rec.gold_spans,
        "answer": rec.answer if mode == "score" else None, "generation": None,
        "detection": None, "detection_key": None, "detection_error": None, "verdict": "pending",
        "extra": rec.extra,
    }


@dataclass
class RunStats:
    total: int = 0
    answers_reused: int = 0
    generated: int = 0
    generation_errors: int = 0
    detections_reused: int = 0
    detected: int = 0
    seconds_generation: float = 0.0
    seconds_detection: float = 0.0
    earlier_records_kept: int = 0   # records of earlier runs outside this data selection, kept in the log


class Runner:
    def __init__(self, records: Sequence[EvalRecord], gate: HaluGate, out_dir: str | Path, *, mode: str = "generate",
                 backend: Backend | None = None, gen_kwargs: dict | None = None, prompt_template: str | None = None,
                 batch_size: int = 16, fingerprint: dict | None = None, redetect: bool = False,
                 progress: bool = False, use_async: bool = False):
        if mode == "generate" and backend is None:
            raise ValueError("generate mode needs a backend")
        ids = [r.id for r in records]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"duplicate record id {dup!r} in the data")
        self.records = list(records)
        self.gate = gate
        self.out_dir = Path(out_dir)
        self.mode = mode
        self.backend = backend
        self.gen_kwargs = gen_kwargs or {}
        self.prompt_template = prompt_template
        self.batch_size = max(1, batch_size)
        self.fingerprint = fingerprint or {}
        self.redetect = redetect
        self.progress = progress
        self.use_async = use_async
        self.log = RecordLog(self.out_dir)
        self.log.path = self.out_dir / LOG_NAME
        self.key = gate_key(gate)

    # -- resume ----------------------------------------------------------------------------------------------
    def _prepare(self) -> tuple[dict[str, dict], list[dict], RunStats]:
        logged = self.log.load()
        check_fingerprint(self.out_dir, self.fingerprint, bool(logged))
        stats = RunStats(total=len(self.records))
        entries: list[dict] = []
        for rec in self.records:
            old = logged.get(rec.id)
            if old is not None and old.get("input_hash") != rec.input_hash:
                raise ResumeError(f"{self.log.path}: record {rec.id!r} was logged with a different context or "
                                  "question than the data now has; use a new --out for changed data")
            entry = new_entry(rec, self.mode)
            if old is not None:
                answer_ok = old.get("answer") is not None and not (old.get("generation") or {}).get("error")
                same_answer = self.mode == "generate" or old.get("answer") == rec.answer
                if answer_ok and same_answer:
                    entry["answer"], entry["generation"] = old["answer"], old.get("generation")
                    stats.answers_reused += self.mode == "generate"
                    if (not self.redetect and old.get("detection_key") == self.key
                            and verdict_of(old) not in ("pending", "unavailable")):
                        for k in ("detection", "detection_key", "detection_error"):
                            entry[k] = old[k]
                        stats.detections_reused += 1
            entry["verdict"] = verdict_of(entry)
            entries.append(entry)
        selected = {r.id for r in self.records}
        stats.earlier_records_kept = sum(1 for i in logged if i not in selected)
        return logged, entries, stats

    def _needs_generation(self, e: dict) -> bool:
        return self.mode == "generate" and e["answer"] is None

    def _needs_detection(self, e: dict) -> bool:
        return e["answer"] is not None and e["detection_key"] != self.key

    # -- generation ------------------------------------------------------------------------------------------
    def _prompt(self, e: dict) -> str:
        return build_prompt(e["context"], e["question"], e["task_type"], self.prompt_template)

    def _generated(self, e: dict, text: str | None, exc: BackendError | None, latency: float) -> None:
        error = None if exc is None else str(exc)
        e["generation"] = {"latency_s": round(latency, 3), "error": error}
        e["answer"] = None if error else (text or "")
        e["verdict"] = verdict_of(e)
        self.log.append(e)

    def _generate_sync(self, pending: list[dict], bar) -> None:
        for e in pending:
            start = time.perf_counter()
            text, error = call_or_error(self.backend.generate, self._prompt(e), **self.gen_kwargs)
            self._generated(e, text, error, time.perf_counter() - start)
            bar.update(1)

    async def _generate_async(self, pending: list[dict], bar) -> None:
        async def one(e: dict) -> None:
            start = time.perf_counter()
            text, error = await acall_or_error(self.backend.agenerate(self._prompt(e), **self.gen_kwargs))
            self._generated(e, text, error, time.perf_counter() - start)
            bar.update(1)

        try:
            await asyncio.gather(*(one(e) for e in pending))  # the backend's CallLimits cap the calls in flight
        finally:
            await self.backend.aclose()

    # -- detection -------------------------------------------------------------------------------------------
    def _detect(self, pending: list[dict]) -> None:
        items = [{"context": [e["context"]] if e["context"] else [], "question": e["question"],
                  "answer": e["answer"]} for e in pending]
        for e, res in zip(pending, detect_items(self.gate, items)):
            e["detection_key"] = self.key
            if isinstance(res, Exception):
                e["detection"], e["detection_error"] = None, f"{type(res).__name__}: {res}"
            else:
                e["detection"], e["detection_error"] = res.to_dict(), None
            e["verdict"] = verdict_of(e)
            self.log.append(e)

    # -- the run ---------------------------------------------------------------------------------------------
    def run(self, on_start=None) -> tuple[list[dict], RunStats]:
        """Do what is missing. KeyboardInterrupt and FatalBackendError propagate; the log stays valid."""
        logged, entries, stats = self._prepare()
        if on_start is not None:
            on_start()
        todo = [e for e in entries if self._needs_generation(e) or self._needs_detection(e)]
        n_gen = sum(self._needs_generation(e) for e in todo)
        from tqdm.auto import tqdm

        bar = tqdm(total=n_gen, disable=not self.progress or not n_gen, desc="halurate generate", unit="answer",
                   dynamic_ncols=True)
        try:
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start:start + self.batch_size]
                gen = [e for e in chunk if self._needs_generation(e)]
                if gen:
                    t0 = time.perf_counter()
                    if self.use_async:
                        asyncio.run(self._generate_async(gen, bar))
                    else:
                        self._generate_sync(gen, bar)
                    stats.seconds_generation += time.perf_counter() - t0
                    stats.generated += sum(1 for e in gen if e["answer"] is not None)
                det = [e for e in chunk if self._needs_detection(e)]
                if det:
                    t0 = time.perf_counter()
                    self._detect(det)
                    stats.seconds_detection += time.perf_counter() - t0
                    stats.detected += len(det)
        finally:
            bar.close()
            self.log.close()
            if self.backend is not None and not self.use_async:
                self.backend.close()
        stats.generation_errors = sum(1 for e in entries if e["verdict"] == "generation_error")
        selected = {e["id"] for e in entries}
        self.log.rewrite(entries + [v for k, v in logged.items() if k not in selected])
        return entries, stats
