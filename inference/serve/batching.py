"""Micro-batching: requests' detection inputs are collected for at most `max_wait_ms` or `max_batch` items and
run as one `HaluGate.detect_batch` call (one ONNX batch per stage) in a worker thread, off the event loop.

- Waiting only happens while more inputs are known to be on their way (requests admitted and still waiting
  for their upstream answer): a lone request is never delayed, a burst fills a batch.
- The queue is bounded (`max_queue` inputs): `submit` raises `Overloaded` instead of growing without bound; the
  service answers 503 with Retry-After.
- One bad input never fails its batch-mates: an input error re-runs the batch one input at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from inference.messages import InputError
from inference.windowing import InputTooLongError

log = logging.getLogger("halugate.serve")


class Overloaded(Exception):
    """The detection queue is full (or the service is shutting down)."""


class DetectTimeout(Exception):
    """Detection did not finish within detect_timeout_s."""


def detect_each(gate, inputs: Sequence[Any]) -> list[Any]:
    """`gate.detect_batch(inputs)`; if an input is refused (InputError, InputTooLongError) the inputs are run
    one at a time so that only that one fails. Per input: a Result or the exception it raised."""
    try:
        return list(gate.detect_batch(list(inputs)))
    except (InputError, InputTooLongError) as exc:
        if len(inputs) == 1:
            return [exc]
    except Exception as exc:
        log.exception("detect_batch failed")
        return [exc] * len(inputs)
    out: list[Any] = []
    for item in inputs:
        try:
            out.append(gate.detect_batch([item])[0])
        except Exception as exc:  # noqa: BLE001
            out.append(exc)
    return out


class Incoming:
    def __init__(self, batcher: MicroBatcher):
        self.batcher = batcher
        self.held = True
        batcher.incoming += 1

    def release(self) -> None:
        if self.held:
            self.held = False
            self.batcher.incoming -= 1

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class MicroBatcher:
    def __init__(self, fn: Callable[[list], list], *, max_batch: int = 16, max_wait_ms: float = 2.0,
                 max_queue: int = 256, on_batch: Callable[[int, list, float], None] | None = None):
        self.fn = fn
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.on_batch = on_batch
        self.incoming = 0  # admitted requests that will submit soon (their upstream call is running)
        self.batches = 0
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="halugate-detect")
        self._task = asyncio.create_task(self._loop(), name="halugate-batcher")

    async def stop(self) -> None:
        """Finish what is queued, then stop the worker."""
        self._closed = True
        if self._queue is not None and self._task is not None:
            self._queue.put_nowait(None)
            await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    async def run_in_worker(self, fn: Callable, *args) -> Any:
        """Run `fn` on the detection thread (warm-up), serialised with the batches."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # ---- requests ----------------------------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    def has_room(self, n: int = 1) -> bool:
        return not self._closed and self.depth + n <= self.max_queue

    def expecting(self) -> Incoming:
        """Marks a request whose detection input is on its way (a batch may wait a little for it); release it
        (or leave the `with` block) before submitting."""
        return Incoming(self)

    async def submit(self, items: list, timeout: float | None = None) -> list:
        """Results for `items` in order (a Result or an exception per item). Raises Overloaded when the queue
        has no room for them, DetectTimeout after `timeout` seconds."""
        if not self.has_room(len(items)):
            raise Overloaded(f"detection queue full ({self.depth}/{self.max_queue})")
        loop = asyncio.get_running_loop()
        futures = []
        for item in items:
            fut = loop.create_future()
            self._queue.put_nowait((item, fut))
            futures.append(fut)
        try:
            return await asyncio.wait_for(asyncio.gather(*futures), timeout or None)
        except asyncio.TimeoutError:
            raise DetectTimeout(f"detection took longer than {timeout:g} s") from None

    # ---- worker ------------------------------------------------------------------------------------------------

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                break
            batch = [first]
            deadline = loop.time() + self.max_wait
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if self.incoming <= 0 or remaining <= 0:
                        break  # nothing else is on its way: run now
                    try:
                        nxt = await asyncio.wait_for(self._queue.get(), remaining)
                    except asyncio.TimeoutError:
                        break
                if nxt is None:
                    stopping = True
                    break
                batch.append(nxt)
            await self._run(batch)
        while not self._queue.empty():  # stop() after the sentinel: nothing should be left, but never drop
            rest = [x for x in (self._queue.get_nowait() for _ in range(self._queue.qsize())) if x is not None]
            for i in range(0, len(rest), self.max_batch):
                await self._run(rest[i:i + self.max_batch])

    async def _run(self, batch: list) -> None:
        live = [(item, fut) for item, fut in batch if not fut.done()]  # timed-out / cancelled callers skipped
        if not live:
            return
        t0 = time.perf_counter()
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self._executor, self.fn, [item for item, _ in live])
        except Exception as exc:  # noqa: BLE001 - fn is meant to catch everything; never leave a caller hanging
            results = [exc] * len(live)
        self.batches += 1
        if self.on_batch is not None:
            try:
                self.on_batch(len(live), results, time.perf_counter() - t0)
            except Exception:
                log.exception("on_batch failed")
        for (_, fut), res in zip(live, results):
            if not fut.done():
                fut.set_result(res)
