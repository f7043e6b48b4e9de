"""Quota guards shared by every backend: a sliding-window rate limiter, a concurrency limit, and retries.

One `CallLimits` object is shared by all calls of a run (answers and LLM-judge calls alike), so the
rate limit and the concurrency cap hold for the run as a whole, whatever mix of threads and asyncio
tasks makes the calls. Clocks and sleeps are injectable so tests can check every 60-second window and
every retry wait exactly without waiting.
"""

from __future__ import annotations

import asyncio
import collections
import random
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import tenacity

WINDOW_S = 60.0


class RateLimiter:
    """Never more than `rpm` acquisitions in any `window_s`-second window (sliding, not fixed buckets).

    A slot is reserved at the instant it is granted; a caller that finds the window full waits until the
    oldest reservation leaves it. Thread-safe; `acquire` (sync) and `aacquire` (async) share the window.
    """

    def __init__(
        self,
        rpm: int,
        *,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        if rpm < 1:
            raise ValueError(f"rpm_limit must be >= 1, got {rpm}")
        self.rpm = rpm
        self.window_s = window_s
        self._clock, self._sleep, self._asleep = clock, sleep, asleep
        self._granted: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        self.history: list[float] = []  # every grant time, for audits and tests

    def _try_reserve(self) -> float:
        """Reserve a slot now and return 0, or return how long to wait before trying again."""
        with self._lock:
            now = self._clock()
            while self._granted and now - self._granted[0] >= self.window_s:
                self._granted.popleft()
            if len(self._granted) < self.rpm:
                self._granted.append(now)
                self.history.append(now)
                return 0.0
            return max(self._granted[0] + self.window_s - now, 1e-3)

    def acquire(self) -> None:
        while (wait := self._try_reserve()) > 0:
            self._sleep(wait)

    async def aacquire(self) -> None:
        while (wait := self._try_reserve()) > 0:
            await self._asleep(wait)


class ConcurrencyLimit:
    """At most `limit` calls in flight, counted across threads and asyncio tasks together.

    A threading semaphore bounds both: async callers poll it without blocking the event loop, so the
    same cap holds when one run mixes sync and async calls.
    """

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"concurrency must be >= 1, got {limit}")
        self.limit = limit
        self._sem = threading.BoundedSemaphore(limit)
        self._async_sems: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> semaphore
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def _exit(self) -> None:
        with self._lock:
            self.in_flight -= 1
        self._sem.release()

    def __enter__(self):
        self._sem.acquire()
        self._enter()
        return self

    def __exit__(self, *exc):
        self._exit()

    async def __aenter__(self):
        # Queue on a per-loop asyncio semaphore first (fair, no busy waiting), then take the shared slot.
        loop = asyncio.get_running_loop()
        loop_sem = self._async_sems.get(loop)
        if loop_sem is None:
            loop_sem = self._async_sems[loop] = asyncio.Semaphore(self.limit)
        await loop_sem.acquire()
        try:
            while not self._sem.acquire(blocking=False):
                await asyncio.sleep(0.002)
        except BaseException:
            loop_sem.release()
            raise
        self._enter()
        return self

    async def __aexit__(self, *exc):
        self._exit()
        self._async_sems[asyncio.get_running_loop()].release()


class RetryableError(Exception):
    """A transient failure (429, 500/503, timeout); `retry_after` is the server's RetryInfo delay if any."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class BackendError(Exception):
    """A call failed for good (retries exhausted or a non-retryable error); the item becomes an error row."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1):
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class FatalBackendError(BackendError):
    """Every call would fail the same way (bad credentials, unknown model): stop the run instead."""


def call_or_error(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> tuple[Any, BackendError | None]:
    """`fn(*args, **kwargs)` -> (its result, None), or (None, the BackendError it raised): a failed call becomes
    an error row. A FatalBackendError is raised on, to stop the run."""
    try:
        return fn(*args, **kwargs), None
    except FatalBackendError:
        raise
    except BackendError as exc:
        return None, exc


async def acall_or_error(call: Awaitable[Any]) -> tuple[Any, BackendError | None]:
    """The async `call_or_error`: awaits `call` (e.g. `backend.agenerate(...)`)."""
    try:
        return await call, None
    except FatalBackendError:
        raise
    except BackendError as exc:
        return None, exc


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def parse_duration(value: Any) -> float | None:
    """protobuf Duration JSON ("37s", "1.5s") or {"seconds": 37, "nanos": 5e8} -> seconds."""
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        return float(m.group(1)) if m else None
    if isinstance(value, dict) and ("seconds" in value or "nanos" in value):
        try:
            return float(value.get("seconds", 0)) + float(value.get("nanos", 0)) / 1e9
        except (TypeError, ValueError):
            return None
    return None


def find_retry_delay(details: Any) -> float | None:
    """Find `google.rpc.RetryInfo.retryDelay` anywhere in an error body (Gemini, Vertex, OpenAI-compat)."""
    if isinstance(details, dict):
        if str(details.get("@type", "")).endswith("google.rpc.RetryInfo") and "retryDelay" in details:
            return parse_duration(details["retryDelay"])
        for value in details.values():
            found = find_retry_delay(value)
            if found is not None:
                return found
    elif isinstance(details, list):
        for value in details:
            found = find_retry_delay(value)
            if found is not None:
                return found
    return None


@dataclass
class RetryPolicy:
    """Retry transient failures: the server's retryDelay when given, else capped exponential backoff.

    Backoff for retry k (1-based) is min(max_delay_s, initial_delay_s * 2**(k-1) * U(0.8, 1.2)).
    """

    max_retries: int = 6
    initial_delay_s: float = 1.0
    max_delay_s: float = 60.0
    jitter: tuple[float, float] = (0.8, 1.2)
    sleep: Callable[[float], None] = time.sleep
    asleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)
    waits: list[float] = field(default_factory=list)  # every wait taken, for reports and tests

    def __post_init__(self):
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")

    def wait_for(self, retry_state: tenacity.RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, RetryableError) and exc.retry_after is not None:
            return exc.retry_after
        k = retry_state.attempt_number
        return min(self.max_delay_s, self.initial_delay_s * 2 ** (k - 1) * self.rng.uniform(*self.jitter))

    def _record_sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.sleep(seconds)

    async def _arecord_sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        await self.asleep(seconds)

    def _kwargs(self) -> dict:
        return {
            "stop": tenacity.stop_after_attempt(self.max_retries + 1),
            "retry": tenacity.retry_if_exception_type(RetryableError),
            "wait": self.wait_for,
            "reraise": True,
        }

    def call(self, fn: Callable[[], Any]) -> Any:
        try:
            return tenacity.Retrying(sleep=self._record_sleep, **self._kwargs())(fn)
        except RetryableError as exc:
            raise BackendError(f"gave up after {self.max_retries + 1} attempts: {exc}",
                               status=exc.status, attempts=self.max_retries + 1) from exc

    async def acall(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await tenacity.AsyncRetrying(sleep=self._arecord_sleep, **self._kwargs())(fn)
        except RetryableError as exc:
            raise BackendError(f"gave up after {self.max_retries + 1} attempts: {exc}",
                               status=exc.status, attempts=self.max_retries + 1) from exc


@dataclass
class CallLimits:
    """What every call of one run shares: the rate limiter (optional), the concurrency cap and retries."""

    concurrency: ConcurrencyLimit
    retry: RetryPolicy
    rate: RateLimiter | None = None

    @classmethod
    def create(
        cls,
        *,
        rpm_limit: int | None = None,
        concurrency: int = 8,
        max_retries: int = 6,
        max_delay_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> CallLimits:
        rate = RateLimiter(rpm_limit, clock=clock, sleep=sleep, asleep=asleep) if rpm_limit else None
        retry = RetryPolicy(max_retries=max_retries, max_delay_s=max_delay_s, sleep=sleep, asleep=asleep)
        return cls(concurrency=ConcurrencyLimit(concurrency), retry=retry, rate=rate)
