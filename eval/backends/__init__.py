"""LLM backends behind one interface, with shared rate limiting, concurrency cap and retries.

    from eval.backends import make_backend
    llm = make_backend("openai", model="qwen2.5", base_url="http://localhost:8000/v1", rpm_limit=60)
    text = llm.generate("2+2?", max_output_tokens=16, temperature=0.0, seed=1234)
    text = await llm.agenerate(...)

Backends built with the same `limits=` share one rate window, one concurrency cap and one retry policy.
"""

from __future__ import annotations

from .base import Backend, GenerationParams
from .gemini import DEFAULT_GEMINI_MODEL, BackendConfigError, GeminiBackend, gemini_client_kwargs
from .limits import (
    BackendError,
    CallLimits,
    ConcurrencyLimit,
    FatalBackendError,
    RateLimiter,
    RetryableError,
    RetryPolicy,
    find_retry_delay,
    parse_duration,
)

BACKENDS = ("gemini", "openai", "local")


def make_backend(
    name: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    rpm_limit: int | None = None,
    max_retries: int = 6,
    concurrency: int = 8,
    timeout_s: float = 60.0,
    limits: CallLimits | None = None,
    **kwargs,
) -> Backend:
    """Build backend `name` ("gemini" | "openai" | "local"); pass `limits` to share quotas with another."""
    limits = limits or CallLimits.create(rpm_limit=rpm_limit, concurrency=concurrency, max_retries=max_retries)
    if name == "gemini":
        return GeminiBackend(model, base_url=base_url, limits=limits, timeout_s=timeout_s, **kwargs)
    if name == "openai":
        from .openai_compat import OpenAICompatBackend

        return OpenAICompatBackend(model, base_url=base_url, limits=limits, timeout_s=timeout_s, **kwargs)
    if name == "local":
        from .local import LocalBackend

        if base_url:
            raise BackendConfigError("local backend: --base-url does not apply (it runs in this process)")
        return LocalBackend(model, limits=limits, **kwargs)
    raise BackendConfigError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "DEFAULT_GEMINI_MODEL",
    "Backend",
    "BackendConfigError",
    "BackendError",
    "CallLimits",
    "ConcurrencyLimit",
    "FatalBackendError",
    "GeminiBackend",
    "GenerationParams",
    "RateLimiter",
    "RetryPolicy",
    "RetryableError",
    "find_retry_delay",
    "gemini_client_kwargs",
    "make_backend",
    "parse_duration",
]
