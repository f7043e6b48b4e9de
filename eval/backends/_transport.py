"""Which transport exceptions are transient, across the HTTP stacks the backends may run on."""

from __future__ import annotations

import importlib


def _classes(module: str, *names: str) -> tuple[type, ...]:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return ()
    return tuple(getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type))


# Timeouts, refused/reset connections and dropped streams: worth another attempt.
TRANSIENT_TRANSPORT_ERRORS: tuple[type, ...] = (
    TimeoutError,  # also asyncio.TimeoutError on Python >= 3.11
    ConnectionError,
    *_classes("httpx", "TransportError"),
    *_classes("httpx2", "TransportError"),
    *_classes("aiohttp", "ClientConnectionError", "ClientPayloadError", "ServerTimeoutError"),
)

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
FATAL_STATUS = frozenset({401, 403, 404})  # credentials or model name: every call would fail alike
