"""Scoring chunks: one function (`score_chunk`) used by both engines, so both give the same rows and results.

- local: N worker processes (spawn), each with its own HaluGate whose ONNX Runtime sessions get
  cores // N intra-op threads; at most 2 N chunks in flight, so memory stays flat; N = 1 runs in this process.
- ray: Ray Data. The driver reads the input in windows of chunks, `ray.data.from_arrow` makes one block per
  chunk, `map_batches` runs them through an actor pool (`ActorPoolStrategy(size=N)`, one HaluGate per actor, the whole
  block as one batch: the chunk composition of the local engine), and the results stream back to the driver,
  which writes the shards. Nothing but the input file on the driver and the model dirs on every node is
  needed (no shared filesystem).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator

from inference.batch.io import (
    BatchError,
    Chunk,
    Columns,
    group_value,
    invalid_record,
    need,
    result_record,
    row_id,
    row_input,
    schema,
)
from inference.messages import InputError, parse_input

log = logging.getLogger("halugate.batch")
_WHERE = re.compile(r"^inputs\[\d+\]\.?:?\s*")


def build_gate(settings_dict: dict, threads: int):
    """A HaluGate from a resolved settings dict, its runners on `threads` intra-op threads."""
    from inference.config import from_dict
    from inference.detect import HaluGate
    from inference.settings import InferenceSettings

    settings = from_dict(InferenceSettings, settings_dict, "<batch>")
    settings.hallucination_mitigation.num_threads = threads
    gate = HaluGate(settings)
    if gate.load_errors:  # a service reports `unavailable` and goes on; a batch would score every row so
        raise BatchError("; ".join(f"{stage} model failed to load: {msg}" for stage, msg in gate.load_errors.items())
                         + " (fix the config; nothing was scored)")
    return gate


def _detect(gate, items: list) -> list:
    """detect_batch on DetectInputs; a refused input (over the limits) is isolated by halving the batch, so
    one bad row never costs its neighbours their results. Returns a Result or an error record per input."""
    if not items:
        return []
    try:
        return gate.detect_batch(items)
    except (ValueError, TypeError) as exc:  # InputError and InputTooLongError are ValueErrors
        if len(items) == 1:
            return [invalid_record(_WHERE.sub("", str(exc)))]
        fault = exc
    except Exception as exc:  # a crash is reported on its row, never stops the run
        if len(items) == 1:
            log.exception("detection failed")
            rec = invalid_record(f"{type(exc).__name__}: {exc}")
            rec.update(status="unavailable", reason="batch_error",
                       errors=[{"stage": "batch", "message": f"{type(exc).__name__}: {exc}"}])
            return [rec]
        fault = exc
    log.debug("batch of %d refused (%s); halving", len(items), fault)
    half = len(items) // 2
    return _detect(gate, items[:half]) + _detect(gate, items[half:])


def score_records(gate, cols: Columns, first_row: int, raws: list, errors: list) -> list[dict]:
    """One output record per input row, in order: the result's fields, or status invalid with the reason."""
    recs: list[dict | None] = [None] * len(raws)
    head: list[dict] = []
    todo: list[tuple[int, object, str]] = []
    for i, (raw, err) in enumerate(zip(raws, errors)):
        n, row = first_row + i, None
        if err is None:
            try:
                row = json.loads(raw)
            except json.JSONDecodeError as exc:
                err = f"invalid JSON ({exc.msg}, column {exc.colno})"
        head.append({"row": n, "id": row_id(row, cols, n), **{g: group_value(row, g) for g in cols.group_by}})
        if err is None:
            try:
                data = parse_input(row_input(row, cols), where="")
                todo.append((i, data, data.answer))
            except InputError as exc:
                err = str(exc)
        if err is not None:
            recs[i] = invalid_record(err)
    results = _detect(gate, [d for _, d, _ in todo])
    for (i, _, answer), res in zip(todo, results):
        rec = res if isinstance(res, dict) else result_record(res.to_dict())
        rec["checked_answer"] = answer
        recs[i] = rec
    return [{**h, **r} for h, r in zip(head, recs)]


def score_chunk(gate, cols: Columns, first_row: int, raws: list, errors: list):
    """The shard table of one chunk (the fixed schema)."""
    pa = need("pyarrow")
    return pa.Table.from_pylist(score_records(gate, cols, first_row, raws, errors), schema=schema(cols.group_by))


# ---- local engine ------------------------------------------------------------------------------------------

_WORKER: dict = {}


def _watch_parent(parent: int) -> None:
    """A worker whose driver was killed (SIGKILL leaves no chance to clean up) exits within a second."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(1)


def _init_worker(settings_dict: dict, threads: int, cols: Columns, parent: int) -> None:
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    _WORKER["gate"] = build_gate(settings_dict, threads)
    _WORKER["cols"] = cols


def _work(first_row: int, raws: list, errors: list):
    return score_chunk(_WORKER["gate"], _WORKER["cols"], first_row, raws, errors)


def threads_per_worker(workers: int) -> int:
    from inference.runners import physical_cores

    return max(1, physical_cores() // max(1, workers))


def run_local(settings_dict: dict, cols: Columns, chunks: Iterator[Chunk], workers: int,
              write: Callable[[int, object], None]) -> None:
    """Score every chunk and hand each finished table to `write(chunk index, table)` (in completion order)."""
    threads = threads_per_worker(workers)
    if workers <= 1:
        gate = build_gate(settings_dict, threads)
        for c in chunks:
            write(c.index, score_chunk(gate, cols, c.first_row, c.raws, c.errors))
        return
    import multiprocessing
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("spawn")
    try:
        _pool(workers, ctx, settings_dict, threads, cols, chunks, write)
    except BrokenProcessPool as exc:
        raise BatchError(f"a worker process failed ({exc}); its error is above") from None


def _pool(workers, ctx, settings_dict, threads, cols, chunks, write) -> None:
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(settings_dict, threads, cols, os.getpid())) as pool:
        pending: dict = {}
        for c in chunks:
            pending[pool.submit(_work, c.first_row, c.raws, c.errors)] = c.index
            while len(pending) >= 2 * workers:  # bounded: memory does not grow with the input
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    write(pending.pop(f), f.result())
        for f in list(pending):
            write(pending.pop(f), f.result())


# ---- Ray engine ----------------------------------------------------------------------------------------------

class GateActor:
    """A Ray Data actor: one HaluGate, scoring whole blocks (one block = one chunk)."""

    def __init__(self, settings_dict: dict, threads: int, cols: Columns):
        self.gate = build_gate(settings_dict, threads)
        self.cols = cols

    def __call__(self, batch):
        rows = batch.column("row").to_pylist()
        return score_chunk(self.gate, self.cols, rows[0], batch.column("raw").to_pylist(),
                           batch.column("error").to_pylist())


def _collect(batch, shard_size: int, sizes: dict, got: dict, out_schema, write) -> None:
    """File the rows of one result batch under their chunks; write each chunk once all its rows are in."""
    pa = need("pyarrow")
    pc = need("pyarrow.compute")
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    chunk_of = pc.divide(table.column("row"), shard_size)  # integer division: the shard of each row
    for k in sorted(set(chunk_of.to_pylist())):
        if k not in sizes:
            raise BatchError(f"ray: rows of chunk {k} came back, which was not sent")
        got.setdefault(k, []).append(table.filter(pc.equal(chunk_of, k)))
        if sum(t.num_rows for t in got[k]) == sizes[k]:
            write(k, pa.concat_tables(got.pop(k)).sort_by("row").select(out_schema.names).cast(out_schema))


def _chunk_table(c: Chunk):
    pa = need("pyarrow")
    return pa.table({"row": pa.array(c.rows, pa.int64()), "raw": pa.array(c.raws, pa.string()),
                     "error": pa.array(c.errors, pa.string())})


def _windows(chunks: Iterator[Chunk], size: int) -> Iterator[list[Chunk]]:
    window: list[Chunk] = []
    for c in chunks:
        window.append(c)
        if len(window) >= size:
            yield window
            window = []
    if window:
        yield window


def run_ray(settings_dict: dict, cols: Columns, chunks: Iterator[Chunk], workers: int,
            write: Callable[[int, object], None], shard_size: int, address: str | None = None,
            window_chunks: int = 0) -> None:
    """The same scoring on Ray Data (see the module docstring); joins the Ray instance at `address` ("auto": the
    running cluster), else the one already initialised in this process, else starts a local one."""
    ray = need("ray", "cluster")
    need("ray.data", "cluster")
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    elif address:
        log.info("ray already initialised in this process; --address %s not used", address)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    cpus = int(ray.cluster_resources().get("CPU", 1))
    workers = workers or cpus
    threads = max(1, cpus // workers)
    out_schema = schema(cols.group_by)
    for window in _windows(chunks, window_chunks or max(32, 8 * workers)):
        sizes = {c.index: len(c.raws) for c in window}
        got: dict[int, list] = {}
        ds = ray.data.from_arrow([_chunk_table(c) for c in window])
        ds = ds.map_batches(GateActor, fn_constructor_kwargs={"settings_dict": settings_dict, "threads": threads,
                                                             "cols": cols},
                            batch_size=None, batch_format="pyarrow", num_cpus=threads,
                            compute=ray.data.ActorPoolStrategy(size=min(workers, len(window))))
        try:
            batches = iter(ds.iter_batches(batch_size=None, batch_format="pyarrow"))
            for batch in batches:
                _collect(batch, shard_size, sizes, got, out_schema, write)
        except ray.exceptions.RayError as exc:  # an actor that could not load its models, a lost node, ...
            raise BatchError(f"ray: {type(exc).__name__}: {str(exc)[-2000:]}") from None
        if got:
            raise BatchError(f"ray: chunks {sorted(got)} came back incomplete")
