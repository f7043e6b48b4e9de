"""The common interface of every LLM backend: `generate` (sync) and `agenerate` (async) -> text.

Subclasses implement one raw attempt (`_call_once` / `_acall_once`) and translate their transport's
failures into `RetryableError` (retry) or `BackendError` / `FatalBackendError` (give up). The base class
wraps every attempt in the shared `CallLimits`: each attempt takes a concurrency slot, then a rate-limiter
slot right before it is sent (so no send lags its reservation); retries wait outside the concurrency slot,
so one item's backoff never stalls the others.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass

from .limits import CallLimits


class BackendConfigError(ValueError):
    """The backend cannot be built from the given flags and environment; the message says what to set."""


@dataclass(frozen=True)
class GenerationParams:
    max_output_tokens: int = 128
    temperature: float = 0.0
    seed: int | None = None
    thinking_budget: int | None = None


class Backend(abc.ABC):
    """One model behind one transport. `name` is the backend kind, `model` the model it calls."""

    name: str = "backend"

    def __init__(self, model: str, *, limits: CallLimits | None = None):
        self.model = model
        self.limits = limits or CallLimits.create()
        self.calls = 0  # attempts actually sent, retries included

    # -- what subclasses implement -------------------------------------------------------------
    @abc.abstractmethod
    def _call_once(self, prompt: str, params: GenerationParams) -> str:
        """One attempt; raise RetryableError for transient failures."""

    async def _acall_once(self, prompt: str, params: GenerationParams) -> str:
        """Async attempt; the default runs the sync attempt in a worker thread."""
        return await asyncio.to_thread(self._call_once, prompt, params)

    def close(self) -> None:
        """Release transports (sync side)."""

    async def aclose(self) -> None:
        """Release transports bound to the running event loop."""

    def describe(self) -> dict:
        """What identifies this backend in a run's config and resume check."""
        return {"backend": self.name, "model": self.model}

    # -- the public API ------------------------------------------------------------------------
    # The keyword arguments of generate / agenerate are GenerationParams' fields (max_output_tokens,
    # temperature, seed, thinking_budget), with its defaults; an unknown keyword raises TypeError.
    def generate(self, prompt: str, **params) -> str:
        gen = GenerationParams(**params)

        def attempt() -> str:
            with self.limits.concurrency:
                if self.limits.rate is not None:  # reserve right before sending, never ahead of it
                    self.limits.rate.acquire()
                self.calls += 1
                return self._call_once(prompt, gen)

        return self.limits.retry.call(attempt)

    async def agenerate(self, prompt: str, **params) -> str:
        gen = GenerationParams(**params)

        async def attempt() -> str:
            async with self.limits.concurrency:
                if self.limits.rate is not None:
                    await self.limits.rate.aacquire()
                self.calls += 1
                return await self._acall_once(prompt, gen)

        return await self.limits.retry.acall(attempt)
