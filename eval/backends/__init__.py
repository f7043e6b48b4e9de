"""LLM backends behind one interface, with shared rate limiting, concurrency cap and retries.

    from eval.backends import make_backend
    llm = make_backend("openai", model="qwen2.5", base_url="http://localhost:8000/v1", rpm_limit=60)
    text = llm.generate("2+2?", max_output_tokens=16, temperature=0.0, seed=1234)
    text = await llm.agenerate(...)

Backends built with the same `limits=` share one rate window, one concurrency cap and one retry policy.
The backends by name: registry.py; the settings (and flags) every CLI shares: settings.py.
"""

from __future__ import annotations

from .base import Backend, BackendConfigError, GenerationParams
from .gemini import DEFAULT_GEMINI_MODEL, GeminiBackend, gemini_client_kwargs
from .limits import (
    BackendError,
    CallLimits,
    ConcurrencyLimit,
    FatalBackendError,
    RateLimiter,
    RetryableError,
    RetryPolicy,
    acall_or_error,
    call_or_error,
    find_retry_delay,
    parse_duration,
)
from .registry import REGISTRY as BACKENDS
from .registry import backend_names, make_backend, register_backend
from .settings import BackendSettings, SamplingSettings

__all__ = [
    "BACKENDS",
    "DEFAULT_GEMINI_MODEL",
    "Backend",
    "BackendConfigError",
    "BackendError",
    "BackendSettings",
    "CallLimits",
    "ConcurrencyLimit",
    "FatalBackendError",
    "GeminiBackend",
    "GenerationParams",
    "RateLimiter",
    "RetryPolicy",
    "RetryableError",
    "SamplingSettings",
    "acall_or_error",
    "backend_names",
    "call_or_error",
    "find_retry_delay",
    "gemini_client_kwargs",
    "make_backend",
    "parse_duration",
    "register_backend",
]
